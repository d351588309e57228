/* A particle code through PDI: counts that change at every step, a rank with none, and a field
 * written as several boxes a rank that move between ranks.
 *
 *     mpirun -np N deisa_particles PDI_CONFIG.yml NSTEPS
 *
 * At each step, each rank holds `npart' particles (a count that changes with the step and the
 * rank; rank 1 holds none at step 1, as does every rank at a step where the formula gives 0):
 * their positions `x' (double), their momenta `p' (npart x 3 doubles: a record of three
 * components a particle) and identifiers `id' (int64: step * 1e6 + global index), exposed
 * with `step', `npart', `offset' (the particles of the ranks before this one) and `ntotal' (of
 * every rank) in one `particles' multi-expose.  Then the field `rho' (4 x 4N doubles, value
 * step * 1e6 + row * 1e3 + column, its shape `field_shape' exposed once) is exposed as 2 boxes
 * of 4 x 2 per rank, one expose each with the box's `bx' and `by' (its first row and column)
 * and `box_start' ({bx, by}: what a decl_hdf5 YAML writes as the box's `start' attribute for
 * deisa.Replay), followed by the event `end_step'.  The
 * boxes belong to rank (box / 2 + shift) % N, where shift is 0 before step 2 and 1 from then on:
 * the boxes move between ranks at step 2; at step 3 the last rank's boxes go to rank 0, and the
 * last rank exposes none (it still reaches `end_step').  The same binary writes HDF5 (decl_hdf5) or goes in
 * situ (deisa) by its YAML: tests/test_pdi_moving.py compares them bitwise.
 */

#include <mpi.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <paraconf.h>
#include <pdi.h>

/// the number of particles of `rank' at `step'
static int particle_count(int rank, int step)
{
	if (rank == 1 && step == 1) return 0;
	return (3 + 5 * rank + 7 * step) % 9;
}

int main(int argc, char* argv[])
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s PDI_CONFIG.yml NSTEPS\n", argv[0]);
		return 2;
	}
	MPI_Init(&argc, &argv);
	int rank, nranks;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	const int nsteps = atoi(argv[2]);

	PC_tree_t config = PC_parse_path(argv[1]);
	PDI_init(config);
	PDI_expose("nsteps", &nsteps, PDI_OUT);
	PDI_expose("nranks", &nranks, PDI_OUT);
	PDI_expose("rank", &rank, PDI_OUT);
	const int field_shape[2] = {4, 4 * nranks};
	PDI_expose("field_shape", field_shape, PDI_OUT);
	double x[9];
	int64_t id[9];
	double p[9][3];
	double rho[4][2];
	for (int step = 0; step < nsteps; ++step) {
		int npart = particle_count(rank, step), offset = 0, ntotal = 0;
		for (int other = 0; other < nranks; ++other) {
			if (other < rank) offset += particle_count(other, step);
			ntotal += particle_count(other, step);
		}
		for (int i = 0; i < npart; ++i) {
			x[i] = sin(131.0 * rank + 17.0 * step + i);
			id[i] = (int64_t)step * 1000000 + offset + i;
			for (int k = 0; k < 3; ++k)
				p[i][k] = x[i] + 10.0 * (k + 1);
		}
		PDI_multi_expose(
			"particles",
			"step",
			&step,
			PDI_OUT,
			"npart",
			&npart,
			PDI_OUT,
			"offset",
			&offset,
			PDI_OUT,
			"ntotal",
			&ntotal,
			PDI_OUT,
			"x",
			x,
			PDI_OUT,
			"id",
			id,
			PDI_OUT,
			"p",
			p,
			PDI_OUT,
			NULL
		);
		const int shift = step >= 2 ? 1 : 0;
		for (int box = 0; box < 2 * nranks; ++box) {
			int owner = (box / 2 + shift) % nranks;
			if (step == 3 && owner == nranks - 1) owner = 0;
			if (owner != rank) continue;
			int bx = 0, by = 2 * box;
			for (int row = 0; row < 4; ++row) {
				for (int col = 0; col < 2; ++col) {
					rho[row][col] = step * 1e6 + (bx + row) * 1e3 + (by + col);
				}
			}
			const int box_start[2] = {bx, by};
			PDI_multi_expose("box", "bx", &bx, PDI_OUT, "by", &by, PDI_OUT, "box_start", box_start, PDI_OUT, "rho", rho, PDI_OUT, NULL);
		}
		PDI_event("end_step");
	}
	PDI_finalize();
	PC_tree_destroy(&config);
	MPI_Finalize();
	return 0;
}
