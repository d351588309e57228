/* The boxes of a `moving.boxes_until' entry exposed in a step, kept until the step's event. */

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <pdi/error.h>
#include <pdi/ref_any.h>
#include <pdi/scalar_datatype.h>

#include "gathered_boxes.h"
#include "numpy_layout.h"

using std::string;
using std::vector;

namespace deisa {

namespace {

/// Copies the strided elements of `shape' from `from' (dimension `dim' on) to `to', in C order
void copy_strided(const char* from, const vector<long>& shape, const vector<long>& strides, size_t dim, size_t itemsize, char*& to)
{
	if (dim == shape.size() || (dim + 1 == shape.size() && strides[dim] == static_cast<long>(itemsize))) {
		const size_t bytes = itemsize * (dim == shape.size() ? 1 : shape[dim]); // an element, or a contiguous row
		std::memcpy(to, from, bytes);
		to += bytes;
		return;
	}
	for (long index = 0; index < shape[dim]; ++index) {
		copy_strided(from + index * strides[dim], shape, strides, dim + 1, itemsize, to);
	}
}

} // namespace

void Gathered_boxes::add(const Array_transfer& transfer, const string& dataset, const Block& block)
{
	auto found = std::find_if(m_pending.begin(), m_pending.end(), [&](auto&& entry) { return entry.first == &transfer; });
	if (found == m_pending.end()) {
		m_pending.emplace_back(&transfer, Step_boxes{dataset, block.step, {}, {}, {}});
		found = m_pending.end() - 1;
	}
	Step_boxes& pending = found->second;
	if (pending.step != block.step || pending.dataset != dataset) {
		throw PDI::Value_error{
			"deisa: a box of `{}' for `{}' step {} is exposed before the `moving.boxes_until' event `{}' of its boxes for `{}' step {}: "
			"the boxes of one step end with the event",
			transfer.data(),
			dataset,
			block.step,
			transfer.moving().boxes_until(),
			pending.dataset,
			pending.step};
	}
	const PDI::Ref_r readable{block.ref};
	const size_t itemsize = array_layout(readable.type()).scalar->datasize();
	long count = 1;
	for (auto&& size: block.shape) {
		count *= size;
	}
	vector<char> copy(itemsize * count);
	if (count) {
		char* to = copy.data();
		copy_strided(static_cast<const char*>(block.data), block.shape, block.strides, 0, itemsize, to);
	}
	vector<long> strides(block.shape.size(), static_cast<long>(itemsize));
	for (size_t dim = block.shape.size(); dim-- > 1;) {
		strides[dim - 1] = strides[dim] * block.shape[dim];
	}
	pending.global_shape = block.global_shape;
	pending.boxes.emplace_back(
		Block{PDI::Ref{}, copy.data(), block.dtype, block.shape, std::move(strides), block.step, block.global_shape, block.start}
	);
	pending.copies.emplace_back(std::move(copy)); // the buffer moves with its vector: `data' stays valid
}

Step_boxes Gathered_boxes::take(const Array_transfer& transfer)
{
	auto found = std::find_if(m_pending.begin(), m_pending.end(), [&](auto&& entry) { return entry.first == &transfer; });
	if (found == m_pending.end()) return {};
	Step_boxes result = std::move(found->second);
	m_pending.erase(found);
	return result;
}

bool Gathered_boxes::has(const Array_transfer& transfer) const
{
	return std::any_of(m_pending.begin(), m_pending.end(), [&](auto&& entry) { return entry.first == &transfer; });
}

} // namespace deisa
