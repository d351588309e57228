/* An MPI code written against ADIOS2's C++ API whose data moves, as a particle or many-box
 * code's does: the test code of the deisa ADIOS2 engine's moving data (tests/test_adios2_moving.py).
 *
 *   mpirun -np N deisa_adios2_moving CONFIG.xml OUTPUT STEPS     (N >= 2)
 *
 * Writes STEPS steps to OUTPUT through io `SimulationOutput', whose engine CONFIG.xml chooses
 * (BP5, or deisa):
 * - `px' (double), a particle array: its global length and each rank's count change at every
 *   step (SetShape, SetSelection, offsets from MPI_Exscan); rank 0 Puts its particles in two
 *   Puts (two selections) where it has more than one (from step 1), rank 1 Puts none at step 2
 *   (no Put at all), rank N-1 an empty selection (count 0) at step 3: one block per rank at
 *   step 0, a fixed array whose later steps move;
 * - `pj' (float), N_j x 3 particles as a joined array ({JoinedDim, 3}: each rank gives its count
 *   only), the counts changing, rank 1 Putting a count of 0 at step 1;
 * - `rho' (double), a 16 x 12 field written as two boxes per rank (strips of rows r and r + N
 *   of 2N), which move to the next rank from step 3 on; the first box a sync Put (a Span Put
 *   on odd steps: the code writes into the engine's memory), the second a
 *   deferred Put from a buffer with ghost cells (SetMemorySelection), PerformPuts on odd steps
 *   followed by the buffer's overwrite; no rank writes it at step 4;
 * - `T' (int32), a 16 x 12 field of one block per rank (strips of rows) for steps 0 and 1, then
 *   two boxes per rank (each strip cut in two along the columns), then its shape grown to
 *   20 x 12 from step 4 (SetShape);
 * - `age' (int64), defined at step 2: a 2N array of two elements per rank;
 * - `nparticles' (int64), a global single value defined at step 1; `step' (int32), one from step 0;
 * - `mass' (double), an N array of one element per rank defined before Open and first Put at
 *   step 2.
 * Every value is a function of its global index and the step alone, whoever writes it.  An error
 * is one line on rank 0's stderr and exit status 1.
 */

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <adios2.h>

namespace {

constexpr size_t NX = 16;
constexpr size_t NY = 12;

/// The number of particles of `rank' at `step'
size_t particles(int rank, int step)
{
	return static_cast<size_t>((rank * 3 + step * 5) % 7 + 1);
}

/// Rows [first, last) of strip `strip' of `strips' over `rows'
void strip_rows(size_t rows, size_t strip, size_t strips, size_t& first, size_t& last)
{
	first = rows * strip / strips;
	last = rows * (strip + 1) / strips;
}

double rho_at(size_t i, size_t j, int step)
{
	return 100.0 * static_cast<double>(i) + static_cast<double>(j) + 0.25 * step;
}

void run(const std::string& config, const std::string& output, int steps)
{
	int rank = 0, size = 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size < 2) throw std::invalid_argument{"deisa_adios2_moving needs at least 2 ranks"};
	const size_t nranks = static_cast<size_t>(size), me = static_cast<size_t>(rank);

	adios2::ADIOS adios(config, MPI_COMM_WORLD);
	adios2::IO io = adios.DeclareIO("SimulationOutput");
	auto var_px = io.DefineVariable<double>("px", {1}, {0}, {1});
	auto var_pj = io.DefineVariable<float>("pj", {adios2::JoinedDim, 3}, {}, {1, 3});
	auto var_rho = io.DefineVariable<double>("rho", {NX, NY}, {0, 0}, {1, 1});
	auto var_t = io.DefineVariable<int32_t>("T", {NX, NY}, {0, 0}, {1, 1});
	auto var_step = io.DefineVariable<int32_t>("step");
	auto var_mass = io.DefineVariable<double>("mass", {nranks}, {me}, {1});
	adios2::Variable<int64_t> var_age, var_nparticles;
	adios2::Engine writer = io.Open(output, adios2::Mode::Write);

