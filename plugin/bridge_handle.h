/* The deisa.Bridge of this MPI rank, seen from the PDI plugin. */

#ifndef DEISA_BRIDGE_HANDLE_H_
#define DEISA_BRIDGE_HANDLE_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <paraconf.h>
#include <pybind11/pybind11.h>

#include <pdi/pdi_fwd.h>
#include <pdi/expression.h>

#include "array_transfer.h"

namespace deisa {

/// How blocks are spread over the Dask workers (`placement' key)
enum class Placement {
	ROUND_ROBIN, ///< rank i sends to worker i mod N
	LOCALITY ///< contiguous rank ranges share a worker
};

/** Parses a `placement' value
 * \param tree the value's node
 * \return the placement
 */
Placement to_placement(PC_tree_t tree);

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

/// What a publication does when `buffer_nb' steps are waiting (`on_full' key)
enum class On_full {
	BLOCK, ///< wait for the analytics, up to `timeout'
	DROP_OLDEST ///< release the oldest waiting step and queue the new one
};

/** Parses an `on_full' value
 * \param tree the value's node
 * \return the policy
 */
On_full to_on_full(PC_tree_t tree);

/// A $-expression of the configuration, with its YAML node for error messages
struct Config_expression {
	/// the parsed value
	PDI::Expression expression;

	/// its YAML node
	PC_tree_t tree;
};

/** Owns this rank's deisa.Bridge.
 *
 * The bridge is created collectively on the first publication, when the
 * $-expressions describing every array can be evaluated, and closed
 * collectively when the plugin is destroyed.  Every Python failure is logged
 * with its traceback, then handled according to `on_error'.
 */
class Bridge_handle
{
	/// path of the Dask scheduler file (required)
	std::optional<Config_expression> m_scheduler_file;

	/// the MPI communicator of the simulation (an MPI_Comm or a Fortran handle); MPI_COMM_WORLD if absent
	std::optional<Config_expression> m_communicator;

	/// worker placement policy
	Placement m_placement = Placement::ROUND_ROBIN;

	/// maximum number of steps in flight per array, unbounded if absent
	std::optional<Config_expression> m_buffer_nb;

	/// seconds a publication may wait on flow control, the library default if absent
	std::optional<Config_expression> m_timeout;

	/// seconds to wait for the scheduler file, the scheduler and the workers, the library default if absent
	std::optional<Config_expression> m_connect_timeout;

	/// workers needed before the placement is fixed, the library default if absent
	std::optional<Config_expression> m_min_workers;

	/// flow-control policy, the library default if absent
	std::optional<On_full> m_on_full;

	/// what a Python failure does
	On_error m_on_error = On_error::ABORT;

	/// the deisa.Bridge, None until opened
	pybind11::object m_bridge;

	/// the deisa Python module
	pybind11::object m_module;

	/// whether a failure (with on_error: warn) disabled publication
	bool m_disabled = false;

	/// the arrays declared to the bridge, for consistency checks at each publication
	std::vector<std::pair<std::string, Array_geometry>> m_arrays;

	void handle_python_error(PDI::Context& ctx, const std::string& action, const pybind11::error_already_set& error);

public:
	/// A handle with default options and no bridge
	Bridge_handle() = default;

	Bridge_handle(const Bridge_handle&) = delete;

	Bridge_handle& operator= (const Bridge_handle&) = delete;

	/// Releases the Python objects (acquires the GIL)
	~Bridge_handle();

	/** Sets `scheduler_file'
	 * \param value the $-expression node
	 */
	void scheduler_file(PC_tree_t value);

	/** Sets `communicator'
	 * \param value the $-expression node
	 */
	void communicator(PC_tree_t value);

	/** Sets `placement'
	 * \param placement the placement
	 */
	void placement(Placement placement) { m_placement = placement; }

	/** Sets `buffer_nb'
	 * \param value the $-expression node
	 */
	void buffer_nb(PC_tree_t value);

	/** Sets `timeout'
	 * \param value the $-expression node
	 */
	void timeout(PC_tree_t value);

	/** Sets `connect_timeout'
	 * \param value the $-expression node
	 */
	void connect_timeout(PC_tree_t value);

	/** Sets `min_workers'
	 * \param value the $-expression node
	 */
	void min_workers(PC_tree_t value);

	/** Sets `on_full'
	 * \param on_full the policy
	 */
	void on_full(On_full on_full) { m_on_full = on_full; }

	/** Sets `on_error'
	 * \param on_error the policy
	 */
	void on_error(On_error on_error) { m_on_error = on_error; }

	/** Checks that the required keys were given, and the keys together, and imports the deisa Python module
	 * \param ctx the PDI context
	 * \param config the plugin's configuration node, for error messages
	 */
	void validate(PDI::Context& ctx, PC_tree_t config);

	/** Whether the bridge exists or failed to be created
	 * \return true once open was called
	 */
	bool opened() const { return m_disabled || m_bridge; }

	/** Creates the bridge (collective over the communicator)
	 * \param ctx the context in which to evaluate the $-expressions
	 * \param transfers the arrays to declare
	 */
	void open(PDI::Context& ctx, const std::vector<Array_transfer>& transfers);

	/** Publishes one block; returns when its memory may be reused
	 * \param ctx the PDI context
	 * \param dataset name of the global array
	 * \param block the block
	 */
	void publish(PDI::Context& ctx, const std::string& dataset, const Block& block);

	/** Closes the stream (collective), if the bridge was created
	 * \param ctx the PDI context
	 */
	void close(PDI::Context& ctx);
};

} // namespace deisa

#endif // DEISA_BRIDGE_HANDLE_H_
