/* Publishes a field from every rank and its top row from the top ranks only, through PDI.
 *
 *     mpirun -np 4 deisa_edge_driver PDI_CONFIG.yml NSTEPS
 *
 * 4 ranks on a 2 x 2 grid of 4 x 3 blocks of an 8 x 6 field; value at (step, x, y) is
 * step * 1e6 + x * 1e3 + y, so a misplaced block shows.  The top row of ranks (0 and 1) also
 * exposes `top', the first row of its block, and `edge_comm', the communicator of those ranks
 * (MPI_COMM_NULL on the others, from MPI_Comm_split with MPI_UNDEFINED).  The other ranks
 * expose a `top' of NaNs: the plugin must never publish it (tests/test_pdi_plugin.py).
 */

#include <mpi.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <paraconf.h>
#include <pdi.h>

int main(int argc, char* argv[])
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s PDI_CONFIG.yml NSTEPS\n", argv[0]);
		return 2;
	}
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 4) {
		fprintf(stderr, "%s needs 4 ranks, got %d\n", argv[0], size);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	const int nsteps = atoi(argv[2]);
	const int x0 = 4 * (rank / 2), y0 = 3 * (rank % 2);
	const int on_edge = x0 == 0;
	MPI_Comm edge_comm;
	MPI_Comm_split(MPI_COMM_WORLD, on_edge ? 0 : MPI_UNDEFINED, rank, &edge_comm);

	PC_tree_t config = PC_parse_path(argv[1]);
	PDI_init(config);
	PDI_expose("nsteps", &nsteps, PDI_OUT);
	PDI_expose("x0", &x0, PDI_OUT);
	PDI_expose("y0", &y0, PDI_OUT);
	PDI_expose("edge_comm", &edge_comm, PDI_OUT);
	double field[4][3], top[3];
	for (int step = 0; step < nsteps; ++step) {
		for (int x = 0; x < 4; ++x) {
			for (int y = 0; y < 3; ++y) {
				field[x][y] = step * 1e6 + (x0 + x) * 1e3 + (y0 + y);
			}
		}
		for (int y = 0; y < 3; ++y) {
			top[y] = on_edge ? field[0][y] : NAN;
		}
		PDI_multi_expose("iter", "step", &step, PDI_OUT, "field", field, PDI_OUT, "top", top, PDI_OUT, NULL);
	}
	PDI_finalize();
	PC_tree_destroy(&config);
	if (edge_comm != MPI_COMM_NULL) MPI_Comm_free(&edge_comm);
	MPI_Finalize();
	return 0;
}
