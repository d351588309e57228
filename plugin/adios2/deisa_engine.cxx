/* The deisa ADIOS2 engine: an ADIOS2 code's steps, published to Dask through one deisa.Bridge per MPI rank. */

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <complex>
#include <exception>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <pybind11/complex.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "array_order.h"
#include "attributes.h"
#include "core/python_interpreter.h"
#include "deisa_engine.h"
#include "lent_span.h"

namespace py = pybind11;
using std::invalid_argument;
using std::string;
using std::vector;

namespace deisa {

namespace {

/// The process's interpreter: started by the first engine, never finalized (numpy cannot start twice)
void start_interpreter()
{
	static Python_interpreter* interpreter = new Python_interpreter;
	(void)interpreter;
}

/// Logs a line through Python's logging, logger `deisa.adios2' (the GIL must be held)
void log(const char* level, const string& message)
{
	py::module_::import("logging").attr("getLogger")("deisa.adios2").attr(level)(message);
}

/// The numpy name of an ADIOS2 element type (numpy asked once per type: a Put takes no GIL)
template <typename T>
const string& dtype_name()
{
	static const string name = [] {
		if constexpr (std::is_same_v<T, char>) {
			return string{"int8"}; // ADIOS2 stores char as a signed byte
		} else {
			py::gil_scoped_acquire gil;
			return py::str(py::dtype::of<T>()).cast<string>();
		}
	}();
	return name;
}

using Clock = std::chrono::steady_clock;

double milliseconds(Clock::time_point start, Clock::time_point end)
{
	return std::chrono::duration<double, std::milli>(end - start).count();
}

vector<long> to_longs(const adios2::Dims& dims)
{
	return vector<long>(dims.begin(), dims.end());
}

string seconds_text(double seconds)
{
	std::ostringstream text;
	text << seconds;
	return text.str();
}

string refused(const string& name, const string& feature, const string& instead)
{
	return "deisa ADIOS2 engine: variable `" + name + "' is " + feature + ", which the deisa engine does not publish: " + instead;
}

} // namespace

Deisa_engine::Deisa_engine(adios2::IO io, const std::string& name, adios2::Mode mode)
	: PluginEngineInterface{io, name, mode}
{}

Deisa_engine::~Deisa_engine()
{
	int finalized = 0;
	MPI_Finalized(&finalized);
	m_lent_spans.clear(); // their variables may be gone with the ADIOS object: not written any more
	if (!m_closed && !finalized && std::uncaught_exceptions() == 0) {
		// the code never called Close: the stream ends here, as BP5 closes its file in its
		// destructor; not while an error unwinds the code (a step half Put, ranks apart)
		try {
			DoClose();
		} catch (const std::exception& e) {
			py::gil_scoped_acquire gil;
			log("error", string{"closing the stream in the engine's destructor: "} + e.what());
		}
	}
	if (m_values_comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&m_values_comm);
	if (m_comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&m_comm);
	if (!Py_IsInitialized()) return;
	py::gil_scoped_acquire gil;
	m_parameters = py::object();
	m_attributes = py::object();
}

const string& Deisa_engine::published_as(const string& variable) const
{
	auto&& renamed = m_published_as.find(variable);
	return renamed == m_published_as.end() ? variable : renamed->second;
}

template <typename Call>
void Deisa_engine::python(const string& action, const Call& call)
{
	try {
		call();
	} catch (py::error_already_set& e) {
		py::gil_scoped_acquire gil;
		log("error", "Python failure while " + action + " (scheduler file `" + m_scheduler_file + "'):\n" + python_traceback(e));
		throw std::runtime_error{"deisa ADIOS2 engine: Python failure while " + action + ": " + py::str(e.value()).cast<string>()};
	}
}

void Deisa_engine::Init()
{
	if (m_OpenMode != adios2::Mode::Write && m_OpenMode != adios2::Mode::Append) {
		throw invalid_argument{
			"deisa ADIOS2 engine: io `" + m_IO.Name()
			+ "' is opened for reading, and the deisa engine only writes (a stream to Dask): read the output with BP5, "
			  "or the live steps with deisa.Adapter"};
	}
	const Opening opening = learn_opening(m_IO);
	m_order = array_order(m_IO);
	start_interpreter();
	{
		py::gil_scoped_acquire gil;
		try {
			m_python.import_deisa();
			py::dict parameters;
			for (auto&& parameter: m_IO.Parameters()) {
				parameters[py::str(parameter.first)] = parameter.second;
			}
			py::list transports;
			for (auto&& transport: opening.transports) {
				transports.append(transport);
			}
			m_parameters = py::module_::import("deisa.bridge.engine.parameters").attr("parse")(parameters, py::none(), transports);
			m_scheduler_file = m_parameters.attr("scheduler_file").cast<string>();
			py::module_ logging = py::module_::import("logging");
			m_debug = logging.attr("getLogger")("deisa.adios2").attr("isEnabledFor")(logging.attr("DEBUG")).cast<bool>();
		} catch (py::error_already_set& e) {
			// a bad parameter: its one-line message; anything else with its traceback
			if (!e.matches(py::module_::import("deisa.bridge.engine.parameters").attr("EngineParameterError"))) {
				log("error", "Python failure while opening the deisa ADIOS2 engine:\n" + python_traceback(e));
			}
			throw invalid_argument{py::str(e.value()).cast<string>()};
		}
	}
	find_guard();
	take_communicator(opening);
	check_defined_variables();
}

void Deisa_engine::take_communicator(const Opening& opening)
{
	int world_size = 0;
	MPI_Comm_size(MPI_COMM_WORLD, &world_size);
	if (opening.comm != MPI_COMM_NULL) {
		MPI_Comm_dup(opening.comm, &m_comm); // every rank of it is in ADIOS2's Open, which duplicated it
	} else {
		double seconds;
		{
			py::gil_scoped_acquire gil;
			seconds = m_parameters.attr("open_timeout").cast<double>();
		}
		if (!every_rank_arrives(MPI_COMM_WORLD, seconds)) {
			throw invalid_argument{
				"deisa ADIOS2 engine: not every rank of MPI_COMM_WORLD (" + std::to_string(world_size) + " ranks) opened io `" + m_IO.Name()
				+ "' within " + seconds_text(seconds) + " s (OpenTimeout): the engine publishes over MPI_COMM_WORLD, as it cannot learn the "
				+ "communicator the code gave ADIOS2 (" + opening.unknown + "); " + opening.fix};
		}
		MPI_Comm_dup(MPI_COMM_WORLD, &m_comm);
	}
	MPI_Comm_rank(m_comm, &m_rank);
	int size = 0;
	MPI_Comm_size(m_comm, &size);
	if (m_rank != 0) return;
	py::gil_scoped_acquire gil;
	for (auto&& line: m_parameters.attr("notices")()) {
		log("warning", line.cast<string>());
	}
	log("info",
	    "io `" + m_IO.Name() + "' opened over " + (opening.comm != MPI_COMM_NULL ? "the code's communicator" : "MPI_COMM_WORLD") + ": "
	        + std::to_string(size) + " of the " + std::to_string(world_size) + " ranks of MPI_COMM_WORLD publish");
}

void Deisa_engine::find_guard()
{
	const string problem = m_memory_selections.find_guard();
	if (problem.empty()) return;
	bool none;
	{
		py::gil_scoped_acquire gil;
		none = m_parameters.attr("memory_selections").cast<string>() == "none";
	}
	if (none) return; // the code says it sets no memory selection
	throw invalid_argument{
		"deisa ADIOS2 engine: " + problem
		+ " (ADIOS2's plugin interface hides a variable's memory selection from an engine, and without the guard a SetMemorySelection "
		  "would publish a wrong array): run the code under deisa-run, which preloads the guard, or with LD_PRELOAD="
		+ guard_path() + "; or, if the code sets no memory selection, give the engine the parameter MemorySelections=none"};
}

template <typename T>
void Deisa_engine::select_memory(const adios2::Variable<T>& variable, Step_block& block, const T* values) const
{
	// the public variable's only member is its core variable (a core::VariableBase, single inheritance)
	static_assert(sizeof(adios2::Variable<T>) == sizeof(void*), "adios2::Variable<T> is its core variable's pointer");
	const void* core_variable = *reinterpret_cast<void* const *>(&variable);
	Memory_box box;
	if (!m_memory_selections.find(core_variable, box)) return;
	if (m_order.column_major != m_order.language_column_major) {
		throw invalid_argument{refused(
			block.name,
			string{"given a memory selection in a "} + (m_order.column_major ? "column" : "row") + "-major io from a "
				+ (m_order.language_column_major ? "column" : "row") + "-major language",
			"BP5 reads the selection in the language's order and the dimensions in the io's, which the deisa engine does not mix: declare the io in "
			"the language's order, or Put the block from a buffer of its own"
		)};
	}
	if (m_order.column_major) { // in the variable's order (put)
		box.start = reversed(box.start);
		box.count = reversed(box.count);
	}
	long offset = 0;
	deisa::select_memory(block.name, box, block.shape, offset, block.memory_strides);
	block.data = values + offset;
}

bool Deisa_engine::publishes(const string& name) const
{
	auto&& known = m_publishes.find(name);
	if (known != m_publishes.end()) return known->second;
	py::gil_scoped_acquire gil;
	return m_publishes[name] = m_parameters.attr("publishes")(name).cast<bool>();
}

void Deisa_engine::check(const string& name, adios2::ShapeID shape_id, const vector<string>& operators) const
{
	if (!publishes(name)) return;
	if (shape_id == adios2::ShapeID::LocalArray || shape_id == adios2::ShapeID::LocalValue) {
		throw invalid_argument{
			refused(name, "a local array or value (no global shape)", "define it with a shape, or leave it out with the `Variables' parameter")};
	}
	if (!operators.empty()) {
		throw invalid_argument{refused(
			name,
			"transformed by an operator (`" + operators.front() + "')",
			"remove the operation from the variable (the analytics receives the array itself), or leave it out with the `Variables' parameter"
		)};
	}
}

void Deisa_engine::check_defined_variables()
{
	for (auto&& variable: m_IO.AvailableVariables(true)) {
		const string& name = variable.first;
		const string type = m_IO.VariableType(name);
#define DEISA_CHECK(T)                                                                                                                               \
	if (type == adios2::GetType<T>()) {                                                                                                              \
		adios2::Variable<T> var = m_IO.InquireVariable<T>(name);                                                                                     \
		vector<string> operators;                                                                                                                    \
		for (auto&& op: var.Operations()) {                                                                                                          \
			operators.emplace_back(op.Type());                                                                                                       \
		}                                                                                                                                            \
		check(name, var.ShapeID(), operators);                                                                                                       \
		if (std::is_same_v<T, std::string> && publishes(name)) {                                                                                     \
			throw invalid_argument{refused(name, "a string", "leave it out with the `Variables' parameter")};                                        \
		}                                                                                                                                            \
	}
		ADIOS2_FOREACH_STDTYPE_1ARG(DEISA_CHECK)
#undef DEISA_CHECK
	}
}

template <typename T>
bool Deisa_engine::block_of(const adios2::Variable<T>& variable, Step_block& block) const
{
	const string name = variable.Name();
	vector<string> operators;
	for (auto&& op: variable.Operations()) {
		operators.emplace_back(op.Type());
	}
	check(name, variable.ShapeID(), operators);
	if (!publishes(name)) return false;
	block.name = name;
	block.dtype = dtype_name<T>();
	block.value = variable.ShapeID() == adios2::ShapeID::GlobalValue;
	// a column-major io's (Fortran's) block is a C-order array of its dimensions reversed:
	// the array a row-major reader of BP5 output sees
	const auto order = [this](const adios2::Dims& dims) {
		return m_order.column_major ? reversed(to_longs(dims)) : to_longs(dims);
	};
	block.global_shape = block.value ? vector<long>{1} : order(variable.Shape());
	block.start = block.value ? vector<long>{0} : order(variable.Start());
	block.shape = block.value ? vector<long>{1} : order(variable.Count());
	if (variable.ShapeID() == adios2::ShapeID::JoinedArray) {
		// its blocks follow one another along the JoinedDim axis, in rank order: no start
		const auto joined = std::find(block.global_shape.begin(), block.global_shape.end(), static_cast<long>(adios2::JoinedDim));
		if (joined != block.global_shape.end()) {
			block.joined_axis = joined - block.global_shape.begin();
			*joined = 0;
		} else {
			block.joined_axis = 0;
		}
		block.start.clear();
	}
	block.nbytes = sizeof(T) * (block.value ? 1 : variable.SelectionSize());
	return true;
}

template <typename T>
void Deisa_engine::put(adios2::Variable<T> variable, const T* values, bool copy)
{
	if constexpr (std::is_same_v<T, std::string>) {
		if (publishes(variable.Name())) throw invalid_argument{refused(variable.Name(), "a string", "leave it out with the `Variables' parameter")};
		return;
	} else {
		Step_block block;
		if (!block_of(variable, block)) return;
		if (block.value && m_rank != 0) return; // a single value is rank 0's
		block.data = values;
		if (!block.value) select_memory(variable, block, values);
		if (copy || block.value) block.keep_copy();
		m_step_blocks.add(std::move(block), m_step);
	}
}

// a Step_block moves without copying its memory: the address lent to a Span stays valid as blocks are added
static_assert(std::is_nothrow_move_constructible_v<Step_block>, "Step_block moves without copying");

template <typename T>
void Deisa_engine::put_span(adios2::Variable<T> variable, typename adios2::Variable<T>::Span& span, bool initialize, const T& value)
{
	const string name = variable.Name();
	const size_t count = variable.ShapeID() == adios2::ShapeID::GlobalValue ? 1 : variable.SelectionSize();
	Core_span<T>* core = core_span<T>(span, count);
	const auto refuse = [&](const string& why) {
		return invalid_argument{refused(name, "Put as a Span (Put(variable) returning the engine's memory)", why)};
	};
	if (core == nullptr) {
		throw refuse(
			"its core Span is not laid out as in ADIOS2 2.12, where the deisa engine lends a Span its memory, or keeps an earlier step's size "
			"(ADIOS2 gives a plugin engine one core Span per variable: its count must not change): Put the code's own buffer instead"
		);
	}
	if (std::find(m_lent_spans.begin(), m_lent_spans.end(), core) != m_lent_spans.end()) {
		throw invalid_argument{
			"deisa ADIOS2 engine: variable `" + name + "' Put as a Span twice by this rank in step " + std::to_string(m_step)
			+ ": ADIOS2 gives a plugin engine's Spans of a variable one core Span, which the second would take from the first"};
	}
	Step_block block;
	// the code writes into an unpublished variable's Span too (a single value is rank 0's)
	const bool published = block_of(variable, block) && (!block.value || m_rank == 0);
	vector<unsigned char> memory(std::max(count, size_t{1}) * sizeof(T)); // operator new's alignment: any T's
	T* buffer = reinterpret_cast<T*>(memory.data());
	if (initialize) std::fill_n(buffer, count, value);
	if (!lend<T>(span, *core, buffer)) {
		throw refuse(
			"in ADIOS2 2.12 a Span's data() asks the core engine's BufferData, which ADIOS2's PluginEngine does not forward to a plugin "
			"(it returns null), and which the memory selection guard answers: run the code under deisa-run, which preloads it, or with "
			"LD_PRELOAD="
			+ guard_path() + "; or Put the code's own buffer"
		);
	}
	m_lent_spans.emplace_back(core);
	if (!published) {
		m_unpublished_spans.emplace_back(std::move(memory));
		return;
	}
	block.copy = std::move(memory); // the block is the engine's own memory: PerformPuts copies nothing
	block.data = block.copy.data();
	try {
		m_step_blocks.add(std::move(block), m_step);
	} catch (...) {
		take_back(core);
		m_lent_spans.pop_back();
		throw;
	}
}

#define DEISA_DEFINE_PUT(T)                                                                                                                          \
	void Deisa_engine::DoPutSync(adios2::Variable<T> variable, const T* values)                                                                      \
	{                                                                                                                                                \
		put(variable, values, true);                                                                                                                 \
	}                                                                                                                                                \
	void Deisa_engine::DoPutDeferred(adios2::Variable<T> variable, const T* values)                                                                  \
	{                                                                                                                                                \
		put(variable, values, false);                                                                                                                \
	}
ADIOS2_FOREACH_STDTYPE_1ARG(DEISA_DEFINE_PUT)
#undef DEISA_DEFINE_PUT

#define DEISA_DEFINE_SPAN(T)                                                                                                                         \
	void Deisa_engine::DoPut(adios2::Variable<T> variable, typename adios2::Variable<T>::Span& span, const bool initialize, const T& value)          \
	{                                                                                                                                                \
		put_span(variable, span, initialize, value);                                                                                                 \
	}
ADIOS2_FOREACH_PRIMITIVE_STDTYPE_1ARG(DEISA_DEFINE_SPAN)
#undef DEISA_DEFINE_SPAN

adios2::StepStatus Deisa_engine::BeginStep(adios2::StepMode, const float)
{
	if (m_in_step) throw invalid_argument{"deisa ADIOS2 engine: BeginStep called twice without EndStep"};
	m_in_step = true;
	m_began = true;
	return adios2::StepStatus::OK;
}

size_t Deisa_engine::CurrentStep() const
{
	return m_step;
}

void Deisa_engine::PerformPuts()
{
	m_step_blocks.keep_copies();
}

void Deisa_engine::EndStep()
{
	publish_step();
	for (void* core: m_lent_spans) {
		take_back(core); // a Span's data() after EndStep is null, not the engine's freed memory
	}
	m_lent_spans.clear();
	m_unpublished_spans.clear();
	m_step_blocks.clear();
	m_in_step = false;
	++m_step;
}

std::set<string> Deisa_engine::agree_on_step(bool& news)
{
	const vector<Declared_array>& arrays = m_step_blocks.arrays();
	vector<int> flags(arrays.size() + 1, 0);
	for (size_t ii = 0; ii < arrays.size(); ++ii) {
		flags[ii] = m_step_blocks.of(arrays[ii].name).empty() ? 0 : 1;
	}
	flags.back() = m_step_blocks.new_names().empty() ? 0 : 1;
	MPI_Request request;
	MPI_Iallreduce(MPI_IN_PLACE, flags.data(), static_cast<int>(flags.size()), MPI_INT, MPI_MAX, m_comm, &request);
	// tested without a pause for 200 us (ranks that arrive together: ~20 us on 4 ranks of 2
	// cores, where a first sleep would cost ~0.45 ms), then with short sleeps, not waited in
	// MPI_Wait, where the MPI spins a core that may be another rank's (as the Bridge's exchange
	// waits: deisa/bridge/_exchange.py)
	const auto spin_until = Clock::now() + std::chrono::microseconds{200};
	auto pause = std::chrono::microseconds{50};
	for (int done = 0;;) {
		MPI_Test(&request, &done, MPI_STATUS_IGNORE);
		if (done) break;
		if (Clock::now() < spin_until) continue;
		std::this_thread::sleep_for(pause);
		pause = std::min(pause * 2, std::chrono::microseconds{2000});
	}
	std::set<string> put;
	for (size_t ii = 0; ii < arrays.size(); ++ii) {
		if (flags[ii]) put.insert(arrays[ii].name);
	}
	news = flags.back() != 0;
	return put;
}

void Deisa_engine::declare_new_arrays(std::set<string>& put)
{
	const bool created = m_python.created();
	if (!created) MPI_Comm_split(m_comm, m_rank == 0 ? 0 : MPI_UNDEFINED, 0, &m_values_comm);
	python(created ? "declaring the variables first Put in step " + std::to_string(m_step) : string{"creating the deisa Bridge"}, [&] {
		py::gil_scoped_acquire gil;
		if (!created) m_python.wait("bridge");
		py::list mine;
		for (auto&& name: m_step_blocks.new_names()) {
			const vector<const Step_block*> blocks = m_step_blocks.of(name);
			const Step_block& first = *blocks.front();
			py::list geometry;
			for (auto&& block: blocks) {
				geometry.append(py::make_tuple(block->global_shape, block->start, block->shape));
			}
			const char* kind = first.value ? "value" : first.joined_axis >= 0 ? "joined" : "array";
			mine.append(py::make_tuple(name, first.dtype, kind, first.shape.size(), first.joined_axis, geometry));
		}
		py::module_ engine_variables = py::module_::import("deisa.bridge.engine.variables");
		py::object declarations;
		try {
			declarations = engine_variables.attr("agree")(MPI_Comm_c2f(m_comm), mine, m_step, created);
		} catch (py::error_already_set& e) {
			// ranks that Put one variable as two arrays: its one line, on every rank
			if (!e.matches(engine_variables.attr("EngineArrayError"))) throw;
			throw invalid_argument{py::str(e.value()).cast<string>()};
		}
		// the names they are published under (an openPMD io's records: rank 0's decision, every
		// rank's), and rank 0's attributes of each: its static ones (deisa/bridge/engine/attributes.py)
		py::module_ engine_attributes = py::module_::import("deisa.bridge.engine.attributes");
		if (!m_attributes) m_attributes = engine_attributes.attr("EngineAttributes")();
		py::list variables;
		for (auto&& declaration: declarations) {
			variables.append(declaration.attr("name"));
		}
		py::object attributes = m_rank == 0 ? py::object(io_attributes(m_IO)) : py::object(py::none());
		py::list published;
		try {
			published = m_attributes.attr("names")(MPI_Comm_c2f(m_comm), variables, attributes);
		} catch (py::error_already_set& e) {
			// an openPMD series whose iterations are new variables: its one line, on every rank
			if (!e.matches(engine_attributes.attr("EngineArrayNameError"))) throw;
			throw invalid_argument{py::str(e.value()).cast<string>()};
		}
		py::dict specs;
		vector<std::pair<string, MPI_Fint>> array_comms;
		vector<Declared_array> arrays;
		size_t index = 0;
		for (auto&& declaration: declarations) {
			Declared_array array;
			array.name = declaration.attr("name").cast<string>();
			const string name = published[index++].cast<string>();
			if (name != array.name) m_published_as[array.name] = name;
			array.dtype = declaration.attr("dtype").cast<string>();
			const string path = declaration.attr("path").cast<string>();
			array.path = path == "fixed" ? Path::fixed : path == "value" ? Path::value : Path::moving;
			array.global_shape = declaration.attr("global_shape").cast<vector<long>>();
			array.start = declaration.attr("start").cast<vector<long>>();
			array.shape = declaration.attr("count").cast<vector<long>>();
			if (array.path == Path::value) array_comms.emplace_back(name, MPI_Comm_c2f(m_values_comm));
			py::object spec = declaration.attr("spec");
			if (!spec.is_none() && m_rank == 0) spec = m_attributes.attr("static")(spec, name, attributes);
			if (!spec.is_none()) specs[py::str(name)] = spec;
			put.insert(array.name);
			arrays.emplace_back(std::move(array));
		}
		m_step_blocks.declare(std::move(arrays));
		if (created) {
			m_python.declare(specs);
			return;
		}
		const Startup startup = m_python.create(m_scheduler_file, specs, MPI_Comm_c2f(m_comm), array_comms, m_parameters.attr("options"));
		if (m_rank == 0) {
			log("info",
			    py::str("deisa.Bridge created for `{}' in {:.3f} s; start-up: imports {}, mpi4py.MPI {:.3f} s")
			        .format(m_scheduler_file, startup.bridge_seconds, startup.imports, startup.mpi_seconds)
			        .cast<string>());
		}
	});
}

void Deisa_engine::publish_step()
{
	const auto start = Clock::now();
	bool published;
	{
		py::gil_scoped_acquire gil;
		published = m_parameters.attr("publishes_step")(m_step).cast<bool>();
	}
	if (!published) return;
	bool news = false;
	std::set<string> put = agree_on_step(news);
	const auto agreed = Clock::now();
	if (news) declare_new_arrays(put);
	double gil_ms = 0, publish_ms = 0; // the phases of EndStep, logged at debug level
	vector<const Declared_array*> publishing;
	for (auto&& array: m_step_blocks.arrays()) {
		if (array.path == Path::value ? m_rank != 0 || m_step_blocks.of(array.name).empty() : put.count(array.name) == 0) continue;
		publishing.push_back(&array);
	}
	if (m_rank == 0 && !publishing.empty()) {
		// the io's attributes new or changed for each array published: with its step's one message
		python("sending the attributes of step " + std::to_string(m_step), [&] {
			py::gil_scoped_acquire gil;
			py::list names;
			for (auto&& array: publishing) {
				names.append(published_as(array->name));
			}
			m_attributes.attr("step")(m_python.bridge(), io_attributes(m_IO), names);
		});
	}
	// the step's arrays in one scope (deisa.Bridge.step): one exchange, one registration and one
	// hand-over per worker for the step, not one per variable (mode="async")
	std::optional<Step_scope> scope;
	if (m_python.created()) {
		python("opening step " + std::to_string(m_step), [&] { scope.emplace(m_python, static_cast<long>(m_step)); });
	}
	for (auto&& pointer: publishing) {
		const Declared_array& array = *pointer;
		const string& name = published_as(array.name);
		const Publication publication = m_step_blocks.publication(array);
		python("publishing `" + name + "' step " + std::to_string(m_step), [&] {
			const auto asked = Clock::now();
			py::gil_scoped_acquire gil;
			const auto held = Clock::now();
			const long itemsize = py::dtype(array.dtype).itemsize();
			if (publication.plain != nullptr) {
				m_python.publish(name, publication.plain->strided(itemsize), static_cast<long>(m_step), py::none());
			} else {
				vector<Box_block> boxes;
				for (auto&& box: publication.boxes) {
					boxes.push_back({box->start, box->strided(itemsize)});
				}
				m_python.publish_boxes(name, static_cast<long>(m_step), publication.shape, boxes);
			}
			gil_ms += milliseconds(asked, held);
			publish_ms += milliseconds(held, Clock::now());
		});
	}
	if (scope) {
		python("ending step " + std::to_string(m_step), [&] {
			const auto asked = Clock::now();
			scope->close();
			publish_ms += milliseconds(asked, Clock::now());
		});
	}
	if (m_debug) {
		py::gil_scoped_acquire gil;
		log("debug",
		    py::str("EndStep step {}: {:.3f} ms, of which agreeing on the step's variables {:.3f} ms, waiting for the GIL {:.3f} ms, in "
		            "Bridge.publish {:.3f} ms")
		        .format(m_step, milliseconds(start, Clock::now()), milliseconds(start, agreed), gil_ms, publish_ms)
		        .cast<string>());
	}
}

void Deisa_engine::DoClose(const int)
{
	if (m_closed) return;
	m_closed = true;
	// a step begun and not ended, or Puts without BeginStep/EndStep (one step, as BP5 writes it)
	if (m_in_step || (!m_began && m_step == 0)) EndStep();
	python("closing the deisa Bridge", [&] {
		const bool created = m_python.created();
		m_python.close();
		if (created && m_rank == 0) {
			py::gil_scoped_acquire gil;
			log("info", "Stream closed (" + std::to_string(m_step) + " steps written)");
		}
	});
	const string failure = m_python.join_imports();
	if (!failure.empty()) {
		py::gil_scoped_acquire gil;
		log("error", "Python failure while waiting for the deisa imports:\n" + failure);
	}
}

} // namespace deisa

adios2::plugin::PluginEngineInterface* EngineCreate(adios2::IO io, const std::string& name, const adios2::Mode mode)
{
	return new deisa::Deisa_engine(io, name, mode);
}

void EngineDestroy(adios2::plugin::PluginEngineInterface* engine)
{
	delete engine;
}
