/* The memory selection guard, libdeisa_adios2_guard.so: preloaded (LD_PRELOAD) in an ADIOS2
 * code, it records the memory selection of each core variable for the deisa ADIOS2 engine, and
 * answers a Span's data() for the memory the engine lends (DEISA_ADIOS2_SPAN_BUFFER_INDEX); it
 * tells the engine the core communicator of the plugin engine being constructed and an io's
 * transports.
 *
 * It defines functions of libadios2_core, which the bindings call through the dynamic
 * loader (a preloaded definition comes first), and calls ADIOS2's own: the definition seen
 * from the calling library (dlsym on its handle searches it and its dependencies, not what is
 * preloaded), else the next one (RTLD_NEXT).  No link dependency on ADIOS2; nothing runs at
 * load time: preloaded in a process without ADIOS2 (mpirun, a PDI code) it does nothing.
 */

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "memory_selection_guard.h"

namespace {

/// ADIOS2's Box<Dims>: memory start, memory count
using Box = std::pair<std::vector<size_t>, std::vector<size_t>>;

std::mutex g_mutex;

/// the core communicator given to the PluginEngine this thread constructs, null outside its constructor
thread_local const void* g_opening = nullptr;

/// the transports added to each core io, one a line
std::map<const void*, std::string>& transports()
{
	static auto* added = new std::map<const void*, std::string>; // never destroyed, as selections()
	return *added;
}

/// the selection of every core variable that has one
std::map<const void*, Box>& selections()
{
	static auto* recorded = new std::map<const void*, Box>; // never destroyed: a variable may outlive static destruction
	return *recorded;
}

/** ADIOS2's own definition of `name' for a call from `caller'
 * \param name the mangled name
 * \param caller an address in the calling library
 * \param own the guard's definition, never returned
 */
void* adios2_definition(const char* name, const void* caller, const void* own)
{
	Dl_info info;
	if (dladdr(caller, &info) != 0 && info.dli_fname != nullptr && *info.dli_fname != '\0') {
		if (void* handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) {
			void* found = dlsym(handle, name);
			dlclose(handle);
			if (found != nullptr && found != own) return found;
		}
	}
	void* next = dlsym(RTLD_NEXT, name);
	if (next != nullptr && next != own) return next;
	throw std::runtime_error{
		std::string{"deisa ADIOS2 memory selection guard: ADIOS2's own "} + name + " is not found from "
		+ (info.dli_fname ? info.dli_fname : "the caller")};
}

} // namespace

