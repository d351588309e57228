/* Embedded Python, shared by the deisa PDI plugin and the deisa ADIOS2 engine. */

#ifndef DEISA_PYTHON_INTERPRETER_H_
#define DEISA_PYTHON_INTERPRETER_H_

#include <string>

#include <pybind11/pybind11.h>

namespace deisa {

/** RAII owner of the embedded Python interpreter.
 *
 * Starts an interpreter when the host program is not Python, with neither the
 * working directory nor a program's directory on sys.path (whatever a shared
 * directory where the simulation runs holds is never imported), and then releases
 * the GIL so that Python threads (the Dask client's event loop) keep running
 * while the simulation computes.  Only an interpreter started here is
 * finalized here.
 */
class Python_interpreter
{
	/// whether this object started (and so must finalize) the interpreter
	bool m_started = false;

	/// the thread state saved when releasing the GIL after starting the interpreter
	PyThreadState* m_saved_state = nullptr;

	/// wall time of the interpreter's start (0 if the host program's is used)
	double m_start_seconds = 0;

public:
	/** Starts an interpreter if none is running (started() says which; the caller logs it)
	 */
	Python_interpreter();

	Python_interpreter(const Python_interpreter&) = delete;

	Python_interpreter& operator= (const Python_interpreter&) = delete;

	/** Finalizes the interpreter if it was started by this object
	 */
	~Python_interpreter();

	/** Whether this object started the interpreter
	 * \return true if the host program is not Python
	 */
	bool started() const { return m_started; }

	/** Wall time spent starting the interpreter, for the start-up report
	 * \return seconds, 0 if the host program's interpreter is used
	 */
	double start_seconds() const { return m_start_seconds; }
};

/** Formats the Python exception in flight with its full traceback.
 *
 * Must be called with the GIL held.
 * \param error the caught Python exception
 * \return the text Python would print for it
 */
std::string python_traceback(const pybind11::error_already_set& error);

} // namespace deisa

#endif // DEISA_PYTHON_INTERPRETER_H_
