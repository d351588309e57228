/* The deisa.Bridge of this MPI rank, seen from the PDI plugin. */

#ifndef DEISA_BRIDGE_HANDLE_H_
#define DEISA_BRIDGE_HANDLE_H_

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>
#include <paraconf.h>
#include <pybind11/pybind11.h>

#include <pdi/pdi_fwd.h>
#include <pdi/expression.h>

#include "array_transfer.h"
#include "bridge_settings.h"
#include "core/python_bridge.h"
#include "gathered_boxes.h"

namespace deisa {

/** Owns this rank's deisa.Bridge.
 *
 * Runs the Bridge that its settings (Bridge_settings, read from the YAML by Configuration)
 * describe. The bridge is created collectively on the first publication, when the
 * $-expressions describing every array can be evaluated, and closed
 * collectively when the plugin is destroyed.  Every Python failure is logged
 * with its traceback, then handled according to `on_error'; a bad option or
 * block position is a configuration error on its YAML node, whatever
 * `on_error' says.  The options and the block positions are checked by Python
 * (deisa.BridgeOptions, deisa.ArraySpec), not here.
 */
class Bridge_handle
{
	/// what the configuration says of the Bridge (its keys, read by Configuration)
	Bridge_settings m_settings;

	/// whether $DEISA_SCHEDULER_FILE_OVERRIDE (deisa-run's scheduler file) replaces the key's value
	bool m_scheduler_overridden = false;

	/// this rank in the plugin's communicator (known once open was called)
	int m_rank = 0;

	/// the arrays whose time axis ended (Past_end::END): already warned about
	std::vector<std::string> m_ended;

	/// its value (evaluated at the first publication, or the environment's at init): failures name it
	std::string m_scheduler_path;

	/// the deisa.BridgeOptions, None until built (at initialization, or at the first publication for $-expressions of data)
	pybind11::object m_bridge_options;

	/// the deisa module, its background imports and the deisa.Bridge (the part shared with the ADIOS2 engine)
	Python_bridge m_python;

	/// wall time of the embedded interpreter's start, for the start-up report
	double m_interpreter_seconds = 0;

	/// whether a failure (with on_error: warn) disabled publication
	bool m_disabled = false;

	/// the arrays declared to the bridge, for consistency checks at each publication
	std::vector<std::pair<std::string, Array_geometry>> m_arrays;

	/// whether the publishes now are an `on_event' event's (begin_event to end_event): they share a step scope
	bool m_in_event = false;

	/// the step of the event's scope open (Python_bridge::begin_step), -1: none
	long m_event_step = -1;

	/** Opens the event's scope for step `step' (the GIL must be held), closing that of another step first; nothing outside an event
	 * \param step the step of the block published next
	 */
	void event_step(long step);

	/** Logs a Python failure and raises a PDI error or carries on, according to `on_error'
	 * \param ctx the PDI context
	 * \param action what failed, for the messages
	 * \param error the Python exception
	 */
	void handle_python_error(PDI::Context& ctx, const std::string& action, const pybind11::error_already_set& error);

	/** Whether a step of an array is published: the array was declared, the step lies on its time axis
	 * \param ctx the PDI context
	 * \param dataset the global array
	 * \param step the time index
	 * \return the array's geometry; null if the step is not published (a disabled bridge, a step past the end of the older grammars' time axis)
	 * \throw PDI::Value_error for an undeclared array or a step outside a time axis of deisa's own grammar
	 */
	const Array_geometry* publishable(PDI::Context& ctx, const std::string& dataset, long step);

	/** Publishes a step's boxes of a moving array (the GIL must be held); a Python failure is handled by `on_error'
	 * \param ctx the PDI context
	 * \param dataset the global array
	 * \param step the time index
	 * \param global_shape the step's global shape, empty if not given
	 * \param blocks the boxes (none: nothing from this rank)
	 * \param owner what keeps their memory alive while Python holds views of it
	 */
	void publish_boxes(
		PDI::Context& ctx,
		const std::string& dataset,
		long step,
		const std::vector<long>& global_shape,
		const std::vector<Block>& blocks,
		pybind11::object owner
	);

	/** The deisa.ArraySpec of an array (the GIL must be held); it checks the block's position
	 * \param geometry the array and this rank's block
	 * \return the ArraySpec; a position it refuses is a PDI error on the selection's YAML node
	 */
	pybind11::object array_spec(const Array_geometry& geometry) const;

	/// the `write' entries whose `communicator' does not hold this rank (MPI_COMM_NULL here): never published here
	std::vector<const Array_transfer*> m_outside;

	/** The `communicator' of a `write' entry, if it is one of its own
	 * \param ctx the context in which to evaluate it
	 * \param transfer the entry
	 * \param bridge_comm the plugin's communicator
	 * \return the entry's (MPI_COMM_NULL's Fortran handle outside it), or bridge_comm if it has none or a congruent one
	 */
	MPI_Fint entry_communicator(PDI::Context& ctx, const Array_transfer& transfer, MPI_Fint bridge_comm) const;

public:
	/// A handle with default options and no bridge
	Bridge_handle() = default;

