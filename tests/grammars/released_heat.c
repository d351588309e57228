/* A simulation in the shape of the released DEISA plugin's example (pdidev/deisa, example/).
 *
 * Usage: mpirun -np P released_heat config.yml simulation.yml
 *
 * config.yml holds `global_size' ({height, width}, ghosts excluded), `parallelism' ({height,
 * width}: the process grid), `MaxtimeSteps' and, optionally, `extra_steps' (steps computed and
 * exposed past MaxtimeSteps); simulation.yml holds the PDI specification tree under `pdi', as
 * the example's did.  The local field `local_t' has one ghost layer on each side: its type in
 * the YAML selects the inside with `subsize' and `start'.  Every cell starts with a value of its
 * own (its global position), the ghosts with -1 until the first exchange; the domain's boundary
 * ghosts keep -1.  The example's code, with its exchange fixed (it sent doubles as MPI_INT).
 */

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include <paraconf.h>
#include <pdi.h>

/// size of the local data as [HEIGHT, WIDTH] including ghosts
int dsize[2];

/// 2D size of the process grid as [HEIGHT, WIDTH]
int psize[2];

/// 2D rank of the local process in the process grid as [YY, XX]
int pcoord[2];

static void init(double dat[dsize[0]][dsize[1]])
{
	for (int yy = 0; yy < dsize[0]; ++yy) {
		for (int xx = 0; xx < dsize[1]; ++xx) {
			int inside = yy > 0 && yy < dsize[0] - 1 && xx > 0 && xx < dsize[1] - 1;
			int gy = pcoord[0] * (dsize[0] - 2) + yy - 1, gx = pcoord[1] * (dsize[1] - 2) + xx - 1;
			dat[yy][xx] = inside ? gy * 1000.0 + gx : -1;
		}
	}
}

/// The next time-step from the current one: a 5-point stencil inside, the ghosts kept
static void iter(double cur[dsize[0]][dsize[1]], double next[dsize[0]][dsize[1]])
{
	for (int yy = 0; yy < dsize[0]; ++yy) {
		for (int xx = 0; xx < dsize[1]; ++xx) {
			if (yy == 0 || xx == 0 || yy == dsize[0] - 1 || xx == dsize[1] - 1) {
				next[yy][xx] = cur[yy][xx];
			} else {
				next[yy][xx] = cur[yy][xx] * .5 + cur[yy][xx - 1] * .125 + cur[yy][xx + 1] * .125 + cur[yy - 1][xx] * .125 + cur[yy + 1][xx] * .125;
			}
		}
	}
}

/// Exchanges ghost values with the neighbours (MPI_PROC_NULL on the domain's boundary)
static void exchange(MPI_Comm cart_comm, double cur[dsize[0]][dsize[1]])
{
	MPI_Datatype column, row;
	MPI_Type_vector(dsize[0] - 2, 1, dsize[1], MPI_DOUBLE, &column);
	MPI_Type_commit(&column);
	MPI_Type_contiguous(dsize[1] - 2, MPI_DOUBLE, &row);
	MPI_Type_commit(&row);
	int src, dst;
	MPI_Cart_shift(cart_comm, 0, 1, &src, &dst);
	MPI_Sendrecv(&cur[dsize[0] - 2][1], 1, row, dst, 100, &cur[0][1], 1, row, src, 100, cart_comm, MPI_STATUS_IGNORE);
	MPI_Cart_shift(cart_comm, 0, -1, &src, &dst);
	MPI_Sendrecv(&cur[1][1], 1, row, dst, 100, &cur[dsize[0] - 1][1], 1, row, src, 100, cart_comm, MPI_STATUS_IGNORE);
	MPI_Cart_shift(cart_comm, 1, 1, &src, &dst);
	MPI_Sendrecv(&cur[1][dsize[1] - 2], 1, column, dst, 100, &cur[1][0], 1, column, src, 100, cart_comm, MPI_STATUS_IGNORE);
	MPI_Cart_shift(cart_comm, 1, -1, &src, &dst);
	MPI_Sendrecv(&cur[1][1], 1, column, dst, 100, &cur[1][dsize[1] - 1], 1, column, src, 100, cart_comm, MPI_STATUS_IGNORE);
	MPI_Type_free(&column);
	MPI_Type_free(&row);
}

