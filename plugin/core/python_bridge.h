/* The deisa.Bridge of this MPI rank, seen from C++: shared by the PDI plugin and the ADIOS2 engine. */

#ifndef DEISA_PYTHON_BRIDGE_H_
#define DEISA_PYTHON_BRIDGE_H_

#include <string>
#include <utility>
#include <vector>

#include <mpi.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

namespace deisa {

/// One block to publish: a strided, zero-copy description of the simulation's memory
struct Strided_block {
	/// address of the first element
	const void* data;

	/// numpy name of the element type (`float64', `int32'...)
	std::string dtype;

	/// number of elements in each dimension
	std::vector<long> shape;

	/// distance in bytes between two consecutive elements in each dimension
	std::vector<long> strides;
};

/// One box of a step of a moving array (or of a fixed array's step that moves): where it lies, and its memory
struct Box_block {
	/// first index of the box in the step's global shape; empty: a box of a joined array (placed in rank order)
	std::vector<long> start;

	/// the box's memory
	Strided_block block;
};

/// What creating the Bridge cost, for the start-up report
struct Startup {
	/// the Bridge's construction, seconds
	double bridge_seconds;

	/// the background imports, per stage (deisa.bridge._preload.Preload.summary)
	std::string imports;

	/// importing mpi4py.MPI, seconds
	double mpi_seconds;
};

/// A bad Bridge option (deisa.BridgeOptionError): the option at fault and the message naming it
struct Option_error {
	/// the option at fault, a field of deisa.BridgeOptions
	std::string option;

	/// the message, which names the option and its value
	std::string message;
};

/** A read-only numpy view of a strided block, without copying it (the GIL must be held)
 * \param block the block
 * \param owner what keeps the memory alive while the view lives (None: the caller's lifetime rule)
 * \return the view
 */
pybind11::array numpy_view(const Strided_block& block, pybind11::object owner);

/** The Python side of this rank's deisa.Bridge, for a C++ front end (the PDI plugin, the ADIOS2 engine).
 *
 * Owns the deisa module, the background imports (deisa.bridge._preload) and the deisa.Bridge
 * (or deisa.BridgeGroup); each front end keeps its own configuration, error policy and
 * messages.  Every method that calls Python acquires the GIL and lets a Python failure out as
 * pybind11::error_already_set, except where said otherwise.
 */
class Python_bridge
{
	/// the deisa Python module, None until imported
	pybind11::object m_module;

	/// the imports running in a Python thread while the simulation computes
	pybind11::object m_preload;

	/// the deisa.Bridge or deisa.BridgeGroup, None until created
	pybind11::object m_bridge;

	/// the step scope open (deisa.Bridge.step, deisa.BridgeGroup.step), None outside begin_step and end_step
	pybind11::object m_step;

	/// the index of the step open, -1: none
	long m_step_index = -1;

	/** Checks that `name' is published at the step open
	 * \param name the global array
	 * \param step the step it is published at
	 * \throws std::logic_error naming both steps if they differ
	 */
	void in_step(const std::string& name, long step) const;

public:
	Python_bridge() = default;

	Python_bridge(const Python_bridge&) = delete;

	Python_bridge& operator= (const Python_bridge&) = delete;

	/// Waits for the imports and releases the Python objects (acquires the GIL)
	~Python_bridge();

	/** Imports deisa and starts the background imports (numpy, deisa.bridge, mpi4py)
	 */
	void import_deisa();

	/** Whether deisa was imported
	 * \return true once import_deisa succeeded
	 */
	bool imported() const { return static_cast<bool>(m_module); }

	/** Forgets the deisa module: the front end goes on without it
	 */
	void forget() { m_module = pybind11::object(); }

	/** The deisa Python module (the GIL must be held)
	 * \return the module
	 */
	pybind11::handle module() const { return m_module; }

	/** Waits for a stage of the background imports (`options', `bridge')
	 * \param stage the stage
	 */
	void wait(const char* stage);

	/** Waits for the background imports to end; a failure is returned, not raised
	 * \return the traceback of the failure, empty if none
	 */
	std::string join_imports();

	/** Builds a deisa.BridgeOptions from option names to Python values (the GIL must be held)
	 * \param mapping the options
	 * \return the options
	 * \throws Option_error for a bad option (deisa.BridgeOptionError)
	 */
	pybind11::object options(const pybind11::dict& mapping) const;

	/** A deisa.ArraySpec (the GIL must be held); it checks the block's position
	 * \param dtype numpy name of the element type
	 * \param global_shape the global array's shape
	 * \param start first index of this rank's block
	 * \param shape size of this rank's block
	 * \param dims names of the axes, empty for ArraySpec's default
	 * \param time_length the steps the time axis declares (a fixed time size of the older grammars), 0: none
	 * \return the ArraySpec (a ValueError or TypeError if it refuses the block)
	 */
	pybind11::object array_spec(
		const std::string& dtype,
		const std::vector<long>& global_shape,
		const std::vector<long>& start,
		const std::vector<long>& shape,
		const std::vector<std::string>& dims = {},
		long time_length = 0
	) const;