	Bridge_handle(const Bridge_handle&) = delete;

	Bridge_handle& operator= (const Bridge_handle&) = delete;

	/// Releases the Python objects (acquires the GIL)
	~Bridge_handle();

	/** The Bridge's settings, for the configuration to fill before validate
	 * \return them
	 */
	Bridge_settings& settings() { return m_settings; }

	/** Checks the required keys, starts the imports and checks the options (those that can be evaluated now)
	 *
	 * $DEISA_SCHEDULER_FILE_OVERRIDE (which deisa-run sets to the scheduler file of the scheduler
	 * it started) replaces the YAML's `scheduler_file' or `scheduler_info', with one info line on
	 * rank 0 naming both.
	 * The imports the bridge needs (numpy, distributed, deisa.bridge) run in a Python thread
	 * (deisa.bridge._preload) while the simulation computes; this waits for the options' part only.
	 * \param ctx the PDI context
	 * \param config the plugin's configuration node, for error messages
	 * \param interpreter_seconds the embedded interpreter's start time, for the start-up report
	 */
	void validate(PDI::Context& ctx, PC_tree_t config, double interpreter_seconds = 0);

	/** Whether the bridge exists or failed to be created
	 * \return true once open was called
	 */
	bool opened() const { return m_disabled || m_python.created(); }

	/** Creates the bridge (collective over the communicator), once the imports are done
	 *
	 * A `write' entry with a `communicator' of its own (not congruent to the plugin's) goes to a
	 * deisa.Bridge over that communicator, on its ranks only (deisa.BridgeGroup); the ranks where
	 * it is MPI_COMM_NULL never publish it (see outside).
	 * Logs the start-up costs at info level: the interpreter, the imports and how long the
	 * simulation waited for them, mpi4py.MPI (imported here: it calls MPI) and the Bridge.
	 * \param ctx the context in which to evaluate the $-expressions
	 * \param transfers the arrays to declare
	 */
	void open(PDI::Context& ctx, const std::vector<Array_transfer>& transfers);

	/** Whether this rank is outside the `communicator' of a `write' entry (known once open was called)
	 * \param transfer the entry
	 * \return true if the entry is never published from this rank
	 */
	bool outside(const Array_transfer& transfer) const;

	/** Publishes one block; returns when its memory may be reused
	 *
	 * A block of a moving array (`moving') is published as the step's one box of this rank, with
	 * the step's global shape and its start (none for a joined array).
	 * A step past the end of a fixed-length time axis is an error (Past_end::ERROR), or is not
	 * published, with one warning line on rank 0 for the first of them (Past_end::END).
	 * \param ctx the PDI context
	 * \param dataset name of the global array
	 * \param block the block
	 */
	void publish(PDI::Context& ctx, const std::string& dataset, const Block& block);

	/** Publishes a step's boxes of a `moving.boxes_until' entry, at its event (collective: a rank
	 * with no box publishes none); returns when their memory may be reused
	 * \param ctx the PDI context
	 * \param boxes the step's boxes
	 */
	void publish_boxes(PDI::Context& ctx, const Step_boxes& boxes);

	/** Starts an `on_event' event's publishes: until end_event, those of one step share one
	 * deisa.Bridge.step scope (one exchange, one registration, one hand-over per worker), opened
	 * at the first publish (the bridge may be created by it)
	 */
	void begin_event() { m_in_event = true; }

	/** Ends the event's publishes: closes its scope (a Python failure handled by `on_error')
	 * \param ctx the PDI context
	 */
	void end_event(PDI::Context& ctx);

	/** Ends the event's publishes after a failure left them: the scope is closed, its own Python error dropped
	 */
	void abandon_event() noexcept;

	/** Closes the stream (collective), if the bridge was created, and waits for the imports
	 * \param ctx the PDI context
	 */
	void close(PDI::Context& ctx);

	/** Waits for the background imports (deisa.bridge._preload) to end, before an error leaves the plugin
	 *
	 * PDI's default error handler calls exit(), whose handlers (OpenSSL's among them) would tear
	 * libraries down under an import still running: the last stage, distributed, is waited for
	 * by no publication.
	 * \param ctx the PDI context
	 */
	void join_imports(PDI::Context& ctx);

	/** Reads a steering value (deisa.Bridge.get: collective over the bridge's ranks)
	 *
	 * Before the bridge is created (no publication yet) or once it is disabled, reads nothing.
	 * A Python failure of the read is handled according to `on_error'.
	 * \param ctx the PDI context
	 * \param name the steering value's name
	 * \param fill called with the GIL held and the value, unless the analytics set none
	 * \return whether fill was called
	 */
	bool get(PDI::Context& ctx, const std::string& name, const std::function<void(pybind11::handle)>& fill);
};

} // namespace deisa

#endif // DEISA_BRIDGE_HANDLE_H_
