/* The memory selection guard (plugin/adios2/memory_selection_guard.cxx), preloaded in a code
 * written against ADIOS2's C++ API: it sees every SetMemorySelection, keeps what ADIOS2
 * refuses out, forgets a reset selection, and forgets a removed variable's when a new variable
 * takes its memory.  Its 14 DoBufferData_<type> are the ones the process sees, give the lent
 * address for DEISA_ADIOS2_SPAN_BUFFER_INDEX alone, and leave BP5's Spans (BP5 has its own)
 * as they were.  Run by CTest (deisa_adios2_guard, LD_PRELOAD set) and tests/test_adios2.py.
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
	if (g_failures == 0) std::printf("guard: every check passed\n");
	return g_failures == 0 ? 0 : 1;
}
