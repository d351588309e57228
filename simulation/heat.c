/* 2D explicit heat solver instrumented with PDI (DEISA paper, Listing 3).
 *
 * Usage: mpirun -np P heat simulation.yml pdi.yml
 *
 * The physics follows simulation/README.md exactly so that this code and the
 * Python solver (simulation/heat.py) produce bitwise identical fields: build
 * with -ffp-contract=off and without -ffast-math.  Where the data goes
 * (HDF5 files, Dask, nowhere) is decided by the PDI YAML file only.
 */

#include <mpi.h>
#include <paraconf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pdi.h>

/// Simulation parameters read from the simulation YAML file
typedef struct {
	int global_size[2];
	int process_grid[2];
	int steps;
	int output_period;
} Config;

/// This rank's block of the global domain
typedef struct {
	MPI_Comm comm;
	int coords[2];
	int local_size[2];
	int local_start[2];
} Decomposition;

static void fail(const char* message, const char* detail)
{
	fprintf(stderr, "heat: %s%s\n", message, detail ? detail : "");
	MPI_Abort(MPI_COMM_WORLD, 1);
}

static int read_int(PC_tree_t conf, const char* path)
{
	long value;
	if (PC_int(PC_get(conf, path), &value)) fail("missing or non-integer key in the simulation configuration: ", path + 1);
	return (int)value;
}

static Config read_config(const char* path)
{
	PC_tree_t conf = PC_parse_path(path);
	if (PC_status(conf)) fail("cannot parse the simulation configuration ", path);
	Config cfg;
	cfg.global_size[0] = read_int(conf, ".global_size[0]");
	cfg.global_size[1] = read_int(conf, ".global_size[1]");
	cfg.process_grid[0] = read_int(conf, ".process_grid[0]");
	cfg.process_grid[1] = read_int(conf, ".process_grid[1]");
	cfg.steps = read_int(conf, ".steps");
	cfg.output_period = read_int(conf, ".output_period");
	PC_tree_destroy(&conf);
	return cfg;
}

/// Number of cells of rank `coord` out of `nprocs` along a dimension of `n` cells
static int block_size(int n, int nprocs, int coord)
{
	return n / nprocs + (coord < n % nprocs ? 1 : 0);
}

/// First global index of rank `coord` out of `nprocs` along a dimension of `n` cells
static int block_start(int n, int nprocs, int coord)
{
	return coord * (n / nprocs) + (coord < n % nprocs ? coord : n % nprocs);
}

static Decomposition decompose(const Config* cfg)
{
	int nranks;
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (cfg->process_grid[0] * cfg->process_grid[1] != nranks) {
		char detail[128];
		snprintf(
			detail,
			sizeof(detail),
			"%d x %d needs %d ranks, got %d",
			cfg->process_grid[0],
			cfg->process_grid[1],
			cfg->process_grid[0] * cfg->process_grid[1],
			nranks
		);
		fail("process_grid does not match the number of MPI ranks: ", detail);
	}
	for (int dim = 0; dim < 2; ++dim) {
		if (cfg->process_grid[dim] < 1 || cfg->global_size[dim] < cfg->process_grid[dim]) {
			fail("each rank needs at least one cell: check global_size and process_grid", NULL);
		}
	}
	Decomposition dec;
	int periods[2] = {0, 0};
	MPI_Cart_create(MPI_COMM_WORLD, 2, (int*)cfg->process_grid, periods, 0, &dec.comm);
	int cart_rank;
	MPI_Comm_rank(dec.comm, &cart_rank);
	MPI_Cart_coords(dec.comm, cart_rank, 2, dec.coords);
	for (int dim = 0; dim < 2; ++dim) {
		dec.local_size[dim] = block_size(cfg->global_size[dim], cfg->process_grid[dim], dec.coords[dim]);
		dec.local_start[dim] = block_start(cfg->global_size[dim], cfg->process_grid[dim], dec.coords[dim]);
	}
	return dec;
}

/// 1.0 inside the centred disc of radius min(NX, NY) / 4, 0.0 elsewhere and in every ghost cell
static void initialize(const Config* cfg, const Decomposition* dec, double* u)
{
	const int h = dec->local_size[0], w = dec->local_size[1];
	const double cx = 0.5 * cfg->global_size[0];
	const double cy = 0.5 * cfg->global_size[1];
	const int n_min = cfg->global_size[0] < cfg->global_size[1] ? cfg->global_size[0] : cfg->global_size[1];
	const double radius = n_min / 4.0;
	memset(u, 0, sizeof(double) * (h + 2) * (w + 2));
	for (int i = 0; i < h; ++i) {
		for (int j = 0; j < w; ++j) {
			const double dx = (dec->local_start[0] + i) - cx;
			const double dy = (dec->local_start[1] + j) - cy;
			u[(i + 1) * (w + 2) + (j + 1)] = (dx * dx + dy * dy < radius * radius) ? 1.0 : 0.0;
		}
	}
}

