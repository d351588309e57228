/* An MPI code written against ADIOS2's C++ API, as an ADIOS2 user writes one: the test code of
 * the deisa ADIOS2 engine (tests/test_adios2.py).
 *
 *   mpirun -np 4 deisa_adios2_ragged CONFIG.xml OUTPUT STEPS [--ghosts | --column-major | --span | --misuse local|span-twice|read|no-close|bad-selection|column-major-selection|types-differ]
 *
 * Writes STEPS steps to OUTPUT through io `SimulationOutput', whose engine CONFIG.xml chooses
 * (BP5, or deisa): a 13 x 10 global array `U' (double, a sync Put) and `V' (int32, a deferred
 * Put) over a ragged 2-D decomposition (uneven blocks, from MPI_Dims_create's grid), and two
 * global single values, `step' (int) and `time' (double).  On odd steps PerformPuts comes
 * before EndStep and the code overwrites V's buffer after it: what is written must be the
 * buffer at PerformPuts, as BP5 writes it.  --span Puts U and V as Spans (Put(variable): the
 * code writes into the engine's memory), U initialized with -7.5 and written through data() but
 * for its block's last element (left at -7.5), V written element by element through operator[].
 * --misuse makes it do what the deisa engine refuses: a local array, a second Span Put of U in a
 * step (span-twice), a reader, a memory selection whose buffer is too small for the block;
 * --misuse no-close leaves the engine to the ADIOS object's destructor; --misuse types-differ
 * defines a variable `W' as double on rank 0 and int32 on the others, and Puts it.
 * --ghosts puts U and V from buffers with ghost cells (uneven: 1 before and 2 after the block
 * on the first axis, 2 and 1 on the second, filled with garbage) through SetMemorySelection,
 * as a stencil code does; from step 3 on V's selection is reset ({{}, {}}) and V is Put from a
 * buffer of its own size.  --column-major declares the io column-major
 * (ArrayOrdering::ColumnMajor, a Fortran code's order) and gives every dimension in that order,
 * reversed, the buffers unchanged: a row-major reader sees the same arrays as without it;
 * --misuse column-major-selection adds --ghosts' memory selections, which BP5 reads in the
 * order of the code's language (C++: row-major) whatever the io's.  An error is one line on
 * rank 0's stderr and exit status 1.
 */

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <adios2.h>

