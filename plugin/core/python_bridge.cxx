/* The deisa.Bridge of this MPI rank, seen from C++: shared by the PDI plugin and the ADIOS2 engine. */

#include <mpi.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "python_bridge.h"
#include "python_interpreter.h"

namespace py = pybind11;
using namespace pybind11::literals;
using std::string;
using std::vector;

namespace deisa {

namespace {

template <typename T>
py::tuple to_tuple(const vector<T>& values)
{
	py::tuple result(values.size());
	for (size_t ii = 0; ii < values.size(); ++ii) {
		result[ii] = py::cast(values[ii]);
	}
	return result;
}

/// An mpi4py communicator of a Fortran handle
py::object to_mpi4py(py::handle mpi, MPI_Fint comm)
{
	if (comm == MPI_Comm_c2f(MPI_COMM_NULL)) return mpi.attr("COMM_NULL");
	return mpi.attr("Intracomm")(mpi.attr("Comm").attr("f2py")(comm));
}

} // namespace

py::array numpy_view(const Strided_block& block, py::object owner)
{
	if (owner.is_none()) owner = py::tuple(); // a base of its own: a null one would make pybind11 copy
	py::array view{py::dtype(block.dtype), block.shape, block.strides, block.data, owner};
	view.attr("flags").attr("writeable") = false;
	return view;
}

Python_bridge::~Python_bridge()
{
	if (!Py_IsInitialized()) return;
	py::gil_scoped_acquire gil;
	if (m_preload) {
		// close() was not reached (e.g. a configuration error): no import may run while the
		// interpreter is finalized
		try {
			m_preload.attr("join")();
		} catch (const py::error_already_set&) {
		}
	}
	m_step = py::object();
	m_bridge = py::object();
	m_preload = py::object();
	m_module = py::object();
}

void Python_bridge::import_deisa()
{
	py::gil_scoped_acquire gil;
	m_module = py::module_::import("deisa");
	// numpy, deisa.bridge, mpi4py: seconds, overlapped with the simulation's first steps
	m_preload = py::module_::import("deisa.bridge._preload").attr("start")();
}

void Python_bridge::wait(const char* stage)
{
	py::gil_scoped_acquire gil;
	m_preload.attr("wait")(stage);
}

string Python_bridge::join_imports()
{
	if (!Py_IsInitialized()) return {};
	py::gil_scoped_acquire gil;
	if (!m_preload) return {};
	try {
		m_preload.attr("join")();
	} catch (const py::error_already_set& e) {
		return python_traceback(e);
	}
	return {};
}

py::object Python_bridge::options(const py::dict& mapping) const
{
	try {
		return m_module.attr("BridgeOptions").attr("from_mapping")(mapping);
	} catch (py::error_already_set& e) {
		if (!e.matches(m_module.attr("BridgeOptionError"))) throw;
		throw Option_error{py::str(e.value().attr("option")), py::str(e.value())};
	}
}

py::object Python_bridge::array_spec(
	const string& dtype,
	const vector<long>& global_shape,
	const vector<long>& start,
	const vector<long>& shape,
	const vector<string>& dims,
	long time_length
) const
{
	py::dict names; // `dims' and `time_length' only when given, so that ArraySpec's defaults stay its own
	if (!dims.empty()) names["dims"] = to_tuple(dims);
	if (time_length > 0) names["time_length"] = time_length;
	return m_module.attr("ArraySpec"
	)("dtype"_a = dtype, "global_shape"_a = to_tuple(global_shape), "start"_a = to_tuple(start), "shape"_a = to_tuple(shape), **names);
}

py::object Python_bridge::moving_spec(const string& dtype, long ndim, long joined_axis, const vector<string>& dims) const
{
	py::dict names; // `joined_axis' and `dims' only when given, so that ArraySpec.moving's defaults stay its own
	if (joined_axis >= 0) names["joined_axis"] = joined_axis;
	if (!dims.empty()) names["dims"] = to_tuple(dims);
	return m_module.attr("ArraySpec").attr("moving")(dtype, ndim, **names);
}

Startup Python_bridge::create(
	const string& scheduler_file,
	const py::dict& specs,
	MPI_Fint comm,
	const vector<std::pair<string, MPI_Fint>>& array_comms,
	const py::object& options
)
{
	using Clock = std::chrono::steady_clock;
	auto seconds_since = [](Clock::time_point start) {
		return std::chrono::duration<double>(Clock::now() - start).count();
	};
	py::gil_scoped_acquire gil;
	const auto mpi_start = Clock::now();
	py::object mpi = py::module_::import("mpi4py.MPI");
	py::object py_comm = to_mpi4py(mpi, comm);
	const double mpi_seconds = seconds_since(mpi_start);
	const auto bridge_start = Clock::now();
	if (array_comms.empty()) {
		m_bridge = m_module.attr("Bridge")(scheduler_file, specs, "comm"_a = py_comm, "options"_a = options);
	} else {
		py::dict comms;
		for (auto&& array: array_comms) {
			comms[py::str(array.first)] = to_mpi4py(mpi, array.second);
		}
		m_bridge = m_module.attr("BridgeGroup")(scheduler_file, specs, "comm"_a = py_comm, "array_comms"_a = comms, "options"_a = options);
	}
	return {seconds_since(bridge_start), m_preload.attr("summary")().cast<string>(), mpi_seconds};
}

void Python_bridge::begin_step(long step)
{
	if (m_step_index >= 0) {
		throw std::logic_error{"deisa: step " + std::to_string(step) + " opened inside step " + std::to_string(m_step_index)};
	}
	py::gil_scoped_acquire gil;
	py::object scope = m_bridge.attr("step")(step);
	scope.attr("__enter__")();
	m_step = std::move(scope);
	m_step_index = step;
}

void Python_bridge::end_step()
{
	if (m_step_index < 0) return;
	py::gil_scoped_acquire gil;
	py::object scope = std::move(m_step);
	m_step = py::object();
	m_step_index = -1;
	scope.attr("__exit__")(py::none(), py::none(), py::none());
}

void Python_bridge::abandon_step() noexcept
{
	if (m_step_index < 0 || !Py_IsInitialized()) return;
	py::gil_scoped_acquire gil;
	try {
		end_step();
	} catch (const py::error_already_set&) { // the failure that left the step is the one raised
	} catch (const std::exception&) { // noexcept: nothing of its own leaves a step being abandoned
	}
}

void Python_bridge::publish(const string& name, const Strided_block& block, long step, py::object owner)
{
	py::gil_scoped_acquire gil;
	py::array view = numpy_view(block, std::move(owner));
	if (m_step) {
		in_step(name, step);
		m_step.attr("publish")(name, view);
	} else {
		m_bridge.attr("publish")(name, view, step);
	}
}

void Python_bridge::publish_boxes(const string& name, long step, const vector<long>& global_shape, const vector<Box_block>& boxes, py::object owner)
{
	py::gil_scoped_acquire gil;
	py::list blocks;
	for (auto&& box: boxes) {
		py::array view = numpy_view(box.block, owner);
		if (box.start.empty()) {
			blocks.append(std::move(view)); // a joined array's box: placed in rank order
		} else {
			blocks.append(py::make_tuple(to_tuple(box.start), std::move(view)));
		}
	}
	py::dict shape; // `shape' only when given
	if (!global_shape.empty()) shape["shape"] = to_tuple(global_shape);
	if (m_step) {
		in_step(name, step);
		m_step.attr("publish")(name, blocks, **shape);
	} else {
		m_bridge.attr("publish")(name, blocks, step, **shape);
	}
}

void Python_bridge::in_step(const string& name, long step) const
{
	if (step != m_step_index) {
		throw std::logic_error{"deisa: `" + name + "' published at step " + std::to_string(step) + " inside step " + std::to_string(m_step_index)};
	}
}

void Python_bridge::declare(const py::dict& specs)
{
	py::gil_scoped_acquire gil;
	m_bridge.attr("declare")(specs);
}

py::object Python_bridge::get(const string& name)
{
	return m_bridge.attr("get")(name);
}

void Python_bridge::close()
{
	if (!Py_IsInitialized()) return;
	py::gil_scoped_acquire gil;
	if (!m_bridge) return;
	py::object bridge = std::move(m_bridge);
	m_bridge = py::object();
	bridge.attr("close")();
}

} // namespace deisa