/// Fills the ghost rows and columns from the 4 neighbours; ghosts on the domain boundary keep their 0.0
static void exchange(const Decomposition* dec, double* u)
{
	const int h = dec->local_size[0], w = dec->local_size[1], ld = w + 2;
	MPI_Datatype row, column;
	MPI_Type_contiguous(w, MPI_DOUBLE, &row);
	MPI_Type_commit(&row);
	MPI_Type_vector(h, 1, ld, MPI_DOUBLE, &column);
	MPI_Type_commit(&column);
	int up, down, left, right;
	MPI_Cart_shift(dec->comm, 0, 1, &up, &down);
	MPI_Cart_shift(dec->comm, 1, 1, &left, &right);
	// last interior row goes down, first ghost row comes from up; and so on for the 3 other directions
	MPI_Sendrecv(&u[h * ld + 1], 1, row, down, 0, &u[1], 1, row, up, 0, dec->comm, MPI_STATUS_IGNORE);
	MPI_Sendrecv(&u[ld + 1], 1, row, up, 1, &u[(h + 1) * ld + 1], 1, row, down, 1, dec->comm, MPI_STATUS_IGNORE);
	MPI_Sendrecv(&u[ld + w], 1, column, right, 2, &u[ld], 1, column, left, 2, dec->comm, MPI_STATUS_IGNORE);
	MPI_Sendrecv(&u[ld + 1], 1, column, left, 3, &u[ld + w + 1], 1, column, right, 3, dec->comm, MPI_STATUS_IGNORE);
	MPI_Type_free(&row);
	MPI_Type_free(&column);
}

/// One explicit step; the operation order is part of the contract (bitwise reproducibility)
static void iterate(const Decomposition* dec, const double* u, double* next)
{
	const int h = dec->local_size[0], w = dec->local_size[1], ld = w + 2;
	for (int i = 1; i <= h; ++i) {
		for (int j = 1; j <= w; ++j) {
			const double c = u[i * ld + j];
			const double up = u[(i - 1) * ld + j];
			const double down = u[(i + 1) * ld + j];
			const double left = u[i * ld + j - 1];
			const double right = u[i * ld + j + 1];
			next[i * ld + j] = c + 0.2 * ((((up + down) + left) + right) - 4.0 * c);
		}
	}
}

/// What one rank spent where, written when the environment variable HEAT_TIMINGS is set (benchmarks)
typedef struct {
	double start; ///< MPI_Wtime() right after MPI_Init
	double epoch; ///< the same instant in seconds since 1970, to compare with other processes
	double init_s; ///< in PDI_init
	double first_output_s; ///< from PDI_init's call to the end of the first output's expose
	double* compute_s; ///< per output step: the solver iterations
	double* output_s; ///< per output step: the `iter' expose (what the PDI plugins take)
} Timings;

