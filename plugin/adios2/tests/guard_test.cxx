/* The memory selection guard (plugin/adios2/memory_selection_guard.cxx), preloaded in a code
 * written against ADIOS2's C++ API: it sees every SetMemorySelection, keeps what ADIOS2
 * refuses out, forgets a reset selection, and forgets a removed variable's when a new variable
 * takes its memory.  Its 14 DoBufferData_<type> are the ones the process sees, give the lent
 * address for DEISA_ADIOS2_SPAN_BUFFER_INDEX alone, and leave BP5's Spans (BP5 has its own)
 * as they were.  It records each io's transports (from the XML and from AddTransport), and is
 * the process's PluginEngine constructor, which hands no communicator outside its run.  Run by CTest (deisa_adios2_guard, LD_PRELOAD set) and tests/test_adios2.py.
 */

#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <adios2.h>

#include "memory_selection_guard.h"

namespace {

int g_failures = 0;

void check(bool condition, const std::string& what)
{
	if (!condition) {
		std::fprintf(stderr, "FAILED: %s\n", what.c_str());
		++g_failures;
	}
}

const void* core_of(const adios2::Variable<double>& variable)
{
	return *reinterpret_cast<void* const *>(&variable);
}

/// The selection the guard recorded: memory start then memory count, empty if none
std::vector<size_t> recorded(Deisa_adios2_guard_query query, const adios2::Variable<double>& variable)
{
	size_t start[4], count[4];
	const size_t ndims = query(core_of(variable), 4, start, count);
	std::vector<size_t> box(start, start + ndims);
	box.insert(box.end(), count, count + ndims);
	return box;
}

/// The guard's DoBufferData_<type>: the process's, from the guard; the lent address for the engine's index alone
void check_buffer_data()
{
	using Buffer_data = void* (*)(const void*, int, size_t, size_t);
	double lent[4];
	const auto address = reinterpret_cast<std::uintptr_t>(lent);
#define DEISA_CHECK_BUFFER_DATA(N, L)                                                                                                                \
	{                                                                                                                                                \
		auto buffer_data = reinterpret_cast<Buffer_data>(dlsym(RTLD_DEFAULT, DEISA_ADIOS2_BUFFER_DATA_NAME(N, L)));                                  \
		Dl_info info;                                                                                                                                \
		const bool found = buffer_data != nullptr && dladdr(reinterpret_cast<void*>(buffer_data), &info) != 0 && info.dli_fname != nullptr;          \
		check(                                                                                                                                       \
			found&& std::string{info.dli_fname}.find(DEISA_ADIOS2_GUARD_FILE) != std::string::npos,                                                  \
			"the process's DoBufferData_" #L " is the guard's"                                                                                       \
		);                                                                                                                                           \
		if (found) {                                                                                                                                 \
			check(buffer_data(nullptr, DEISA_ADIOS2_SPAN_BUFFER_INDEX, address, 0) == lent, "DoBufferData_" #L ": the lent address");                \
			check(buffer_data(nullptr, DEISA_ADIOS2_SPAN_BUFFER_INDEX, address + 16, 0) == lent + 2, "DoBufferData_" #L ": an element's");           \
			check(                                                                                                                                   \
				buffer_data(nullptr, -1, address, 0) == nullptr && buffer_data(nullptr, 0, address, 0) == nullptr,                                   \
				"DoBufferData_" #L ": else null"                                                                                                     \
			);                                                                                                                                       \
		}                                                                                                                                            \
	}
	DEISA_ADIOS2_FOREACH_BUFFER_DATA(DEISA_CHECK_BUFFER_DATA)
#undef DEISA_CHECK_BUFFER_DATA
}

/// BP5's Spans, the guard preloaded: written through data() and operator[], read back as written
void check_bp5_span()
{
	const auto path = std::filesystem::temp_directory_path() / ("deisa_guard_test_" + std::to_string(getpid()) + ".bp");
	{
		adios2::ADIOS adios;
		adios2::IO io = adios.DeclareIO("span");
		io.SetEngine("BP5");
		auto u = io.DefineVariable<double>("U", {6}, {0}, {6});
		adios2::Engine writer = io.Open(path.string(), adios2::Mode::Write);
		writer.BeginStep();
		auto span = writer.Put(u, true, -7.5);
		check(span.data() != nullptr, "BP5's Span has its own memory");
		for (size_t at = 0; at + 1 < span.size(); ++at) {
			span[at] = 0.5 * static_cast<double>(at);
		}
		writer.EndStep();
		writer.Close();
	}
	{
		adios2::ADIOS adios;
		adios2::IO io = adios.DeclareIO("read");
		adios2::Engine reader = io.Open(path.string(), adios2::Mode::ReadRandomAccess);
		std::vector<double> values;
		reader.Get(io.InquireVariable<double>("U"), values, adios2::Mode::Sync);
		reader.Close();
		check(values == std::vector<double>({0, 0.5, 1, 1.5, 2, -7.5}), "BP5 writes its Span as the code wrote it");
	}
	std::filesystem::remove_all(path);
}

/// The io's transports, as the guard recorded them
std::string transports_of(Deisa_adios2_guard_transports transports, const adios2::IO& io)
{
	const void* core = *reinterpret_cast<void* const *>(&io);
	std::string lines(transports(core, nullptr, 0), '\0');
	transports(core, lines.data(), lines.size());
	return lines;
}

/// The guard records an io's transports, from its XML (the parser calls IO::AddTransport) and from the code
void check_transports()
{
	auto transports = reinterpret_cast<Deisa_adios2_guard_transports>(dlsym(RTLD_DEFAULT, DEISA_ADIOS2_GUARD_TRANSPORTS));
	auto opening = reinterpret_cast<Deisa_adios2_guard_opening>(dlsym(RTLD_DEFAULT, DEISA_ADIOS2_GUARD_OPENING));
	check(transports != nullptr && opening != nullptr, "the guard tells transports and the opening communicator");
	if (transports == nullptr || opening == nullptr) return;
	check(opening() == nullptr, "no communicator outside PluginEngine's constructor");
	for (const char* name: {DEISA_ADIOS2_PLUGIN_ENGINE_C1, DEISA_ADIOS2_PLUGIN_ENGINE_C2, DEISA_ADIOS2_ADD_TRANSPORT}) {
		Dl_info info;
		void* found = dlsym(RTLD_DEFAULT, name);
		check(
			found != nullptr && dladdr(found, &info) != 0 && info.dli_fname != nullptr
				&& std::string{info.dli_fname}.find(DEISA_ADIOS2_GUARD_FILE) != std::string::npos,
			std::string{"the process's "} + name + " is the guard's"
		);
	}
	const auto xml = std::filesystem::temp_directory_path() / ("deisa_guard_test_" + std::to_string(getpid()) + ".xml");
	std::FILE* file = std::fopen(xml.c_str(), "w");
	std::fputs(
		"<?xml version=\"1.0\"?><adios-config><io name=\"with\"><engine type=\"BP5\"/><transport type=\"File\">"
		"<parameter key=\"Library\" value=\"stdio\"/><parameter key=\"ProfileUnits\" value=\"Microseconds\"/></transport></io></adios-config>",
		file
	);
	std::fclose(file);
	{
		adios2::ADIOS adios(xml.string());
		adios2::IO with = adios.DeclareIO("with");
		check(
			transports_of(transports, with) == "File (Library, ProfileUnits)\n",
			"the XML's transport, recorded: " + transports_of(transports, with)
		);
		with.AddTransport("File", {{"Library", "posix"}});
		check(transports_of(transports, with) == "File (Library, ProfileUnits)\nFile (Library)\n", "and the code's");
		check(transports_of(transports, adios.DeclareIO("without")).empty(), "an io without transports has none");
	}
	std::filesystem::remove(xml);
}

} // namespace

int main()
{
	auto query = reinterpret_cast<Deisa_adios2_guard_query>(dlsym(RTLD_DEFAULT, DEISA_ADIOS2_GUARD_QUERY));
	auto definitions = reinterpret_cast<Deisa_adios2_guard_definitions>(dlsym(RTLD_DEFAULT, DEISA_ADIOS2_GUARD_DEFINITIONS));
	if (query == nullptr || definitions == nullptr) {
		std::fprintf(stderr, "FAILED: the guard is not loaded (LD_PRELOAD=%s)\n", DEISA_ADIOS2_GUARD_FILE);
		return 1;
	}
	const void *set_memory_selection, *variable_base;
	definitions(&set_memory_selection, &variable_base);
	check(dlsym(RTLD_DEFAULT, DEISA_ADIOS2_SET_MEMORY_SELECTION) == set_memory_selection, "ADIOS2's calls reach the guard's SetMemorySelection");
	check(dlsym(RTLD_DEFAULT, DEISA_ADIOS2_VARIABLE_BASE_C2) == variable_base, "... and its VariableBase constructor");

	adios2::ADIOS adios;
	adios2::IO io = adios.DeclareIO("guard");
	auto u = io.DefineVariable<double>("U", {10, 8}, {0, 0}, {4, 8});
	check(recorded(query, u).empty(), "no selection at first");
	u.SetMemorySelection({{1, 2}, {6, 11}});
	check(recorded(query, u) == std::vector<size_t>({1, 2, 6, 11}), "the selection, recorded");
	bool refused = false;
	try {
		u.SetMemorySelection({{0, 0}, {2, 8}}); // memoryCount < count: ADIOS2 refuses it
	} catch (const std::exception&) {
		refused = true;
	}
	check(refused && recorded(query, u) == std::vector<size_t>({1, 2, 6, 11}), "what ADIOS2 refuses is not recorded");
	u.SetMemorySelection({{}, {}});
	check(recorded(query, u).empty(), "an empty box resets it");

	u.SetMemorySelection({{1, 2}, {6, 11}});
	const void* removed = core_of(u);
	io.RemoveVariable("U");
	bool reused = false;
	for (int attempt = 0; attempt < 8 && !reused; ++attempt) { // the allocator gives the memory back, soon if not at once
		auto w = io.DefineVariable<double>("W" + std::to_string(attempt), {10, 8}, {0, 0}, {4, 8});
		reused = core_of(w) == removed;
		check(recorded(query, w).empty(), "a new variable has no selection, even in a removed one's memory");
	}
	std::printf("guard: a removed variable's memory %s\n", reused ? "reused" : "not reused here");
	check_buffer_data();
	check_bp5_span();
	check_transports();
	if (g_failures == 0) std::printf("guard: every check passed\n");
	return g_failures == 0 ? 0 : 1;
}
