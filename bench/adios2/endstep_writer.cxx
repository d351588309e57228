// The writer of bench.adios2_endstep: each MPI rank Puts one block of MIB MiB per step through
// the engine its ADIOS2 XML names (the deisa plugin engine, BP5, SST...), and times every step
// (BeginStep + Put + EndStep) and a memcpy of the same block. Before each step, untimed, COMPUTE
// passes over the block (an add in place, memory-bound like a stencil; bench.publish's compute):
// 0 steps back to back. Written against ADIOS2's C++ API only, as a user's code is.
//
//   mpirun -n R deisa_bench_endstep CONFIG.xml IO_NAME TARGET MIB STEPS [COMPUTE]
//
// Rank 0 prints one JSON object: per step the slowest rank's time and its start (seconds since
// the epoch, for the reader's arrival times), and per repetition the slowest rank's memcpy.
#include <mpi.h>
#include <adios2.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

double now()
{
	using clock = std::chrono::system_clock;
	return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

double slowest(double seconds)
{
	double out = 0;
	MPI_Reduce(&seconds, &out, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	return out;
}

void print_list(const char* name, const std::vector<double>& values, bool last = false)
{
	std::printf("\"%s\": [", name);
	for (size_t i = 0; i < values.size(); ++i)
		std::printf(i ? ", %.9f" : "%.9f", values[i]);
	std::printf(last ? "]" : "], ");
}

} // namespace

int main(int argc, char** argv)
{
	MPI_Init(&argc, &argv);
	if (argc != 6 && argc != 7) {
		std::fprintf(stderr, "usage: %s CONFIG.xml IO_NAME TARGET MIB STEPS [COMPUTE]\n", argv[0]);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int rank = 0, ranks = 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &ranks);
	const size_t n = std::stoul(argv[4]) * 1048576 / sizeof(double);
	const int steps = std::stoi(argv[5]);
	const int compute = argc == 7 ? std::stoi(argv[6]) : 0;
	std::vector<double> block(n), copy(n, 0.0);
	for (size_t i = 0; i < n; ++i)
		block[i] = rank + 1e-9 * static_cast<double>(i);

	std::vector<double> memcpy_s, step_s, step_start;
	for (int k = 0; k < steps; ++k) {
		MPI_Barrier(MPI_COMM_WORLD);
		const double t0 = now();
		std::memcpy(copy.data(), block.data(), n * sizeof(double));
		memcpy_s.push_back(slowest(now() - t0));
	}
	{
		adios2::ADIOS adios(argv[1], MPI_COMM_WORLD);
		adios2::IO io = adios.DeclareIO(argv[2]);
		auto variable = io.DefineVariable<double>("block", {static_cast<size_t>(ranks), n}, {static_cast<size_t>(rank), 0}, {1, n});
		adios2::Engine engine = io.Open(argv[3], adios2::Mode::Write);
		for (int step = 0; step < steps; ++step) {
			for (int pass = 0; pass < compute; ++pass) {
				for (double& x: block)
					x += 1e-9;
				asm volatile("" : : "r"(block.data()) : "memory"); // a pass over memory each: no loop interchange
			}
			block[0] = step;
			MPI_Barrier(MPI_COMM_WORLD);
			const double t0 = now();
			engine.BeginStep();
			engine.Put(variable, block.data());
			engine.EndStep();
			const double t1 = now();
			step_s.push_back(slowest(t1 - t0));
			step_start.push_back(t0);
		}
		engine.Close();
	}
	if (rank == 0) {
		std::printf("{\"ranks\": %d, \"bytes_per_rank\": %zu, ", ranks, n * sizeof(double));
		print_list("memcpy_s", memcpy_s);
		print_list("step_s", step_s);
		print_list("step_start", step_start, true);
		std::printf("}\n");
		std::fflush(stdout);
	}
	MPI_Finalize();
	return 0;
}
