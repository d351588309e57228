/* A simulation in the shape of the codes behind pdidev/deisa main's published benchmarks (a
 * finite-volume MHD code: several variables per cell, ghost cells on three axes, a 3-D process
 * grid), exposing its field to PDI as they did (luiznery/bench-deisa's template.yml).
 *
 * Usage: mpirun -np P released_mhd settings.yml simulation.yml
 *
 * settings.yml holds `ncell' ([x, y, z]: the global cells), `mpi_dims' ([x, y, z]: the process
 * grid), `ghost' ([x, y, z]: ghost layers on each side) and `nsteps' (the steps computed and
 * exposed); simulation.yml holds the PDI specification tree under `pdi'.  The local field
 * `local_full_field' is [nvar][z][y][x], ghosts included: its type in the YAML selects the inside
 * with `subsize' and `start'.  The metadata is exposed once, then the code's own event
 * `init_pdi_w_deisa'; each step exposes `iStep', then the field.  An inside cell of variable v at
 * global (x, y, z) holds 1 + step + v/2 + z/4 + y/8 + x/64 (exact in double); a ghost holds -1e30.
 */

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include <paraconf.h>
#include <pdi.h>

enum { NVAR = 5 };

static int read_int(PC_tree_t conf, const char* path)
{
	long value = 0;
	if (PC_int(PC_get(conf, path), &value)) {
		fprintf(stderr, "released_mhd: missing integer %s in the settings\n", path + 1);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return (int)value;
}

int main(int argc, char* argv[])
{
	MPI_Init(&argc, &argv);
	if (argc != 3) {
		fprintf(stderr, "usage: %s settings.yml simulation.yml\n", argv[0]);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	PC_tree_t conf = PC_parse_path(argv[1]);
	int ncell[3], mpi_dims[3], ghost[3];
	for (int d = 0; d < 3; ++d) {
		char path[32];
		snprintf(path, sizeof path, ".ncell[%d]", d);
		ncell[d] = read_int(conf, path);
		snprintf(path, sizeof path, ".mpi_dims[%d]", d);
		mpi_dims[d] = read_int(conf, path);
		snprintf(path, sizeof path, ".ghost[%d]", d);
		ghost[d] = read_int(conf, path);
	}
	int nsteps = read_int(conf, ".nsteps");
	PC_tree_destroy(&conf);

	PC_tree_t spec = PC_parse_path(argv[2]);
	PDI_init(PC_get(spec, ".pdi"));
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (mpi_dims[0] * mpi_dims[1] * mpi_dims[2] != size) {
		fprintf(stderr, "released_mhd: mpi_dims needs another number of ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int ncell_local[3], mpi_coord[3], start[3];
	int rest = rank;
	for (int d = 0; d < 3; ++d) {
		if (ncell[d] % mpi_dims[d]) {
			fprintf(stderr, "released_mhd: mpi_dims does not divide ncell\n");
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		ncell_local[d] = ncell[d] / mpi_dims[d];
		mpi_coord[d] = rest % mpi_dims[d];
		rest /= mpi_dims[d];
		start[d] = ncell_local[d] * mpi_coord[d];
	}
	int nvar = NVAR;
	const int lx = ncell_local[0] + 2 * ghost[0], ly = ncell_local[1] + 2 * ghost[1], lz = ncell_local[2] + 2 * ghost[2];
	double(*field)[lz][ly][lx] = malloc(sizeof(double) * NVAR * lz * ly * lx);

	PDI_multi_expose(
		"init_pdi_w_deisa",
		"nvar", &nvar, PDI_OUT,
		"ncell", ncell, PDI_OUT,
		"ghost", ghost, PDI_OUT,
		"ncell_local", ncell_local, PDI_OUT,
		"start", start, PDI_OUT,
		"mpi_coord", mpi_coord, PDI_OUT,
		"rank", &rank, PDI_OUT,
		"size", &size, PDI_OUT,
		NULL
	);
	for (int step = 0; step < nsteps; ++step) {
		for (int v = 0; v < NVAR; ++v) {
			for (int z = 0; z < lz; ++z) {
				for (int y = 0; y < ly; ++y) {
					for (int x = 0; x < lx; ++x) {
						const int gx = x - ghost[0], gy = y - ghost[1], gz = z - ghost[2];
						const int inside = gx >= 0 && gx < ncell_local[0] && gy >= 0 && gy < ncell_local[1] && gz >= 0 && gz < ncell_local[2];
						field[v][z][y][x] = inside ? 1.0 + step + v / 2.0 + (start[2] + gz) / 4.0 + (start[1] + gy) / 8.0 + (start[0] + gx) / 64.0 : -1e30;
					}
				}
			}
		}
		PDI_expose("iStep", &step, PDI_OUT);
		PDI_expose("local_full_field", field, PDI_OUT);
	}
	free(field);
	PDI_finalize();
	PC_tree_destroy(&spec);
	MPI_Finalize();
	return 0;
}
