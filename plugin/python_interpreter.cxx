/* Embedded Python for the deisa PDI plugin. */

#include <string>

#include <pybind11/embed.h>
#include <pybind11/pybind11.h>

#include <pdi/context.h>
#include <pdi/logger.h>

#include "python_interpreter.h"

namespace py = pybind11;

namespace deisa {

Python_interpreter::Python_interpreter(PDI::Context& ctx)
{
	if (Py_IsInitialized()) {
		ctx.logger().debug("Using the host program's Python interpreter");
		return;
	}
	// no signal handlers: Ctrl-C and SIGTERM belong to the MPI launcher, not to Python
	py::initialize_interpreter(false);
	m_started = true;
	m_saved_state = PyEval_SaveThread();
	ctx.logger().debug("Python interpreter started by the plugin");
}

Python_interpreter::~Python_interpreter()
{
	if (!m_started) return;
	PyEval_RestoreThread(m_saved_state);
	py::finalize_interpreter();
}

std::string python_traceback(const py::error_already_set& error)
{
	try {
		py::object lines = py::module_::import("traceback").attr("format_exception")(error.type(), error.value(), error.trace());
		return py::str("").attr("join")(lines).cast<std::string>();
	} catch (const std::exception&) {
		return error.what();
	}
}

} // namespace deisa