extern "C" {

/// adios2::core::VariableBase::SetMemorySelection, recorded, then ADIOS2's own
__attribute__((visibility("default"))) void
deisa_adios2_guard_set_memory_selection(void* variable, const Box& box) __asm__(DEISA_ADIOS2_SET_MEMORY_SELECTION);

/// adios2::core::VariableBase's constructor: a new variable has no selection yet, then ADIOS2's own
__attribute__((visibility("default"))) void deisa_adios2_guard_variable_base(
	void* variable,
	const void* name,
	int type,
	size_t element_size,
	const void* shape,
	const void* start,
	const void* count,
	bool constant_shape
) __asm__(DEISA_ADIOS2_VARIABLE_BASE_C2);

__attribute__((visibility("default"))) size_t
deisa_adios2_guard_memory_selection(const void* variable, size_t capacity, size_t* start, size_t* count);

__attribute__((visibility("default"))) void deisa_adios2_guard_definitions(const void** set_memory_selection, const void** variable_base);

/* adios2::plugin::PluginEngine's constructor, complete and base object: the core communicator
 * (helper::Comm, non-trivial: passed by address, destroyed by the caller) is the engine's while
 * ADIOS2's own constructor runs */
__attribute__((visibility("default"))) void
deisa_adios2_guard_plugin_engine_c1(void* engine, void* io, const void* name, int mode, void* comm) __asm__(DEISA_ADIOS2_PLUGIN_ENGINE_C1);
__attribute__((visibility("default"))) void
deisa_adios2_guard_plugin_engine_c2(void* engine, void* io, const void* name, int mode, void* comm) __asm__(DEISA_ADIOS2_PLUGIN_ENGINE_C2);

/// adios2::core::IO::AddTransport (the type by value: passed by address), then recorded
__attribute__((visibility("default"))) size_t deisa_adios2_guard_add_transport(
	void* io,
	const std::string* type,
	const std::map<std::string, std::string>& parameters
) __asm__(DEISA_ADIOS2_ADD_TRANSPORT);

__attribute__((visibility("default"))) const void* deisa_adios2_guard_opening_comm();

__attribute__((visibility("default"))) size_t deisa_adios2_guard_transports(const void* io, char* text, size_t capacity);

/* adios2::core::Engine::DoBufferData_<L>(int bufferIdx, size_t payloadPosition, size_t bufferID), for
 * the engines that have none of their own (a plugin engine's): a Span lent by the deisa engine
 * (DEISA_ADIOS2_SPAN_BUFFER_INDEX) is at payloadPosition; any other has none (null, as ADIOS2's own) */
#define DEISA_DECLARE_BUFFER_DATA(N, L)                                                                                                              \
	__attribute__((visibility("default"))) void* deisa_adios2_guard_buffer_data_##L(                                                                 \
		const void* engine,                                                                                                                          \
		int buffer_index,                                                                                                                            \
		size_t payload_position,                                                                                                                     \
		size_t buffer_id                                                                                                                             \
	) noexcept __asm__(DEISA_ADIOS2_BUFFER_DATA_NAME(N, L));
DEISA_ADIOS2_FOREACH_BUFFER_DATA(DEISA_DECLARE_BUFFER_DATA)
#undef DEISA_DECLARE_BUFFER_DATA
}

#define DEISA_DEFINE_BUFFER_DATA(N, L)                                                                                                               \
	void* deisa_adios2_guard_buffer_data_##L(const void*, int buffer_index, size_t payload_position, size_t) noexcept                                \
	{                                                                                                                                                \
		return buffer_index == DEISA_ADIOS2_SPAN_BUFFER_INDEX ? reinterpret_cast<void*>(payload_position) : nullptr;                                 \
	}
DEISA_ADIOS2_FOREACH_BUFFER_DATA(DEISA_DEFINE_BUFFER_DATA)
#undef DEISA_DEFINE_BUFFER_DATA

void deisa_adios2_guard_set_memory_selection(void* variable, const Box& box)
{
	using Function = void (*)(void*, const Box&);
	auto* own = reinterpret_cast<const void*>(&deisa_adios2_guard_set_memory_selection);
	auto adios2 = reinterpret_cast<Function>(adios2_definition(DEISA_ADIOS2_SET_MEMORY_SELECTION, __builtin_return_address(0), own));
	adios2(variable, box); // ADIOS2 checks the selection: what it refuses is not recorded
	std::lock_guard<std::mutex> lock{g_mutex};
	if (box.first.empty() && box.second.empty()) {
		selections().erase(variable); // {{}, {}}: no selection, as ADIOS2 reads it
	} else {
		selections()[variable] = box;
	}
}

void deisa_adios2_guard_variable_base(
	void* variable,
	const void* name,
	int type,
	size_t element_size,
	const void* shape,
	const void* start,
	const void* count,
	bool constant_shape
)
{
	using Function = void (*)(void*, const void*, int, size_t, const void*, const void*, const void*, bool);
	auto* own = reinterpret_cast<const void*>(&deisa_adios2_guard_variable_base);
	auto adios2 = reinterpret_cast<Function>(adios2_definition(DEISA_ADIOS2_VARIABLE_BASE_C2, __builtin_return_address(0), own));
	{
		std::lock_guard<std::mutex> lock{g_mutex};
		selections().erase(variable); // a removed variable's memory, reused
	}
	adios2(variable, name, type, element_size, shape, start, count, constant_shape);
}

