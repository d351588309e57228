/* The deisa.Bridge of this MPI rank, seen from the PDI plugin. */

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <pdi/context.h>
#include <pdi/datatype.h>
#include <pdi/error.h>
#include <pdi/logger.h>
#include <pdi/paraconf_wrapper.h>
#include <pdi/ref_any.h>
#include <pdi/scalar_datatype.h>

#include "bridge_handle.h"
#include "core/python_interpreter.h"

namespace py = pybind11;
using namespace pybind11::literals;
using PDI::Context;
using PDI::Ref;
using PDI::Spectree_error;
using PDI::to_string;
using std::string;
using std::vector;

namespace deisa {

namespace {

/// The environment variable that deisa-run sets to its scheduler file, which wins over the YAML's
constexpr char SCHEDULER_FILE_OVERRIDE[] = "DEISA_SCHEDULER_FILE_OVERRIDE";

/// a shape for messages, e.g. "4 x 3"
string in_words(const vector<long>& shape)
{
	string result;
	for (auto&& size: shape) {
		result += (result.empty() ? "" : " x ") + std::to_string(size);
	}
	return result;
}

} // namespace

MPI_Fint Bridge_handle::entry_communicator(Context& ctx, const Array_transfer& transfer, MPI_Fint bridge_comm) const
{
	if (PC_status(transfer.communicator())) return bridge_comm;
	const MPI_Fint entry_comm = fortran_communicator(ctx, parse_expression(transfer.communicator(), "communicator"));
	if (entry_comm == MPI_Comm_c2f(MPI_COMM_NULL)) return entry_comm;
	int same = MPI_UNEQUAL;
	MPI_Comm_compare(MPI_Comm_f2c(entry_comm), MPI_Comm_f2c(bridge_comm), &same);
	return same == MPI_IDENT || same == MPI_CONGRUENT ? bridge_comm : entry_comm;
}

bool Bridge_handle::outside(const Array_transfer& transfer) const
{
	return std::find(m_outside.begin(), m_outside.end(), &transfer) != m_outside.end();
}

Bridge_handle::~Bridge_handle()
{
	if (!Py_IsInitialized()) return;
	py::gil_scoped_acquire gil;
	m_bridge_options = py::object();
}

void Bridge_handle::validate(Context& ctx, PC_tree_t config, double interpreter_seconds)
{
	m_interpreter_seconds = interpreter_seconds;
	m_settings.options.config(config);
	const char* override_path = std::getenv(SCHEDULER_FILE_OVERRIDE);
	if (override_path && *override_path) {
		m_scheduler_path = override_path;
		m_scheduler_overridden = true;
		int world_rank = 0;
		MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
		if (m_settings.scheduler_file && world_rank == 0) {
			ctx.logger().info(
				"`{}: {}' of the YAML is overridden by {}=`{}' (deisa-run's scheduler file)",
				m_settings.scheduler_key,
				to_string(m_settings.scheduler_file->tree),
				SCHEDULER_FILE_OVERRIDE,
				m_scheduler_path
			);
		}
	}
	py::gil_scoped_acquire gil;
	try {
		m_python.import_deisa();
		if (!m_settings.scheduler_file && !m_scheduler_overridden) {
			// no `scheduler_file' key: $DEISA_SCHEDULER_FILE, by the rule the Python Bridge follows
			try {
				m_scheduler_path = py::module_::import("deisa.bridge.scheduler_file").attr("resolve_scheduler_file")(py::none()).cast<string>();
			} catch (const py::error_already_set& e) {
				const string message = py::str(e.value());
				m_python.join_imports(); // PDI's error handler may exit() next: no import under way then
				throw Spectree_error{config, "deisa configuration: {}", message};
			}
		}
		// no option key to check: PDI_init waits for no import at all
		if (m_settings.options.empty()) return;
		m_python.wait("options");
	} catch (const py::error_already_set& e) {
		m_python.forget(); // disables the bridge (on_error: warn)
		handle_python_error(ctx, "importing the deisa Python package", e);
		return; // on_error: warn, without deisa the keys cannot be checked
	}
	try {
		m_settings.options.check_keys(m_python.module());
		// bad options are reported now, unless they depend on data not shared yet
		m_bridge_options = m_settings.options.build(ctx, m_python, true);
	} catch (const py::error_already_set& e) {
		handle_python_error(ctx, "checking the deisa Bridge options", e);
	}
}

py::object Bridge_handle::array_spec(const Array_geometry& geometry) const
{
	try {
		// the older grammars' fixed time axis (Past_end::END: later steps are not published) is the analytics' time length
		const bool declared = geometry.past_end == Past_end::END && geometry.time_extent != LONG_MAX;
		const long time_length = declared ? geometry.time_extent : 0;
		if (geometry.moving) {
			return m_python.moving_spec(geometry.dtype, static_cast<long>(geometry.global_shape.size()), geometry.joined_axis, geometry.dims);
		}
		return m_python.array_spec(geometry.dtype, geometry.global_shape, geometry.start, geometry.shape, geometry.dims, time_length);
	} catch (py::error_already_set& e) {
		if (!e.matches(PyExc_ValueError) && !e.matches(PyExc_TypeError)) throw;
		throw Spectree_error{
			geometry.tree,
			"The block of `{}' does not fit dataset `{}' (spatial axes, the time axis excluded): {}",
			geometry.data,
			geometry.dataset,
			py::str(e.value()).cast<string>()};
	}
}

void Bridge_handle::handle_python_error(Context& ctx, const string& action, const py::error_already_set& error)
{
	ctx.logger().error("Python failure while {}:\n{}", action, python_traceback(error));
	if (m_settings.on_error == On_error::ABORT) {
		throw PDI::System_error{"deisa: Python failure while {} (on_error: abort): {}", action, error.what()};
	}
	ctx.logger().warn("on_error: warn, the simulation continues without this data");
}

void Bridge_handle::open(Context& ctx, const vector<Array_transfer>& transfers)
{
	if (opened()) return;
	const MPI_Fint comm = m_settings.communicator ? fortran_communicator(ctx, *m_settings.communicator) : MPI_Comm_c2f(MPI_COMM_WORLD);
	// the datasets of the entries with a communicator of their own, and its handle (MPI_COMM_NULL's outside it)
	vector<std::pair<string, MPI_Fint>> array_comms;
	for (auto&& transfer: transfers) {
		const MPI_Fint entry_comm = entry_communicator(ctx, transfer, comm);
		if (entry_comm != comm) {
			array_comms.emplace_back(transfer.dataset(ctx), entry_comm);
			if (entry_comm == MPI_Comm_c2f(MPI_COMM_NULL)) {
				ctx.logger().debug("`{}' is not published from this rank: outside its `communicator'", transfer.data());
				m_outside.emplace_back(&transfer);
				continue;
			}
		}
		Array_geometry geometry = transfer.geometry(ctx);
		for (auto&& declared: m_arrays) {
			if (declared.first == geometry.dataset) {
				throw PDI::Value_error{"deisa: dataset `{}' is written from more than one data", geometry.dataset};
			}
		}
		m_arrays.emplace_back(geometry.dataset, std::move(geometry));
	}
	MPI_Comm_rank(MPI_Comm_f2c(comm), &m_rank);
	if (m_settings.scheduler_file && !m_scheduler_overridden) {
		try {
			m_scheduler_path = m_settings.scheduler_file->expression.to_string(ctx);
		} catch (const PDI::Error& e) {
			throw Spectree_error{
				m_settings.scheduler_file->tree,
				"Cannot evaluate `{}' in deisa configuration: {}",
				m_settings.scheduler_key,
				e.what()};
		}
	}
	const string scheduler_file = m_scheduler_path;
	py::gil_scoped_acquire gil;
	if (!m_python.imported()) {
		m_disabled = true;
		return;
	}
	try {
		m_python.wait("bridge");
	} catch (const py::error_already_set& e) {
		m_disabled = true;
		handle_python_error(ctx, "importing the deisa Python package", e);
		return;
	}
	// a bad option or block position is a PDI error on its YAML node, whatever on_error says
	py::dict specs;
	try {
		if (!m_bridge_options || m_bridge_options.is_none()) m_bridge_options = m_settings.options.build(ctx, m_python, false);
		for (auto&& array: m_arrays) {
			specs[py::str(array.first)] = array_spec(array.second);
		}
	} catch (const py::error_already_set& e) {
		m_disabled = true;
		handle_python_error(ctx, "checking the deisa Bridge options", e);
		return;
	}
	try {
		ctx.logger().debug(
			"Creating deisa.Bridge({}, {}, options={})",
			scheduler_file,
			py::str(specs).cast<string>(),
			py::repr(m_bridge_options).cast<string>()
		);
		const Startup startup = m_python.create(scheduler_file, specs, comm, array_comms, m_bridge_options);
		ctx.logger().info(
			"deisa.Bridge created for `{}' in {:.3f} s; start-up: interpreter {:.3f} s, imports {}, mpi4py.MPI {:.3f} s",
			scheduler_file,
			startup.bridge_seconds,
			m_interpreter_seconds,
			startup.imports,
			startup.mpi_seconds
		);
	} catch (const py::error_already_set& e) {
		m_disabled = true;
		// the scheduler file is what the user can check first
		handle_python_error(ctx, "creating the deisa Bridge (" + m_settings.scheduler_key + ": `" + scheduler_file + "')", e);
	}
}

const Array_geometry* Bridge_handle::publishable(Context& ctx, const string& dataset, long step)
{
	if (m_disabled) {
		ctx.logger().debug("Skipping `{}' step {}: the bridge is disabled", dataset, step);
		return nullptr;
	}
	auto&& declared = std::find_if(m_arrays.begin(), m_arrays.end(), [&](auto&& array) { return array.first == dataset; });
	if (declared == m_arrays.end()) {
		throw PDI::Value_error{
			"deisa: `dataset' evaluates to `{}' at step {}, which is not one of the arrays of the bridge (declared at the first publication): "
			"each `write' entry publishes to one global array",
			dataset,
			step};
	}
	const Array_geometry& geometry = declared->second;
	if (step >= geometry.time_extent && geometry.past_end == Past_end::END) {
		if (std::find(m_ended.begin(), m_ended.end(), dataset) != m_ended.end()) return nullptr;
		m_ended.emplace_back(dataset);
		if (m_rank == 0) {
			ctx.logger().warn(
				"Step {} of `{}' is past the end of its time axis (length {}, {}): neither it nor any later step past the end is "
				"published; the stream holds steps 0 to {}",
				step,
				dataset,
				geometry.time_extent,
				geometry.time_axis_key,
				geometry.time_extent - 1
			);
		}
		return nullptr;
	}
	if (step < 0 || step >= geometry.time_extent) {
		throw PDI::Value_error{
			"deisa: step {} of `{}' lies outside the time axis [0, {}) declared in {}",
			step,
			dataset,
			geometry.time_extent,
			geometry.time_axis_key};
	}
	return &geometry;
}

void Bridge_handle::publish(Context& ctx, const string& dataset, const Block& block)
{
	const Array_geometry* geometry = publishable(ctx, dataset, block.step);
	if (!geometry) return;
	if (geometry->moving) {
		py::gil_scoped_acquire gil;
		py::capsule owner{new Ref{block.ref}, [](void* ref) {
							  delete static_cast<Ref*>(ref);
						  }};
		publish_boxes(ctx, dataset, block.step, block.global_shape, {block}, std::move(owner));
		return;
	}
	if (block.shape != geometry->shape) {
		throw PDI::Value_error{
			"deisa: the block of `{}' changed shape since the bridge was created (from {} to {} elements along each axis): give its "
			"`write' entry `moving: true' for an array whose sizes or starts change from step to step",
			dataset,
			in_words(geometry->shape),
			in_words(block.shape)};
	}
	py::gil_scoped_acquire gil;
	try {
		py::capsule owner{new Ref{block.ref}, [](void* ref) {
							  delete static_cast<Ref*>(ref);
						  }};
		ctx.logger().trace("Publishing `{}' step {}", dataset, block.step);
		event_step(block.step);
		m_python.publish(dataset, {block.data, block.dtype, block.shape, block.strides}, block.step, std::move(owner));
	} catch (const py::error_already_set& e) {
		handle_python_error(
			ctx,
			"publishing `" + dataset + "' step " + std::to_string(block.step) + " (" + m_settings.scheduler_key + ": `" + m_scheduler_path + "')",
			e
		);
	}
}

void Bridge_handle::publish_boxes(Context& ctx, const Step_boxes& boxes)
{
	if (!publishable(ctx, boxes.dataset, boxes.step)) return;
	py::gil_scoped_acquire gil;
	publish_boxes(ctx, boxes.dataset, boxes.step, boxes.global_shape, boxes.boxes, py::none());
}

void Bridge_handle::publish_boxes(
	Context& ctx,
	const string& dataset,
	long step,
	const vector<long>& global_shape,
	const vector<Block>& blocks,
	py::object owner
)
{
	vector<Box_block> boxes;
	for (auto&& block: blocks) {
		boxes.emplace_back(Box_block{block.start, {block.data, block.dtype, block.shape, block.strides}});
	}
	try {
		ctx.logger().trace("Publishing `{}' step {}: {} box(es)", dataset, step, boxes.size());
		event_step(step);
		m_python.publish_boxes(dataset, step, global_shape, boxes, std::move(owner));
	} catch (const py::error_already_set& e) {
		handle_python_error(
			ctx,
			"publishing `" + dataset + "' step " + std::to_string(step) + " (" + m_settings.scheduler_key + ": `" + m_scheduler_path + "')",
			e
		);
	}
}

void Bridge_handle::join_imports(Context& ctx)
{
	const string failure = m_python.join_imports();
	if (!failure.empty()) ctx.logger().error("Python failure while waiting for the deisa imports:\n{}", failure);
}

void Bridge_handle::event_step(long step)
{
	if (!m_in_event || step == m_event_step) return;
	if (m_event_step >= 0) { // an entry of another step at this event: its own scope
		m_event_step = -1;
		m_python.end_step();
	}
	m_python.begin_step(step);
	m_event_step = step;
}

void Bridge_handle::end_event(Context& ctx)
{
	m_in_event = false;
	if (m_event_step < 0) return;
	const long step = m_event_step;
	m_event_step = -1;
	py::gil_scoped_acquire gil;
	try {
		m_python.end_step();
	} catch (const py::error_already_set& e) {
		handle_python_error(
			ctx,
			"ending the publishes of step " + std::to_string(step) + " (" + m_settings.scheduler_key + ": `" + m_scheduler_path + "')",
			e
		);
	}
}

void Bridge_handle::abandon_event() noexcept
{
	m_in_event = false;
	m_event_step = -1;
	m_python.abandon_step();
}

void Bridge_handle::close(Context& ctx)
{
	if (!Py_IsInitialized()) return;
	join_imports(ctx); // the interpreter must not be finalized under a running import
	py::gil_scoped_acquire gil;
	if (!m_python.created()) return;
	try {
		m_python.close();
		ctx.logger().info("Stream closed");
	} catch (const py::error_already_set& e) {
		// no exception can leave PDI_finalize: report, whatever on_error says
		ctx.logger()
			.error("Python failure while closing the deisa Bridge ({}: `{}'):\n{}", m_settings.scheduler_key, m_scheduler_path, python_traceback(e));
	}
}

bool Bridge_handle::get(Context& ctx, const string& name, const std::function<void(py::handle)>& fill)
{
	if (m_disabled || !m_python.created()) {
		ctx.logger().debug("Not reading steering value `{}': {}", name, m_disabled ? "the bridge is disabled" : "no publication yet");
		return false;
	}
	py::gil_scoped_acquire gil;
	py::object value;
	try {
		value = m_python.get(name);
	} catch (const py::error_already_set& e) {
		handle_python_error(ctx, "reading steering value `" + name + "' (" + m_settings.scheduler_key + ": `" + m_scheduler_path + "')", e);
		return false;
	}
	if (value.is_none()) return false;
	ctx.logger().debug("Steering value `{}' = {}", name, py::repr(value).cast<string>());
	fill(value);
	return true;
}

} // namespace deisa
