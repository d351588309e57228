/* A coordinator/worker MPI code whose I/O runs on a sub-communicator, written against ADIOS2's
 * C++ API as such codes (MPMD, coupled codes) are: the test code of the deisa ADIOS2 engine's
 * communicator (tests/test_adios2.py).
 *
 *   mpirun -np N deisa_adios2_subcomm CONFIG.xml OUTPUT STEPS [--open-comm]
 *
 * Rank 0 of MPI_COMM_WORLD coordinates: for each step it sends every writer the step's time,
 * and at the end it gathers their checksums; it never opens the io.  Ranks 1..N-1 write
 * through their own communicator (MPI_Comm_split), io `SimulationOutput', whose engine
 * CONFIG.xml chooses: a global array `T' (double, (3 + 4 + ... ) x 6: writer w has 3 + w rows,
 * a sync Put) and a global single value `time' (double), STEPS steps.  By default the writers
 * create their ADIOS object on their communicator (adios2::ADIOS(config, comm)); with
 * --open-comm every rank creates it on MPI_COMM_WORLD and the writers give their communicator
 * to Open (IO::Open(name, mode, comm)).  An engine error is left uncaught: the code stops as
 * an ADIOS2 code does, with the exception's what().
 */

#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include <adios2.h>

namespace {

constexpr size_t NY = 6;
constexpr int TIME_TAG = 1;
constexpr int SUM_TAG = 2;

/// Writer `w' (0-based)'s first row and its count
void rows(int w, size_t& start, size_t& count)
{
	start = 0;
	for (int v = 0; v < w; ++v) {
		start += 3 + v;
	}
	count = 3 + w;
}

void coordinate(int writers, int steps)
{
	for (int step = 0; step < steps; ++step) {
		const double time = 0.25 * step;
		for (int w = 1; w <= writers; ++w) {
			MPI_Send(&time, 1, MPI_DOUBLE, w, TIME_TAG, MPI_COMM_WORLD);
		}
	}
	double total = 0;
	for (int w = 1; w <= writers; ++w) {
		double sum = 0;
		MPI_Recv(&sum, 1, MPI_DOUBLE, w, SUM_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		total += sum;
	}
	std::printf("coordinator: %d writers, %d steps, checksum %.17g\n", writers, steps, total);
}

void write(adios2::ADIOS& adios, MPI_Comm group, bool open_comm, const std::string& output, int steps)
{
	int w = 0, writers = 0;
	MPI_Comm_rank(group, &w);
	MPI_Comm_size(group, &writers);
	size_t start = 0, count = 0, total = 0, last = 0;
	rows(w, start, count);
	rows(writers - 1, total, last);
	total += last;
	adios2::IO io = adios.DeclareIO("SimulationOutput");
	adios2::Variable<double> T = io.DefineVariable<double>("T", {total, NY}, {start, 0}, {count, NY});
	adios2::Variable<double> time_var = io.DefineVariable<double>("time");
	adios2::Engine writer = open_comm ? io.Open(output, adios2::Mode::Write, group) : io.Open(output, adios2::Mode::Write);
	std::vector<double> values(count * NY);
	double sum = 0;
	for (int step = 0; step < steps; ++step) {
		double time = 0;
		MPI_Recv(&time, 1, MPI_DOUBLE, 0, TIME_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		for (size_t i = 0; i < count; ++i) {
			for (size_t j = 0; j < NY; ++j) {
				values[i * NY + j] = time + 100.0 * (start + i) + j + 1.0 / (3 + w);
				sum += values[i * NY + j];
			}
		}
		writer.BeginStep();
		writer.Put(T, values.data(), adios2::Mode::Sync);
		if (w == 0) writer.Put(time_var, time);
		writer.EndStep();
	}
	writer.Close();
	MPI_Send(&sum, 1, MPI_DOUBLE, 0, SUM_TAG, MPI_COMM_WORLD);
}

} // namespace

int main(int argc, char* argv[])
{
	MPI_Init(&argc, &argv);
	int rank = 0, size = 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	const bool open_comm = argc == 5 && std::string(argv[4]) == "--open-comm";
	if ((argc != 4 && !open_comm) || size < 2) {
		if (rank == 0) std::fprintf(stderr, "usage: mpirun -np N (N >= 2) %s CONFIG.xml OUTPUT STEPS [--open-comm]\n", argv[0]);
		MPI_Finalize();
		return 2;
	}
	const std::string config = argv[1], output = argv[2];
	const int steps = std::stoi(argv[3]);
	MPI_Comm group;
	MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 1, rank, &group);
	if (open_comm) {
		adios2::ADIOS adios(config, MPI_COMM_WORLD); // every rank: ADIOS2 reads the XML on rank 0
		if (rank == 0) {
			coordinate(size - 1, steps);
		} else {
			write(adios, group, true, output, steps);
		}
	} else if (rank == 0) {
		coordinate(size - 1, steps);
	} else {
		adios2::ADIOS adios(config, group);
		write(adios, group, false, output, steps);
	}
	if (group != MPI_COMM_NULL) MPI_Comm_free(&group);
	MPI_Finalize();
	return 0;
}
