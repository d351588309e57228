/* The blocks of the step an ADIOS2 code is writing, and the arrays they must match. */

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

string changed(const Step_block& block, const Step_block& declared)
{
	if (block.dtype != declared.dtype) return "its type (" + declared.dtype + " -> " + block.dtype + ")";
	if (block.global_shape != declared.global_shape) return "its shape (" + dims(declared.global_shape) + " -> " + dims(block.global_shape) + ")";
	if (block.start != declared.start) return "this rank's start (" + dims(declared.start) + " -> " + dims(block.start) + ")";
	if (block.shape != declared.shape) return "this rank's count (" + dims(declared.shape) + " -> " + dims(block.shape) + ")";
	return {};
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

void Step_blocks::add(Step_block block, size_t step)
{
	for (auto&& other: m_blocks) {
		if (other.name == block.name) {
			throw invalid_argument{
				"deisa ADIOS2 engine: variable `" + block.name + "' Put twice by this rank in step " + to_string(step)
				+ ": one block per rank and step is published (several blocks of a rank are not supported)"};
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

vector<string> Step_blocks::value_names() const
{
	vector<string> names;
	for (auto&& block: m_blocks) {
		if (block.value) names.emplace_back(block.name);
	}
	return names;
}

void Step_blocks::declare(const vector<string>& value_names)
{
	m_declared.clear();
	for (auto&& block: m_blocks) {
		// the single values are rank 0's (below): this rank's geometry, where it Put one too
		if (block.value && std::find(value_names.begin(), value_names.end(), block.name) == value_names.end()) continue;
		Step_block array = block;
		array.copy.clear();
		array.data = nullptr;
		m_declared.emplace_back(std::move(array));
	}
	for (auto&& name: value_names) {
		if (std::any_of(m_declared.begin(), m_declared.end(), [&](auto&& array) { return array.name == name; })) continue;
		Step_block value;
		value.name = name;
		value.value = true;
		m_declared.emplace_back(std::move(value));
	}
	std::sort(m_declared.begin(), m_declared.end(), [](auto&& a, auto&& b) { return a.name < b.name; });
}

vector<const Step_block*> Step_blocks::to_publish(size_t step, int rank) const
{
	vector<const Step_block*> blocks;
	for (auto&& declared: m_declared) {
		if (declared.value && rank != 0) continue;
		auto&& found = std::find_if(m_blocks.begin(), m_blocks.end(), [&](auto&& block) { return block.name == declared.name; });
		if (found == m_blocks.end()) {
			throw invalid_argument{
				"deisa ADIOS2 engine: variable `" + declared.name + "' was not Put by rank " + to_string(rank) + " in step " + to_string(step)
				+ ": every rank Puts every published variable in every published step (the `Variables' parameter chooses them)"};
		}
		const string difference = declared.value ? string{} : changed(*found, declared);
		if (!difference.empty()) {
			throw invalid_argument{
				"deisa ADIOS2 engine: variable `" + declared.name + "' changed " + difference + " in step " + to_string(step)
				+ ": a published array keeps its shape and decomposition"};
		}
		blocks.emplace_back(&*found);
	}
	for (auto&& block: m_blocks) {
		const bool known = std::any_of(m_declared.begin(), m_declared.end(), [&](auto&& array) { return array.name == block.name; });
		if (!known && !(block.value && rank != 0)) {
			throw invalid_argument{
				"deisa ADIOS2 engine: variable `" + block.name + "' is first Put in step " + to_string(step)
				+ ": the published variables are those Put in the first published step"};
		}
	}
	return blocks;
}

} // namespace deisa
