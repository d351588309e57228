/* An MPI code written against ADIOS2's C API, with ghost cells: the C case of the deisa ADIOS2
 * engine's memory selections (tests/test_adios2.py).
 *
 *   mpirun -np 4 deisa_adios2_ghosts_c CONFIG.xml OUTPUT STEPS
 *
 * Writes STEPS steps of `T' (double, 11 x 7, rows split raggedly over the ranks: rank 0 the
 * most) through io `SimulationOutput', whose engine CONFIG.xml chooses: each rank Puts
 * (deferred) its rows from a buffer with one ghost row above, two below and one ghost column
 * on each side (filled with garbage), through adios2_set_memory_selection.  An error is one
 * line on rank 0's stderr and exit status 1.
 */

#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>

#include <adios2_c.h>

enum {
	NX = 11,
	NY = 7
};

static int failed(int rank, adios2_error error, const char* what)
{
	if (error != adios2_error_none && rank == 0) fprintf(stderr, "deisa_adios2_ghosts_c: %s failed (%d)\n", what, (int)error);
	return error != adios2_error_none;
}

static int run(const char* config, const char* output, int steps, int rank, int size)
{
	const size_t rest = NX / 2 / size, first = NX - rest * (size - 1);
	const size_t start[2] = {rank == 0 ? 0 : first + rest * (rank - 1), 0};
	const size_t count[2] = {rank == 0 ? first : rest, NY};
	const size_t memory_start[2] = {1, 1};
	const size_t memory_count[2] = {count[0] + 3, NY + 2};
	adios2_adios* adios = adios2_init_config_mpi(config, MPI_COMM_WORLD);
	adios2_io* io = adios2_declare_io(adios, "SimulationOutput");
	const size_t shape[2] = {NX, NY};
	adios2_variable* var = adios2_define_variable(io, "T", adios2_type_double, 2, shape, start, count, adios2_constant_dims_true);
	if (adios == NULL || io == NULL || var == NULL) return 1;
	if (failed(rank, adios2_set_memory_selection(var, 2, memory_start, memory_count), "adios2_set_memory_selection")) return 1;
	adios2_engine* engine = adios2_open(io, output, adios2_mode_write);
	if (engine == NULL) return 1;
	double* buffer = malloc(memory_count[0] * memory_count[1] * sizeof(double));
	adios2_step_status status;
	int error = 0;
	for (int step = 0; step < steps && !error; ++step) {
		for (size_t at = 0; at < memory_count[0] * memory_count[1]; ++at) {
			buffer[at] = -999.0; /* the ghost cells: never written */
		}
		for (size_t i = 0; i < count[0]; ++i) {
			for (size_t j = 0; j < NY; ++j) {
				buffer[(i + 1) * memory_count[1] + j + 1] = 1000.0 * (start[0] + i) + j + 0.5 * step;
			}
		}
		error = failed(rank, adios2_begin_step(engine, adios2_step_mode_append, -1.0f, &status), "adios2_begin_step")
		     || failed(rank, adios2_put(engine, var, buffer, adios2_mode_deferred), "adios2_put")
		     || failed(rank, adios2_end_step(engine), "adios2_end_step");
	}
	error = error || failed(rank, adios2_close(engine), "adios2_close");
	free(buffer);
	adios2_finalize(adios);
	return error;
}

int main(int argc, char* argv[])
{
	MPI_Init(&argc, &argv);
	int rank = 0, size = 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int status = 2;
	if (argc != 4) {
		if (rank == 0) fprintf(stderr, "usage: %s CONFIG.xml OUTPUT STEPS\n", argv[0]);
	} else {
		status = run(argv[1], argv[2], atoi(argv[3]), rank, size);
	}
	MPI_Finalize();
	return status;
}