namespace {

constexpr size_t NX = 13;
constexpr size_t NY = 10;

/// A ragged split of `size' into `parts': part 0 is the largest, the others share the rest
void ragged_split(size_t size, int parts, int index, size_t& start, size_t& count)
{
	const size_t rest = size / 2 / parts;
	const size_t first = size - rest * (parts - 1);
	start = index == 0 ? 0 : first + rest * (index - 1);
	count = index == 0 ? first : rest;
}

void run(const std::string& config, const std::string& output, int steps, const std::string& misuse)
{
	int rank = 0, size = 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int dims[2] = {0, 0};
	MPI_Dims_create(size, 2, dims);
	size_t start[2], count[2];
	ragged_split(NX, dims[0], rank / dims[1], start[0], count[0]);
	ragged_split(NY, dims[1], rank % dims[1], start[1], count[1]);

	adios2::ADIOS adios(config, MPI_COMM_WORLD);
	// --column-major: a row-major buffer of R x C is a column-major one of C x R
	const bool column_major = misuse == "column-major" || misuse == "column-major-selection";
	const auto order = [column_major](adios2::Dims dims) {
		if (column_major) std::reverse(dims.begin(), dims.end());
		return dims;
	};
	adios2::IO io = column_major ? adios.DeclareIO("SimulationOutput", adios2::ArrayOrdering::ColumnMajor) : adios.DeclareIO("SimulationOutput");
	auto var_u = io.DefineVariable<double>("U", order({NX, NY}), order({start[0], start[1]}), order({count[0], count[1]}));
	auto var_v = io.DefineVariable<int32_t>("V", order({NX, NY}), order({start[0], start[1]}), order({count[0], count[1]}));
	auto var_step = io.DefineVariable<int>("step");
	auto var_time = io.DefineVariable<double>("time");
	if (misuse == "local") io.DefineVariable<double>("L", {}, {}, {count[0]});
	if (misuse == "types-differ") { // one variable, two types: rank 0's double, the others' int32
		if (rank == 0) io.DefineVariable<double>("W", {2}, {0}, {1});
		if (rank != 0) io.DefineVariable<int32_t>("W", {2}, {1}, {1});
	}
	adios2::Engine writer = io.Open(output, misuse == "read" ? adios2::Mode::Read : adios2::Mode::Write);

	// --ghosts: the block at `before' in a buffer of `rows' x `cols' (the ghost cells around it)
	const bool ghosts = misuse == "ghosts" || misuse == "bad-selection" || misuse == "column-major-selection";
	const size_t before[2] = {ghosts ? 1u : 0u, ghosts ? 2u : 0u};
	const size_t rows = count[0] + (ghosts ? 3 : 0), cols = count[1] + (ghosts ? 3 : 0);
	if (ghosts) {
		const adios2::Dims memory_start{before[0], misuse == "bad-selection" ? 4 : before[1]};
		var_u.SetMemorySelection({order(memory_start), order({rows, cols})});
		var_v.SetMemorySelection({order(memory_start), order({rows, cols})});
	}
	std::vector<double> u(rows * cols);
	std::vector<int32_t> v(rows * cols), v_alone(count[0] * count[1]);
	for (int step = 0; step < steps; ++step) {
		std::fill(u.begin(), u.end(), -999.0); // the ghost cells: never written
		std::fill(v.begin(), v.end(), -999);
		for (size_t i = 0; i < count[0]; ++i) {
			for (size_t j = 0; j < count[1]; ++j) {
				const size_t gi = start[0] + i, gj = start[1] + j, at = (before[0] + i) * cols + before[1] + j;
				u[at] = std::sin(0.3 * gi + step) * std::cos(0.2 * gj) + 1e-3 * rank;
				v[at] = v_alone[i * count[1] + j] = static_cast<int32_t>(gi * 1000 + gj + step * 100000);
			}
		}
		const bool reset = ghosts && step >= 3;
		if (ghosts && step == 3) var_v.SetMemorySelection({{}, {}}); // no selection: V's own buffer
		double time = 0.125 * step;
		writer.BeginStep();
		writer.Put(var_step, step);
		writer.Put(var_time, time);
		if (misuse == "span" || misuse == "span-twice") {
			auto u_span = writer.Put(var_u, true, -7.5);
			std::copy(u.begin(), u.end() - 1, u_span.data()); // the last element: the initial value
			auto v_span = writer.Put(var_v);
			for (size_t at = 0; at < v_span.size(); ++at) {
				v_span[at] = v[at];
			}
			if (misuse == "span-twice") writer.Put(var_u);
		} else {
			writer.Put(var_u, u.data(), adios2::Mode::Sync);
			writer.Put(var_v, reset ? v_alone.data() : v.data(), adios2::Mode::Deferred);
		}
		if (step % 2 == 1) {
			writer.PerformPuts();
			std::fill(v.begin(), v.end(), -1); // after PerformPuts: not written
			std::fill(v_alone.begin(), v_alone.end(), -1);
		}
		if (misuse == "types-differ") {
			if (rank == 0) writer.Put(io.InquireVariable<double>("W"), time, adios2::Mode::Sync);
			if (rank != 0) writer.Put(io.InquireVariable<int32_t>("W"), step, adios2::Mode::Sync);
		}
		std::fill(u.begin(), u.end(), -1.0); // after a sync Put: not written
		writer.EndStep();
	}
	if (misuse != "no-close") writer.Close(); // else the engine is closed by the ADIOS object's destructor
}

} // namespace

int main(int argc, char* argv[])
{
	MPI_Init(&argc, &argv);
	int rank = 0;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	int status = 0;
	const std::string option = argc == 5 ? argv[4] : "";
	const bool alone = option == "--ghosts" || option == "--column-major" || option == "--span"; // an option without a value
	if (argc != 4 && !alone && !(argc == 6 && std::string(argv[4]) == "--misuse")) {
		if (rank == 0) {
			std::
				fprintf(stderr, "usage: %s CONFIG.xml OUTPUT STEPS [--ghosts | --column-major | --span | --misuse local|span-twice|read|no-close|bad-selection|column-major-selection|types-differ]\n", argv[0]);
		}
		status = 2;
	} else {
		try {
			run(argv[1], argv[2], std::stoi(argv[3]), alone ? option.substr(2) : argc == 6 ? argv[5] : "");
		} catch (const std::exception& e) {
			if (rank == 0) std::fprintf(stderr, "%s\n", e.what());
			status = 1;
		}
	}
	MPI_Finalize();
	return status;
}