	std::vector<double> px, rho_first;
	std::vector<float> pj;
	std::vector<int32_t> t_first, t_second;
	std::vector<int64_t> age(2);
	// the second box of rho: in a buffer with one ghost row before and after, two ghost columns after
	std::vector<double> rho_ghosts;
	for (int step = 0; step < steps; ++step) {
		writer.BeginStep();
		const int32_t step_value = step;
		writer.Put(var_step, step_value);
		if (step == 1) var_nparticles = io.DefineVariable<int64_t>("nparticles");
		if (step == 2) var_age = io.DefineVariable<int64_t>("age", {2 * nranks}, {2 * me}, {2});

		// px: a particle array, its shape and selections set at each step
		const size_t mine = (rank == 1 && step == 2) ? 0 : (rank == size - 1 && step == 3) ? 0 : particles(rank, step);
		unsigned long long count = mine, offset = 0, total = 0;
		MPI_Exscan(&count, &offset, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
		MPI_Allreduce(&count, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
		if (rank == 0) offset = 0;
		px.resize(mine);
		for (size_t i = 0; i < mine; ++i) {
			px[i] = 1000.0 * step + static_cast<double>(offset + i) + 0.5;
		}
		var_px.SetShape({total});
		if (rank == 0 && mine > 1) { // two Puts of two selections
			var_px.SetSelection({{0}, {1}});
			writer.Put(var_px, px.data(), adios2::Mode::Sync);
			var_px.SetSelection({{1}, {mine - 1}});
			writer.Put(var_px, px.data() + 1, adios2::Mode::Deferred);
		} else if (!(rank == 1 && step == 2)) { // rank 1 at step 2: no Put at all
			var_px.SetSelection({{offset}, {mine}});
			writer.Put(var_px, px.data(), adios2::Mode::Deferred);
		}
		if (rank == 0 && step >= 1) writer.Put(var_nparticles, static_cast<int64_t>(total)); // rank 0's value

		// pj: joined, N_j x 3
		const size_t joined = (rank == 1 && step == 1) ? 0 : particles(size - 1 - rank, step);
		pj.resize(joined * 3);
		for (size_t i = 0; i < joined; ++i) {
			for (size_t k = 0; k < 3; ++k) {
				pj[i * 3 + k] = static_cast<float>(rank * 100 + step * 10 + static_cast<int>(i)) + 0.125f * static_cast<float>(k);
			}
		}
		var_pj.SetSelection({{}, {joined, 3}});
		writer.Put(var_pj, pj.data(), adios2::Mode::Sync);

		// rho: two boxes per rank, strips r and r + N of 2N, moved to the next rank from step 3
		const size_t shift = step >= 3 ? 1 : 0;
		const size_t strips[2] = {(me + shift) % nranks, (me + shift) % nranks + nranks};
		size_t first = 0, last = 0;
		strip_rows(NX, strips[0], 2 * nranks, first, last);
		rho_first.assign((last - first) * NY, 0.0);
		for (size_t i = first; i < last; ++i) {
			for (size_t j = 0; j < NY; ++j) {
				rho_first[(i - first) * NY + j] = rho_at(i, j, step);
			}
		}
		const bool rho_written = step != 4; // no rank writes rho at step 4
		var_rho.SetMemorySelection({{}, {}});
		var_rho.SetSelection({{first, 0}, {last - first, NY}});
		if (rho_written && step % 2 == 0) writer.Put(var_rho, rho_first.data(), adios2::Mode::Sync);
		if (rho_written && step % 2 == 1) { // a Span: the code writes into the engine's memory
			auto span = writer.Put(var_rho);
			std::copy(rho_first.begin(), rho_first.end(), span.data());
		}
		std::fill(rho_first.begin(), rho_first.end(), -1.0); // after a sync Put: not written
		strip_rows(NX, strips[1], 2 * nranks, first, last);
		const size_t rows = last - first + 2, cols = NY + 2;
		rho_ghosts.assign(rows * cols, -999.0);
		for (size_t i = first; i < last; ++i) {
			for (size_t j = 0; j < NY; ++j) {
				rho_ghosts[(i - first + 1) * cols + j] = rho_at(i, j, step);
			}
		}
		var_rho.SetSelection({{first, 0}, {last - first, NY}});
		var_rho.SetMemorySelection({{1, 0}, {rows, cols}});
		if (rho_written) writer.Put(var_rho, rho_ghosts.data(), adios2::Mode::Deferred);

		// T: one block per rank, then two, then in a grown shape
		const size_t t_rows = step >= 4 ? NX + 4 : NX;
		var_t.SetShape({t_rows, NY});
		strip_rows(t_rows, me, nranks, first, last);
		const auto t_box = [&](std::vector<int32_t>& values, size_t j0, size_t j1) {
			values.resize((last - first) * (j1 - j0));
			for (size_t i = first; i < last; ++i) {
				for (size_t j = j0; j < j1; ++j) {
					values[(i - first) * (j1 - j0) + j - j0] = static_cast<int32_t>(10000 * step + 100 * i + j);
				}
			}
			var_t.SetSelection({{first, j0}, {last - first, j1 - j0}});
			writer.Put(var_t, values.data(), adios2::Mode::Deferred);
		};
		if (step < 2) {
			t_box(t_first, 0, NY);
		} else {
			t_box(t_first, 0, NY / 3);
			t_box(t_second, NY / 3, NY);
		}

		if (step >= 2) {
			age[0] = 7 * step + 2 * rank;
			age[1] = 7 * step + 2 * rank + 1;
			writer.Put(var_age, age.data(), adios2::Mode::Sync);
			writer.Put(var_mass, rho_at(me, 0, step)); // defined before Open, first Put now
		}
		if (step % 2 == 1) {
			writer.PerformPuts();
			std::fill(rho_ghosts.begin(), rho_ghosts.end(), -1.0); // after PerformPuts: not written
			std::fill(px.begin(), px.end(), -1.0);
			std::fill(t_first.begin(), t_first.end(), -1);
			std::fill(t_second.begin(), t_second.end(), -1);
		}
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
	int status = 0;
	if (argc != 4) {
		if (rank == 0) std::fprintf(stderr, "usage: %s CONFIG.xml OUTPUT STEPS\n", argv[0]);
		status = 2;
	} else {
		try {
			run(argv[1], argv[2], std::stoi(argv[3]));
		} catch (const std::exception& e) {
			if (rank == 0) std::fprintf(stderr, "%s\n", e.what());
			status = 1;
		}
	}
	MPI_Finalize();
	return status;
}
