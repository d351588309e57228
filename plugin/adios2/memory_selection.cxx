/* The memory selection of a variable, as the deisa ADIOS2 engine learns it from the guard. */

#include <dlfcn.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "memory_selection.h"

using std::string;
using std::to_string;
using std::vector;

namespace deisa {

namespace {

template <typename Int>
string dims(const vector<Int>& values)
{
	string text = "{";
	for (size_t ii = 0; ii < values.size(); ++ii) {
		text += (ii ? ", " : "") + to_string(values[ii]);
	}
	return text + "}";
}

} // namespace

string Memory_selections::find_guard()
{
	auto* query = reinterpret_cast<Deisa_adios2_guard_query>(dlsym(RTLD_DEFAULT, DEISA_ADIOS2_GUARD_QUERY));
	auto* definitions = reinterpret_cast<Deisa_adios2_guard_definitions>(dlsym(RTLD_DEFAULT, DEISA_ADIOS2_GUARD_DEFINITIONS));
	if (query == nullptr || definitions == nullptr) return "the memory selection guard is not loaded";
	const void* set_memory_selection = nullptr;
	const void* variable_base = nullptr;
	definitions(&set_memory_selection, &variable_base);
	if (dlsym(RTLD_DEFAULT, DEISA_ADIOS2_SET_MEMORY_SELECTION) != set_memory_selection
	    || dlsym(RTLD_DEFAULT, DEISA_ADIOS2_VARIABLE_BASE_C2) != variable_base)
	{
		return "the memory selection guard is loaded but ADIOS2's calls do not reach it (it was not preloaded)";
	}
	m_query = query;
	return {};
}

bool Memory_selections::find(const void* variable, Memory_box& box) const
{
	if (m_query == nullptr) return false;
	constexpr size_t capacity = 32; // ADIOS2's dimensions are few
	box.start.assign(capacity, 0);
	box.count.assign(capacity, 0);
	const size_t ndims = m_query(variable, capacity, box.start.data(), box.count.data());
	box.start.resize(ndims <= capacity ? ndims : 0);
	box.count.resize(ndims <= capacity ? ndims : 0);
	return ndims != 0;
}

string guard_path()
{
	Dl_info info;
	if (dladdr(reinterpret_cast<const void*>(&guard_path), &info) == 0 || info.dli_fname == nullptr) return DEISA_ADIOS2_GUARD_FILE;
	const string engine = info.dli_fname;
	const size_t slash = engine.rfind('/');
	return slash == string::npos ? string{DEISA_ADIOS2_GUARD_FILE} : engine.substr(0, slash + 1) + DEISA_ADIOS2_GUARD_FILE;
}

void select_memory(const string& name, const Memory_box& box, const vector<long>& shape, long& offset, vector<long>& strides)
{
	const size_t ndims = shape.size();
	if (box.start.size() != ndims || box.count.size() != ndims) {
		throw std::invalid_argument{
			"deisa ADIOS2 engine: variable `" + name + "' has a memory selection of " + to_string(box.count.size()) + " dimensions for a block of "
			+ to_string(ndims)};
	}
	strides.assign(ndims, 1);
	offset = 0;
	for (size_t axis = ndims; axis-- > 0;) {
		if (box.start[axis] + static_cast<size_t>(shape[axis]) > box.count[axis]) {
			throw std::invalid_argument{
				"deisa ADIOS2 engine: variable `" + name + "': its block (count " + dims(shape) + ") at memory start " + dims(box.start)
				+ " does not fit in its memory count " + dims(box.count) + " (axis " + to_string(axis)
				+ "): SetMemorySelection's memory count is the buffer's size, at least memory start + count"};
		}
		if (axis + 1 < ndims) strides[axis] = strides[axis + 1] * static_cast<long>(box.count[axis + 1]);
		offset += static_cast<long>(box.start[axis]) * strides[axis];
	}
}

} // namespace deisa
