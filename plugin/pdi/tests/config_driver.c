/* Runs the deisa plugin on the PDI configuration given as argument: two steps of a 4x4 field.
 *
 * The driver of the CTest cases of plugin/pdi/tests/CMakeLists.txt, which check what the plugin
 * says about a bad configuration.  The field, with one ghost layer, is exposed as `field' with
 * the metadata `step' at each `iter' event, as simulation/heat.c does.
 */

#include <mpi.h>
#include <stdio.h>

#include <paraconf.h>
#include <pdi.h>

int main(int argc, char* argv[])
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s PDI_CONFIG.yml\n", argv[0]);
		return 2;
	}
	MPI_Init(&argc, &argv);
	PC_tree_t config = PC_parse_path(argv[1]);
	PDI_init(config);
	double field[6][6] = {{0}};
	for (int step = 0; step < 2; ++step) {
		field[1][1] = step;
		PDI_multi_expose("iter", "step", &step, PDI_OUT, "field", field, PDI_OUT, NULL);
	}
	PDI_finalize();
	PC_tree_destroy(&config);
	MPI_Finalize();
	return 0;
}