	/** A deisa.ArraySpec.moving: an array whose shape and boxes are given at each publish (the GIL must be held)
	 * \param dtype numpy name of the element type
	 * \param ndim number of dimensions
	 * \param joined_axis the axis along which the ranks' boxes follow one another in rank order, -1: none
	 * \param dims names of the axes, empty for ArraySpec's default
	 * \return the ArraySpec
	 */
	pybind11::object moving_spec(const std::string& dtype, long ndim, long joined_axis = -1, const std::vector<std::string>& dims = {}) const;

	/** Creates the deisa.Bridge, collective over `comm' (a deisa.BridgeGroup if some arrays have a communicator of their own)
	 *
	 * Imports mpi4py.MPI on this thread: it calls MPI, which the simulation may allow on its
	 * own thread only.
	 * \param scheduler_file the Dask scheduler file
	 * \param specs the deisa.ArraySpec of every array this rank holds, by name
	 * \param comm the Fortran handle of the communicator of the arrays every rank holds
	 * \param array_comms the arrays with a communicator of their own, and its Fortran handle (MPI_COMM_NULL's outside it)
	 * \param options the deisa.BridgeOptions
	 * \return what the start-up cost
	 */
	Startup create(
		const std::string& scheduler_file,
		const pybind11::dict& specs,
		MPI_Fint comm,
		const std::vector<std::pair<std::string, MPI_Fint>>& array_comms,
		const pybind11::object& options
	);

	/** Whether the Bridge exists
	 * \return true once create succeeded, until close
	 */
	bool created() const { return static_cast<bool>(m_bridge); }

	/// The deisa.Bridge (none before create), for the calls of the ADIOS2 engine's attributes
	pybind11::handle bridge() const { return m_bridge; }

	/** Opens step `step' of several arrays (deisa.Bridge.step, entered): the publish and publish_boxes
	 * calls that follow, until end_step, go through the step's scope, whose end posts one exchange
	 * for them all (mode="async"; one per communicator of a deisa.BridgeGroup), so that rank 0
	 * registers them with one message and their blocks for one worker go in one hand-over.
	 * Collective: every rank opens it and publishes the same arrays in the same order.
	 * \param step the index on the time axis of every array published in it
	 * \throws std::logic_error if a step is open already
	 */
	void begin_step(long step);

	/** Closes the step open (the scope's __exit__: posts its exchange); nothing if none is open
	 */
	void end_step();

	/** Closes the step open after a failure (a `with' left by an exception): the scope is left as
	 * end_step leaves it, a Python error of its own dropped for the first one, which the caller raises
	 */
	void abandon_step() noexcept;

	/** Publishes one block (deisa.Bridge.publish, collective); returns when its memory may be reused
	 * \param name the global array
	 * \param block the block
	 * \param step the index on the time axis (that of the step open, if one is)
	 * \param owner what keeps the block's memory alive while Python holds a view of it
	 */
	void publish(const std::string& name, const Strided_block& block, long step, pybind11::object owner);

	/** Publishes a step's boxes of an array from this rank (deisa.Bridge.publish with a list, collective);
	 * returns when their memory may be reused
	 *
	 * Every rank calls it for the same (name, step), with no box if it has none this step.
	 * \param name the global array
	 * \param step the index on the time axis (that of the step open, if one is)
	 * \param global_shape the step's global shape, empty: not given by this rank (a joined array's, or given by another rank)
	 * \param boxes the boxes, each at its start (all of a joined array's boxes have an empty start)
	 * \param owner what keeps the boxes' memory alive while Python holds views of it
	 */
	void publish_boxes(
		const std::string& name,
		long step,
		const std::vector<long>& global_shape,
		const std::vector<Box_block>& boxes,
		pybind11::object owner = pybind11::none()
	);

	/** Adds arrays to the Bridge after its creation (deisa.Bridge.declare, collective)
	 * \param specs the deisa.ArraySpec of every new array, by name
	 */
	void declare(const pybind11::dict& specs);

	/** Reads a steering value (deisa.Bridge.get, collective) with the GIL held
	 * \param name the steering value's name
	 * \return the value, None if the analytics set none
	 */
	pybind11::object get(const std::string& name);

	/** Closes the stream (collective) and drops the Bridge; nothing if none was created
	 */
	void close();
};

/// A step of several arrays, open while it lives (Python_bridge::begin_step), as a Python `with bridge.step(t)'
class Step_scope
{
	/// the bridge whose step is open
	Python_bridge& m_bridge;

	/// whether close() is still to be called
	bool m_open = true;

public:
	/** Opens step `step' of `bridge'
	 * \param bridge the Python bridge
	 * \param step the index on the time axis
	 */
	Step_scope(Python_bridge& bridge, long step)
		: m_bridge{bridge}
	{
		m_bridge.begin_step(step);
	}

	Step_scope(const Step_scope&) = delete;

	Step_scope& operator= (const Step_scope&) = delete;

	/// Closes the step, its error raised (Python_bridge::end_step)
	void close()
	{
		m_open = false;
		m_bridge.end_step();
	}

	/// Closes the step if close() was not reached: a publish failed (Python_bridge::abandon_step)
	~Step_scope()
	{
		if (m_open) m_bridge.abandon_step();
	}
};

} // namespace deisa

#endif // DEISA_PYTHON_BRIDGE_H_
