/* An ADIOS2 code with attributes, written against ADIOS2's C++ API alone: the attributes test
 * code of the deisa ADIOS2 engine (tests/test_adios2_attributes.py, docs/adios2.md).
 *
 *   mpirun -np N deisa_adios2_attributes CONFIG.xml OUTPUT STEPS
 *
 * io `SimulationOutput' (its engine from CONFIG.xml), one global array T (NX x NY doubles, one
 * row band a rank) and a global single value `step'; its attributes, every kind ADIOS2 has:
 *
 * - global ones: a string (`author'), an array of strings (`keywords'), an int32 (`version'), an
 *   array of doubles (`grid'), a uint8 and a float (`flag', `ratio': 0.1f, whose double is not
 *   0.1), defined before Open;
 * - T's own (`T/units', `T/unitSI', `T/position', `T/axisLabels'), defined with ADIOS2's
 *   variable attributes (DefineAttribute(name, value, "T"));
 * - one that changes every step (`time', modifiable: 0.25 * step) and one that changes at
 *   step 2 (`T/units', modifiable: "K", then "degC");
 * - one defined at step 1 (`late'), and an int64 array of T's defined at step 3 (`T/counts').
 *
 * Every rank defines the same attributes, as ADIOS2's model has it.
 */

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <adios2.h>

namespace {

constexpr std::size_t NY = 5;

void run(const std::string& config, const std::string& output, int steps)
{
	int rank = 0, nranks = 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	const std::size_t rows = 2, nx = rows * static_cast<std::size_t>(nranks);
	adios2::ADIOS adios(config, MPI_COMM_WORLD);
	adios2::IO io = adios.DeclareIO("SimulationOutput");
	auto var_t = io.DefineVariable<double>("T", {nx, NY}, {rows * static_cast<std::size_t>(rank), 0}, {rows, NY});
	auto var_step = io.DefineVariable<int32_t>("step");
	io.DefineAttribute<std::string>("author", "deisa tests <attributes.cxx>");
	const std::vector<std::string> keywords{"heat", "in situ"};
	io.DefineAttribute<std::string>("keywords", keywords.data(), keywords.size());
	io.DefineAttribute<int32_t>("version", 3);
	const std::vector<double> grid{0.5, 0.25};
	io.DefineAttribute<double>("grid", grid.data(), grid.size());
	io.DefineAttribute<uint8_t>("flag", 7);
	io.DefineAttribute<float>("ratio", 0.1f);
	io.DefineAttribute<double>("unitSI", 1e-3, "T");
	const std::vector<double> position{0.5, 0.0};
	io.DefineAttribute<double>("position", position.data(), position.size(), "T");
	const std::vector<std::string> labels{"x", "y"};
	io.DefineAttribute<std::string>("axisLabels", labels.data(), labels.size(), "T");
	adios2::Engine writer = io.Open(output, adios2::Mode::Write);
	std::vector<double> field(rows * NY);
	for (int step = 0; step < steps; ++step) {
		writer.BeginStep();
		io.DefineAttribute<double>("time", 0.25 * step, "", "/", true);
		io.DefineAttribute<std::string>("units", step < 2 ? "K" : "degC", "T", "/", true);
		if (step == 1) io.DefineAttribute<std::string>("late", "defined at step 1");
		if (step == 3) {
			const std::vector<int64_t> counts{-1, 1LL << 40, 3};
			io.DefineAttribute<int64_t>("counts", counts.data(), counts.size(), "T");
		}
		for (std::size_t i = 0; i < field.size(); ++i) {
			field[i] = 1000.0 * step + 100.0 * rank + static_cast<double>(i);
		}
		writer.Put(var_t, field.data());
		if (rank == 0) writer.Put(var_step, static_cast<int32_t>(step));
		writer.EndStep();
	}
	writer.Close();
}

} // namespace

int main(int argc, char* argv[])
{
	MPI_Init(&argc, &argv);
	int rank = 0;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	if (argc != 4) {
		if (rank == 0) std::fprintf(stderr, "usage: %s CONFIG.xml OUTPUT STEPS\n", argv[0]);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	run(argv[1], argv[2], std::stoi(argv[3]));
	if (rank == 0) std::printf("attributes writer: done\n");
	MPI_Finalize();
	return 0;
}
