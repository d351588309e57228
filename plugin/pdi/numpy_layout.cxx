/* The plugin's one conversion of PDI types to numpy's terms (see numpy_layout.h). */

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pdi/array_datatype.h>
#include <pdi/datatype.h>
#include <pdi/error.h>
#include <pdi/scalar_datatype.h>

#include "numpy_layout.h"

using PDI::Array_datatype;
using PDI::Datatype_sptr;
using PDI::Scalar_datatype;
using PDI::Scalar_kind;
using PDI::Value_error;
using std::dynamic_pointer_cast;
using std::string;
using std::vector;

namespace deisa {

std::optional<string> numpy_dtype(const Scalar_datatype& scalar)
{
	const string bits = std::to_string(8 * scalar.datasize());
	switch (scalar.kind()) {
	case Scalar_kind::FLOAT:
		return "float" + bits;
	case Scalar_kind::SIGNED:
		return "int" + bits;
	case Scalar_kind::UNSIGNED:
		return "uint" + bits;
	default:
		return std::nullopt;
	}
}

Array_layout array_layout(Datatype_sptr type)
{
	Array_layout layout;
	while (auto&& array_type = dynamic_pointer_cast<const Array_datatype>(type)) {
		layout.size.emplace_back(array_type->size());
		layout.start.emplace_back(array_type->start());
		layout.subsize.emplace_back(array_type->subsize());
		type = array_type->subtype();
	}
	layout.element = type;
	layout.scalar = dynamic_pointer_cast<const Scalar_datatype>(type);
	return layout;
}

vector<long> Array_layout::strides() const
{
	vector<long> result(size.size(), static_cast<long>(scalar->buffersize()));
	for (size_t dim = size.size(); dim-- > 1;) {
		result[dim - 1] = result[dim] * size[dim];
	}
	return result;
}

long Array_layout::filled_offset(const vector<long>& strides) const
{
	long offset = 0;
	for (size_t dim = 0; dim < start.size(); ++dim) {
		offset += start[dim] * strides[dim];
	}
	return offset;
}

string published_dtype(const Scalar_datatype& scalar)
{
	if (auto dtype = numpy_dtype(scalar)) return *dtype;
	throw Value_error{"deisa cannot publish elements of type {}", scalar.debug_string()};
}

} // namespace deisa