static int read_int(PC_tree_t conf, const char* path, long dflt)
{
	long value = dflt;
	if (PC_int(PC_get(conf, path), &value) && dflt < 0) {
		fprintf(stderr, "released_heat: missing integer %s in the configuration\n", path + 1);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return (int)value;
}

int main(int argc, char* argv[])
{
	MPI_Init(&argc, &argv);
	if (argc != 3) {
		fprintf(stderr, "usage: %s config.yml simulation.yml\n", argv[0]);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	PC_errhandler_t handler = PC_errhandler(PC_NULL_HANDLER); // `extra_steps' is optional
	PC_tree_t conf = PC_parse_path(argv[1]);
	MPI_Comm main_comm = MPI_COMM_WORLD;
	int psize_1d, pcoord_1d;
	MPI_Comm_size(main_comm, &psize_1d);
	MPI_Comm_rank(main_comm, &pcoord_1d);
	int global_size[2] = {read_int(conf, ".global_size.height", -1), read_int(conf, ".global_size.width", -1)};
	psize[0] = read_int(conf, ".parallelism.height", -1);
	psize[1] = read_int(conf, ".parallelism.width", -1);
	int generations = read_int(conf, ".MaxtimeSteps", -1);
	int extra_steps = read_int(conf, ".extra_steps", 0);
	PC_tree_destroy(&conf);
	PC_errhandler(handler);

	PC_tree_t spec = PC_parse_path(argv[2]);
	PDI_init(PC_get(spec, ".pdi"));
	if (global_size[0] % psize[0] || global_size[1] % psize[1] || psize[0] * psize[1] != psize_1d) {
		fprintf(stderr, "released_heat: the parallelism does not divide the global size, or needs another number of ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	dsize[0] = global_size[0] / psize[0] + 2;
	dsize[1] = global_size[1] / psize[1] + 2;
	int cart_period[2] = {0, 0};
	MPI_Comm cart_comm;
	MPI_Cart_create(main_comm, 2, psize, cart_period, 0, &cart_comm);
	MPI_Cart_coords(cart_comm, pcoord_1d, 2, pcoord);

	double(*cur)[dsize[1]] = malloc(sizeof(double) * dsize[1] * dsize[0]);
	double(*next)[dsize[1]] = malloc(sizeof(double) * dsize[1] * dsize[0]);
	init(cur);
	init(next);
	int ii = 0;
	// share useful configuration bits with PDI
	PDI_multi_expose(
		"init",
		"pcoord",
		pcoord,
		PDI_OUT,
		"pcoord_1d",
		&pcoord_1d,
		PDI_OUT,
		"dsize",
		dsize,
		PDI_OUT,
		"psize",
		psize,
		PDI_OUT,
		"timestep",
		&ii,
		PDI_OUT,
		"MaxtimeSteps",
		&generations,
		PDI_OUT,
		NULL
	);
	for (; ii < generations + extra_steps; ++ii) {
		PDI_multi_expose("Available", "timestep", &ii, PDI_OUT, "local_t", cur, PDI_OUT, NULL);
		for (int jj = 0; jj < 10; ++jj) {
			exchange(cart_comm, cur);
			iter(cur, next);
			double(*tmp)[dsize[1]] = cur;
			cur = next;
			next = tmp;
		}
	}
	PDI_finalize();
	PC_tree_destroy(&spec);
	free(cur);
	free(next);
	MPI_Comm_free(&cart_comm);
	MPI_Finalize();
	return 0;
}