size_t deisa_adios2_guard_memory_selection(const void* variable, size_t capacity, size_t* start, size_t* count)
{
	std::lock_guard<std::mutex> lock{g_mutex};
	auto&& found = selections().find(variable);
	if (found == selections().end()) return 0;
	const Box& box = found->second;
	const size_t ndims = box.second.size();
	if (ndims > capacity || box.first.size() != ndims) return ndims;
	for (size_t axis = 0; axis < ndims; ++axis) {
		start[axis] = box.first[axis];
		count[axis] = box.second[axis];
	}
	return ndims;
}

void deisa_adios2_guard_definitions(const void** set_memory_selection, const void** variable_base)
{
	*set_memory_selection = reinterpret_cast<const void*>(&deisa_adios2_guard_set_memory_selection);
	*variable_base = reinterpret_cast<const void*>(&deisa_adios2_guard_variable_base);
}

namespace {

/// ADIOS2's PluginEngine constructor `name', run with `comm' the engine's while it runs
void construct_plugin_engine(
	const char* name,
	const void* own,
	const void* caller,
	void* engine,
	void* io,
	const void* engine_name,
	int mode,
	void* comm
)
{
	using Function = void (*)(void*, void*, const void*, int, void*);
	auto adios2 = reinterpret_cast<Function>(adios2_definition(name, caller, own));
	const void* outer = g_opening;
	g_opening = comm;
	try {
		adios2(engine, io, engine_name, mode, comm);
	} catch (...) {
		g_opening = outer;
		throw;
	}
	g_opening = outer;
}

} // namespace

void deisa_adios2_guard_plugin_engine_c1(void* engine, void* io, const void* name, int mode, void* comm)
{
	auto* own = reinterpret_cast<const void*>(&deisa_adios2_guard_plugin_engine_c1);
	construct_plugin_engine(DEISA_ADIOS2_PLUGIN_ENGINE_C1, own, __builtin_return_address(0), engine, io, name, mode, comm);
}

void deisa_adios2_guard_plugin_engine_c2(void* engine, void* io, const void* name, int mode, void* comm)
{
	auto* own = reinterpret_cast<const void*>(&deisa_adios2_guard_plugin_engine_c2);
	construct_plugin_engine(DEISA_ADIOS2_PLUGIN_ENGINE_C2, own, __builtin_return_address(0), engine, io, name, mode, comm);
}

size_t deisa_adios2_guard_add_transport(void* io, const std::string* type, const std::map<std::string, std::string>& parameters)
{
	using Function = size_t (*)(void*, const std::string*, const std::map<std::string, std::string>&);
	auto* own = reinterpret_cast<const void*>(&deisa_adios2_guard_add_transport);
	auto adios2 = reinterpret_cast<Function>(adios2_definition(DEISA_ADIOS2_ADD_TRANSPORT, __builtin_return_address(0), own));
	std::string line = *type; // before ADIOS2's own, which may take the string
	const size_t index = adios2(io, type, parameters); // what ADIOS2 refuses is not recorded
	std::string keys;
	for (auto&& parameter: parameters) {
		keys += (keys.empty() ? "" : ", ") + parameter.first;
	}
	if (!keys.empty()) line += " (" + keys + ")";
	std::lock_guard<std::mutex> lock{g_mutex};
	transports()[io] += line + "\n";
	return index;
}

const void* deisa_adios2_guard_opening_comm()
{
	return g_opening;
}

size_t deisa_adios2_guard_transports(const void* io, char* text, size_t capacity)
{
	std::lock_guard<std::mutex> lock{g_mutex};
	auto&& found = transports().find(io);
	if (found == transports().end()) return 0;
	const std::string& lines = found->second;
	if (lines.size() <= capacity) std::copy(lines.begin(), lines.end(), text);
	return lines.size();
}
