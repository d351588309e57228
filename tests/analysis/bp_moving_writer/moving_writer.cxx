// The writer of tests/analysis/test_replay_moving.py: 3 MPI ranks write, for 3 steps, through
// ADIOS2's C++ API as a particle or AMR code does (every value a formula of its step and global
// index, which the test recomputes):
//   p    particles joined along axis 0 (JoinedDim): each rank Puts 0, 1 or 2 blocks a step, of
//        counts that change (a rank with none, a block of none), value 100 step + 10 rank + k
//        + 0.001 i (block k, element i of it);
//   x    a 1-D array whose shape changes every step (SetShape), each rank's part Put as two
//        blocks (SetSelection), value 1000 step + global index;
//   rho  a (6, 8) field as four (3, 4) boxes, box b owned by rank (b + step / 2) % 3 (the
//        boxes move between ranks at step 2), value 1000 step + 8 row + column.
//
//   mpirun -n 3 deisa_test_bp_moving ENGINE TARGET
#include <mpi.h>
#include <adios2.h>

#include <string>
#include <vector>

namespace {

// p's block counts: [step][rank] -> counts of the rank's blocks
const std::vector<std::vector<std::vector<size_t>>> JOINED = {
	{{2, 1}, {}, {3}},
	{{1}, {2, 2}, {0}},
	{{}, {}, {4}},
};
// x's count on each rank: [step][rank]
const std::vector<std::vector<size_t>> COUNTS = {{5, 0, 7}, {6, 6, 6}, {1, 9, 2}};

void put_particles(adios2::Engine& engine, adios2::Variable<double>& p, int step, int rank)
{
	const auto& blocks = JOINED[step][rank];
	for (size_t k = 0; k < blocks.size(); ++k) {
		std::vector<double> data(blocks[k]);
		for (size_t i = 0; i < data.size(); ++i)
			data[i] = 100.0 * step + 10.0 * rank + k + 0.001 * i;
		p.SetSelection({{}, {blocks[k]}});
		engine.Put(p, data.data(), adios2::Mode::Sync);
	}
}

void put_x(adios2::Engine& engine, adios2::Variable<double>& x, int step, int rank)
{
	size_t total = 0, offset = 0;
	for (int r = 0; r < 3; ++r) {
		if (r < rank) offset += COUNTS[step][r];
		total += COUNTS[step][r];
	}
	x.SetShape({total});
	size_t mine = COUNTS[step][rank], half = mine / 2;
	for (auto [start, count]: {std::pair{offset, half}, std::pair{offset + half, mine - half}}) {
		std::vector<double> data(count);
		for (size_t i = 0; i < count; ++i)
			data[i] = 1000.0 * step + start + i;
		x.SetSelection({{start}, {count}});
		engine.Put(x, data.data(), adios2::Mode::Sync);
	}
}

void put_field(adios2::Engine& engine, adios2::Variable<double>& rho, int step, int rank)
{
	for (size_t b = 0; b < 4; ++b) {
		if (static_cast<int>((b + step / 2) % 3) != rank) continue;
		size_t row = 3 * (b / 2), col = 4 * (b % 2);
		std::vector<double> data(12);
		for (size_t i = 0; i < 3; ++i)
			for (size_t j = 0; j < 4; ++j)
				data[4 * i + j] = 1000.0 * step + 8 * (row + i) + col + j;
		rho.SetSelection({{row, col}, {3, 4}});
		engine.Put(rho, data.data(), adios2::Mode::Sync);
	}
}

} // namespace

int main(int argc, char** argv)
{
	MPI_Init(&argc, &argv);
	int rank = 0;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	adios2::ADIOS adios(MPI_COMM_WORLD);
	adios2::IO io = adios.DeclareIO("moving");
	io.SetEngine(argv[1]);
	auto p = io.DefineVariable<double>("p", {adios2::JoinedDim}, {}, {1});
	auto x = io.DefineVariable<double>("x", {1}, {0}, {1});
	auto rho = io.DefineVariable<double>("rho", {6, 8}, {0, 0}, {3, 4});
	adios2::Engine engine = io.Open(argv[2], adios2::Mode::Write);
	for (int step = 0; step < 3; ++step) {
		engine.BeginStep();
		put_particles(engine, p, step, rank);
		put_x(engine, x, step, rank);
		put_field(engine, rho, step, rank);
		engine.EndStep();
	}
	engine.Close();
	MPI_Finalize();
	return 0;
}