static double now_epoch(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/// Writes `<HEAT_TIMINGS>.<rank>.json' (aside, then renamed: a reader sees it whole);
/// `finalize_s' is PDI_finalize's time, `wall_s' since MPI_Init
static void write_timings(const char* prefix, int rank, const Timings* t, int steps, double finalize_s)
{
	char path[4096], partial[4200];
	snprintf(path, sizeof(path), "%s.%d.json", prefix, rank);
	snprintf(partial, sizeof(partial), "%s.partial", path);
	FILE* f = fopen(partial, "w");
	if (!f) fail("cannot write the timings to ", partial);
	fprintf(f, "{\"rank\": %d, \"epoch\": %.6f, \"pdi_init_s\": %.6f, \"first_output_s\": %.6f, ", rank, t->epoch, t->init_s, t->first_output_s);
	fprintf(f, "\"finalize_s\": %.6f, \"wall_s\": %.6f, \"steps\": [", finalize_s, MPI_Wtime() - t->start);
	for (int step = 0; step < steps; ++step) {
		fprintf(f, "%s{\"step\": %d, \"compute_s\": %.6f, \"output_s\": %.6f}", step ? ", " : "", step, t->compute_s[step], t->output_s[step]);
	}
	fprintf(f, "]}\n");
	fclose(f);
	if (rename(partial, path) != 0) fail("cannot rename the timings to ", path);
}

/// The temperature change over the last iteration, `u' minus `previous' (0.2 times the discrete
/// Laplacian: minus the divergence of the heat flux), in `delta'; ghost cells are left alone
static void change(const Decomposition* dec, const double* u, const double* previous, double* delta)
{
	const int h = dec->local_size[0], w = dec->local_size[1], ld = w + 2;
	for (int i = 1; i <= h; ++i) {
		for (int j = 1; j <= w; ++j) {
			delta[i * ld + j] = u[i * ld + j] - previous[i * ld + j];
		}
	}
}

int main(int argc, char* argv[])
{
	MPI_Init(&argc, &argv);
	Timings timings = {MPI_Wtime(), now_epoch(), 0, 0, NULL, NULL};
	const char* timings_prefix = getenv("HEAT_TIMINGS");
	if (argc != 3) {
		fprintf(stderr, "Usage: %s <simulation.yml> <pdi.yml>\n", argv[0]);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	Config cfg = read_config(argv[1]);
	PC_tree_t pdi_conf = PC_parse_path(argv[2]);
	if (PC_status(pdi_conf)) fail("cannot parse the PDI configuration ", argv[2]);
	const double init_start = MPI_Wtime();
	PDI_init(pdi_conf);
	timings.init_s = MPI_Wtime() - init_start;

	Decomposition dec = decompose(&cfg);
	int rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	PDI_multi_expose(
		"init",
		"global_size",
		cfg.global_size,
		PDI_OUT,
		"process_grid",
		cfg.process_grid,
		PDI_OUT,
		"steps",
		&cfg.steps,
		PDI_OUT,
		"local_size",
		dec.local_size,
		PDI_OUT,
		"local_start",
		dec.local_start,
		PDI_OUT,
		"rank",
		&rank,
		PDI_OUT,
		NULL
	);

	const size_t cells = (size_t)(dec.local_size[0] + 2) * (dec.local_size[1] + 2);
	double* temp = malloc(sizeof(double) * cells);
	double* next = malloc(sizeof(double) * cells);
	double* dtemp = calloc(cells, sizeof(double)); // ghosts stay 0.0
	if (!temp || !next || !dtemp) fail("out of memory", NULL);
	initialize(&cfg, &dec, temp);
	memcpy(next, temp, sizeof(double) * cells); // boundary ghosts of both buffers stay 0.0
	timings.compute_s = calloc(cfg.steps, sizeof(double));
	timings.output_s = calloc(cfg.steps, sizeof(double));
	if (!timings.compute_s || !timings.output_s) fail("out of memory", NULL);

	int outputs = 0;
	for (int step = 0; step < cfg.steps; ++step) {
		const double compute_start = MPI_Wtime();
		for (int it = 0; it < cfg.output_period; ++it) {
			exchange(&dec, temp);
			iterate(&dec, temp, next);
			double* swap = temp;
			temp = next;
			next = swap;
		}
		change(&dec, temp, next, dtemp);
		const double output_start = MPI_Wtime();
		timings.compute_s[step] = output_start - compute_start;
		// `stop' may be filled by a plugin (deisa's `read' section: the analytics' steering value);
		// the same value on every rank, so all leave the loop after the same step
		int stop = 0;
		PDI_multi_expose("iter", "step", &step, PDI_OUT, "temp", temp, PDI_OUT, "dtemp", dtemp, PDI_OUT, "stop", &stop, PDI_INOUT, NULL);
		timings.output_s[step] = MPI_Wtime() - output_start;
		if (step == 0) timings.first_output_s = MPI_Wtime() - init_start;
		outputs = step + 1;
		if (stop) {
			if (rank == 0) fprintf(stderr, "heat: stopped after step %d of %d: `stop' set by the analytics\n", step, cfg.steps);
			break;
		}
	}

	free(dtemp);
	free(next);
	free(temp);
	MPI_Comm_free(&dec.comm);
	const double finalize_start = MPI_Wtime();
	PDI_finalize();
	if (timings_prefix) write_timings(timings_prefix, rank, &timings, outputs, MPI_Wtime() - finalize_start);
	free(timings.compute_s);
	free(timings.output_s);
	PC_tree_destroy(&pdi_conf);
	MPI_Finalize();
	return 0;
}
