/* A simulation in the shape of the DEISA paper's Listing 3 (Gueroudji et al., HiPC 2021).
 *
 * Usage: mpirun -np P paper_heat pdi_spec.yml simulation.yml
 *
 * `cfg' (a config_t: the local block size `loc', the process grid `proc', `nb_steps') and
 * `rank' are shared once at `init'; the local field `temp' (loc[0] x loc[1], no ghost) and
 * `step' at every `iter'.  Rank r holds block (r % proc[0], r / proc[0]), as the paper's
 * Listing 4 maps it into the global array `gtemp'.  do_compute relaxes the field towards its
 * global mean (an MPI_Allreduce), so every value depends on its position, the step and the
 * other ranks.  The data goes wherever the PDI YAML says (tests/grammars/paper_*.yml): an HDF5
 * file through decl_hdf5, or Dask through deisa.
 */

#include <mpi.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <paraconf.h>
#include <pdi.h>

/// The simulation parameters, described as `config_t' in the PDI YAML's `types'
typedef struct {
	int loc[2]; ///< the local block's size
	int proc[2]; ///< MPI ranks along each dimension
	int nb_steps; ///< number of steps
} config_t;

static int read_int(PC_tree_t conf, const char* path)
{
	long value;
	if (PC_int(PC_get(conf, path), &value)) {
		fprintf(stderr, "paper_heat: missing integer %s in the simulation configuration\n", path + 1);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return (int)value;
}

static config_t read_config(const char* path)
{
	PC_tree_t conf = PC_parse_path(path);
	config_t cfg;
	cfg.loc[0] = read_int(conf, ".loc[0]");
	cfg.loc[1] = read_int(conf, ".loc[1]");
	cfg.proc[0] = read_int(conf, ".proc[0]");
	cfg.proc[1] = read_int(conf, ".proc[1]");
	cfg.nb_steps = read_int(conf, ".nb_steps");
	PC_tree_destroy(&conf);
	return cfg;
}

/// A distinct value per global cell
static void initialize(double* temp, config_t cfg, int rank)
{
	int x0 = cfg.loc[0] * (rank % cfg.proc[0]), y0 = cfg.loc[1] * (rank / cfg.proc[0]);
	for (int i = 0; i < cfg.loc[0]; ++i) {
		for (int j = 0; j < cfg.loc[1]; ++j) {
			temp[i * cfg.loc[1] + j] = (x0 + i) * 1000.0 + (y0 + j);
		}
	}
}

/// One step: every cell moves a quarter of the way to the global mean, plus a wave
static void do_compute(double* temp, config_t cfg, MPI_Comm comm, int step)
{
	int n = cfg.loc[0] * cfg.loc[1];
	double sum = 0, mean;
	for (int k = 0; k < n; ++k)
		sum += temp[k];
	MPI_Allreduce(&sum, &mean, 1, MPI_DOUBLE, MPI_SUM, comm);
	mean /= (double)n * cfg.proc[0] * cfg.proc[1];
	for (int k = 0; k < n; ++k)
		temp[k] += 0.25 * (mean - temp[k]) + sin(0.1 * k + step);
}

int main(int argc, char* argv[])
{
	MPI_Init(&argc, &argv);
	if (argc != 3) {
		fprintf(stderr, "usage: %s pdi_spec.yml simulation.yml\n", argv[0]);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	PC_tree_t spec = PC_parse_path(argv[1]);
	PDI_init(spec);
	int rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	config_t cfg = read_config(argv[2]);
	int nranks;
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (cfg.proc[0] * cfg.proc[1] != nranks) {
		fprintf(stderr, "paper_heat: proc holds %d ranks, not %d\n", cfg.proc[0] * cfg.proc[1], nranks);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	// share one-off configuration
	PDI_multi_expose("init", "cfg", &cfg, PDI_OUT, "rank", &rank, PDI_OUT, NULL);
	// our temperature field
	double* temp = malloc(sizeof(double) * cfg.loc[0] * cfg.loc[1]);
	initialize(temp, cfg, rank);
	// main loop
	for (int step = 0; step < cfg.nb_steps; ++step) {
		do_compute(temp, cfg, MPI_COMM_WORLD, step);
		// share data at every iteration
		PDI_multi_expose("iter", "step", &step, PDI_OUT, "temp", temp, PDI_OUT, NULL);
		MPI_Barrier(MPI_COMM_WORLD);
	}
	free(temp);
	PDI_finalize();
	PC_tree_destroy(&spec);
	MPI_Finalize();
	return 0;
}
