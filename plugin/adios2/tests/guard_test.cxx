/* The memory selection guard (plugin/adios2/memory_selection_guard.cxx), preloaded in a code
 * written against ADIOS2's C++ API: it sees every SetMemorySelection, keeps what ADIOS2
 * refuses out, forgets a reset selection, and forgets a removed variable's when a new variable
 * takes its memory.  Run by CTest (deisa_adios2_guard, LD_PRELOAD set) and tests/test_adios2.py.
 */

#include <dlfcn.h>

#include <cstdio>
#include <exception>
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
	if (g_failures == 0) std::printf("guard: every check passed\n");
	return g_failures == 0 ? 0 : 1;
}
