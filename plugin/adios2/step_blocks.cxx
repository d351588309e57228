/* The blocks of the step an ADIOS2 code is writing, and how each declared array publishes them. */

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "step_blocks.h"

using std::invalid_argument;
using std::string;
using std::to_string;
using std::vector;

namespace deisa {

namespace {

string dims(const vector<long>& values)
{
	string text = "{";
	for (size_t ii = 0; ii < values.size(); ++ii) {
		text += (ii ? ", " : "") + to_string(values[ii]);
	}
	return text + "}";
}

} // namespace

void Step_block::keep_copy()
{
	if (!copy.empty() || nbytes == 0) return;
	const auto* bytes = static_cast<const unsigned char*>(data);
	if (memory_strides.empty()) {
		copy.assign(bytes, bytes + nbytes); // one pass: no zeroing first, as resize would
	} else {
		copy_rows(bytes);
		memory_strides.clear();
	}
	data = copy.data();
}

void Step_block::copy_rows(const unsigned char* bytes)
{
	// a sub-box of the code's buffer: one memcpy per row of the last axis (contiguous there)
	const size_t ndims = shape.size();
	size_t rows = 1;
	for (size_t axis = 0; axis + 1 < ndims; ++axis) {
		rows *= static_cast<size_t>(shape[axis]);
	}
	const size_t row_bytes = nbytes / rows;
	const size_t itemsize = row_bytes / static_cast<size_t>(shape.back());
	copy.reserve(nbytes);
	vector<long> index(ndims, 0);
	for (size_t row = 0; row < rows; ++row) {
		long element = 0;
		for (size_t axis = 0; axis + 1 < ndims; ++axis) {
			element += index[axis] * memory_strides[axis];
		}
		const unsigned char* first = bytes + element * static_cast<long>(itemsize);
		copy.insert(copy.end(), first, first + row_bytes);
		for (size_t axis = ndims - 1; axis-- > 0;) { // the next row, the last axis but one fastest
			if (++index[axis] < shape[axis]) break;
			index[axis] = 0;
		}
	}
}

Strided_block Step_block::strided(long itemsize) const
{
	vector<long> strides(shape.size());
	long stride = itemsize;
	for (size_t axis = shape.size(); axis-- > 0;) {
		strides[axis] = memory_strides.empty() ? stride : memory_strides[axis] * itemsize;
		stride *= shape[axis];
	}
	return {data, dtype, shape, strides};
}

bool Step_block::empty() const
{
	return std::any_of(shape.begin(), shape.end(), [](long count) { return count == 0; });
}

void Step_blocks::add(Step_block block, size_t step)
{
	for (auto&& other: m_blocks) {
		if (other.name != block.name) continue;
		if (block.value) {
			throw invalid_argument{
				"deisa ADIOS2 engine: single value `" + block.name + "' Put twice by this rank in step " + to_string(step)
				+ ": a step has one value of it"};
		}
		if (other.global_shape != block.global_shape) {
			throw invalid_argument{
				"deisa ADIOS2 engine: variable `" + block.name + "' Put with the shape " + dims(block.global_shape) + " after "
				+ dims(other.global_shape) + " by this rank in step " + to_string(step)
				+ ": the blocks of a step lie in one shape (SetShape before the step's first Put)"};
		}
	}
	m_blocks.emplace_back(std::move(block));
}

void Step_blocks::keep_copies()
{
	for (auto&& block: m_blocks) {
		block.keep_copy();
	}
}

vector<const Step_block*> Step_blocks::of(const string& name) const
{
	vector<const Step_block*> blocks;
	for (auto&& block: m_blocks) {
		if (block.name == name) blocks.emplace_back(&block);
	}
	return blocks;
}

vector<string> Step_blocks::new_names() const
{
	vector<string> names;
	for (auto&& block: m_blocks) {
		const bool known = std::any_of(m_declared.begin(), m_declared.end(), [&](auto&& array) { return array.name == block.name; });
		if (!known) names.emplace_back(block.name);
	}
	std::sort(names.begin(), names.end());
	names.erase(std::unique(names.begin(), names.end()), names.end());
	return names;
}

void Step_blocks::declare(vector<Declared_array> arrays)
{
	for (auto&& array: arrays) {
		m_declared.emplace_back(std::move(array));
	}
	std::sort(m_declared.begin(), m_declared.end(), [](auto&& a, auto&& b) { return a.name < b.name; });
}

Publication Step_blocks::publication(const Declared_array& array) const
{
	Publication result;
	result.array = &array;
	const vector<const Step_block*> blocks = of(array.name);
	if (array.path != Path::moving && blocks.size() == 1) {
		const Step_block& block = *blocks.front();
		if (array.path == Path::value || (block.global_shape == array.global_shape && block.start == array.start && block.shape == array.shape)) {
			result.plain = &block; // as declared: today's path
			return result;
		}
	}
	for (auto&& block: blocks) {
		if (block->joined_axis < 0) result.shape = block->global_shape; // one shape per step (add)
		if (!block->empty()) result.boxes.emplace_back(block);
	}
	return result;
}

} // namespace deisa
