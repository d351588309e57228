/* Embedded Python, shared by the deisa PDI plugin and the deisa ADIOS2 engine. */

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include <pybind11/embed.h>
#include <pybind11/pybind11.h>

#include "python_interpreter.h"

namespace py = pybind11;

namespace deisa {

namespace {

/// set by an atexit handler: exit() is under way, e.g. PDI's error handler stopping the program
bool g_exiting = false;

/** Makes libpython's symbols global: a host that loaded this library with RTLD_LOCAL (ADIOS2
 * loads its plugin engines so) hides them from the extension modules Python loads (`math'
 * would fail with `undefined symbol: PyFloat_Type')
 */
void promote_libpython()
{
	Dl_info info;
	if (dladdr(reinterpret_cast<void*>(&Py_IsInitialized), &info) && info.dli_fname) {
		dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
	}
}

/** Removes from sys.path the entries that name the working directory (`'' ', `.'), whatever
 * put them there (an older pybind11, a Python that adds the script's directory): the embedded
 * interpreter imports nothing from where the simulation happens to run
 */
void drop_working_directory()
{
	PyRun_SimpleString("import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]");
}

} // namespace

Python_interpreter::Python_interpreter()
{
	if (Py_IsInitialized()) return;
	const auto start = std::chrono::steady_clock::now();
	promote_libpython();
	// no signal handlers: Ctrl-C and SIGTERM belong to the MPI launcher, not to Python; and no
	// program directory on sys.path: pybind11 would put '' (the working directory) first, so that
	// `import deisa' (numpy, mpi4py...) ran whatever another account left where the simulation
	// starts, a shared directory as /tmp included; PYTHONSAFEPATH cannot stop pybind11 doing it
	py::initialize_interpreter(false, 0, nullptr, false);
	m_started = true;
	drop_working_directory();
	// registered after the host's static state (PDI's context, ADIOS2's plugin manager), so it runs
	// before that state (and the plugin or engine owning this object) is destroyed
	static const bool exit_watch = std::atexit([] { g_exiting = true; }) == 0;
	(void)exit_watch;
	m_saved_state = PyEval_SaveThread();
	m_start_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
