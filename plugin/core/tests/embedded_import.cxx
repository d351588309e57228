/* The embedded interpreter alone: imports each module named on the command line and prints where
 * it came from, then sys.path.  Started by deisa::Python_interpreter (what the PDI plugin and the
 * ADIOS2 engine run), or with --pybind11-default by pybind11's default start, which puts the
 * working directory first on sys.path: the positive control of tests/test_planted_interpreter.py.
 */

#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include <pybind11/embed.h>

#include "core/python_interpreter.h"

namespace py = pybind11;

namespace {

void import_each(int first, int argc, char** argv)
{
	for (int i = first; i < argc; ++i) {
		try {
			py::module_ module = py::module_::import(argv[i]);
			std::cout << "imported " << argv[i] << " from " << py::str(module.attr("__file__")).cast<std::string>() << "\n";
		} catch (const py::error_already_set& error) {
			std::cout << "not imported " << argv[i] << ": " << error.what() << "\n";
		}
	}
	py::object path = py::module_::import("sys").attr("path");
	std::cout << "sys.path " << py::module_::import("json").attr("dumps")(path).cast<std::string>() << std::endl;
}

} // namespace

int main(int argc, char** argv)
{
	if (argc > 1 && !std::strcmp(argv[1], "--pybind11-default")) {
		py::initialize_interpreter(false); // the start of the plugin and the engine before issue 53
		import_each(2, argc, argv);
		py::finalize_interpreter();
		return 0;
	}
	deisa::Python_interpreter interpreter;
	py::gil_scoped_acquire gil;
	import_each(1, argc, argv);
	return 0;
}
