/* Embedded Python for the deisa PDI plugin. */

#include <chrono>
#include <cstdlib>
#include <string>

#include <pybind11/embed.h>
#include <pybind11/pybind11.h>

#include <pdi/context.h>
#include <pdi/logger.h>

#include "python_interpreter.h"

namespace py = pybind11;

namespace deisa {

namespace {

/// set by an atexit handler: exit() is under way, e.g. PDI's error handler stopping the program
bool g_exiting = false;

} // namespace

Python_interpreter::Python_interpreter(PDI::Context& ctx)
{
	if (Py_IsInitialized()) {
		ctx.logger().debug("Using the host program's Python interpreter");
		return;
	}
	const auto start = std::chrono::steady_clock::now();
	// no signal handlers: Ctrl-C and SIGTERM belong to the MPI launcher, not to Python
	py::initialize_interpreter(false);
	m_started = true;
	// registered after PDI's static context, so it runs before the context (and this plugin) is destroyed
	static const bool exit_watch = std::atexit([] { g_exiting = true; }) == 0;
	(void)exit_watch;
	m_saved_state = PyEval_SaveThread();
	m_start_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
	ctx.logger().debug("Python interpreter started by the plugin in {:.3f} s", m_start_seconds);
}

Python_interpreter::~Python_interpreter()
{
	if (!m_started) return;
	// Finalizing Python from exit() crashes in extension modules (scipy's) whose libraries are
	// already torn down; the process is ending anyway, so leave the interpreter to the OS then.
	if (g_exiting) return;
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
