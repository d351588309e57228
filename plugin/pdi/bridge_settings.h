/* What the deisa plugin's configuration says of its Bridge: the keys read from the YAML
 * (`scheduler_file', `communicator', `on_error' and the deisa.BridgeOptions keys), apart from
 * the Bridge_handle that runs the Bridge they describe. */

#ifndef DEISA_BRIDGE_SETTINGS_H_
#define DEISA_BRIDGE_SETTINGS_H_

#include <optional>
#include <string>

#include <mpi.h>
#include <paraconf.h>

#include <pdi/pdi_fwd.h>
#include <pdi/expression.h>
#include <pdi/ref_any.h>

#include "bridge_options.h"

namespace deisa {

/// What a Python failure does (`on_error' key)
enum class On_error {
	ABORT, ///< raise a PDI error: the simulation stops
	WARN ///< log the traceback and keep computing without this data
};

/** Parses an `on_error' value
 * \param tree the value's node
 * \return the policy
 */
On_error to_on_error(PC_tree_t tree);

/// A $-expression of the configuration, with its YAML node for error messages
struct Config_expression {
	/// the parsed value
	PDI::Expression expression;

	/// its YAML node
	PC_tree_t tree;
};

/** Parses a $-expression of the configuration
 * \param value its YAML node
 * \param key the key that gives it, for messages
 * \return the expression and its node
 */
Config_expression parse_expression(PC_tree_t value, const char* key);

/** Evaluates a $-expression of the configuration
 * \param ctx the context in which to evaluate it
 * \param value the expression
 * \param key the key that gave it, for messages
 * \return its value
 */
PDI::Ref_r evaluate(PDI::Context& ctx, const Config_expression& value, const char* key);

/** The Fortran handle of the communicator a `communicator' designates (an MPI_Comm or a Fortran handle)
 * \param ctx the context in which to evaluate it
 * \param value the expression
 * \return the communicator's Fortran handle
 */
MPI_Fint fortran_communicator(PDI::Context& ctx, const Config_expression& value);

/// What the plugin's configuration says of its Bridge, filled by Configuration key by key
struct Bridge_settings {
	/// path of the Dask scheduler file; $DEISA_SCHEDULER_FILE if absent
	std::optional<Config_expression> scheduler_file;

	/// the key that gives it (`scheduler_file', or the released plugin's `scheduler_info'), for messages
	std::string scheduler_key = "scheduler_file";

	/// the MPI communicator of the simulation (an MPI_Comm or a Fortran handle); MPI_COMM_WORLD if absent
	std::optional<Config_expression> communicator;

	/// the deisa.BridgeOptions keys
	Bridge_options options;

	/// what a Python failure does
	On_error on_error = On_error::ABORT;

	/** Sets `scheduler_file' (or `scheduler_info')
	 * \param value the $-expression node
	 * \param key the key that gives it, for messages
	 */
	void set_scheduler_file(PC_tree_t value, const std::string& key);

	/** Sets `communicator'
	 * \param value the $-expression node
	 */
	void set_communicator(PC_tree_t value);
};

} // namespace deisa

#endif // DEISA_BRIDGE_SETTINGS_H_
