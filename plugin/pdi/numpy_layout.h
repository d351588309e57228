/* The plugin's one conversion of PDI types to numpy's terms: an element type's dtype name and
 * the memory layout (shape, filled part, strides) of exposed data. */

#ifndef DEISA_NUMPY_LAYOUT_H_
#define DEISA_NUMPY_LAYOUT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pdi/pdi_fwd.h>

namespace deisa {

/** The numpy name of a PDI scalar type (`float64', `int32'...), the plugin's only conversion of
 * an element type, for published blocks, declared datasets and steering values alike
 * \param scalar the element type
 * \return its numpy name, or nothing for a type that is not a number
 */
std::optional<std::string> numpy_dtype(const PDI::Scalar_datatype& scalar);

/// The memory layout of exposed data: its (possibly partially filled) arrays, outermost first, down to their elements
struct Array_layout {
	/// allocated elements per dimension (none for a scalar)
	std::vector<long> size;

	/// first filled element per dimension
	std::vector<long> start;

	/// filled elements per dimension
	std::vector<long> subsize;

	/// the elements' type (the innermost one)
	PDI::Datatype_sptr element;

	/// the elements' type as a scalar, null where they are not scalars
	std::shared_ptr<const PDI::Scalar_datatype> scalar;

	/// byte strides of the allocated array (C order), one per dimension; needs `scalar'
	std::vector<long> strides() const;

	/** The byte offset of the first filled element
	 * \param strides the strides() of this layout
	 */
	long filled_offset(const std::vector<long>& strides) const;
};

/** The layout of a PDI type: the nested arrays are unwrapped down to their elements
 * \param type the type of the exposed data
 * \return its layout (`scalar' null where the innermost type is not a scalar)
 */
Array_layout array_layout(PDI::Datatype_sptr type);

/** The numpy name of the elements of a published block
 * \param scalar the element type
 * \return its numpy name
 * \throws PDI::Value_error for a type that is not a number
 */
std::string published_dtype(const PDI::Scalar_datatype& scalar);

} // namespace deisa

#endif // DEISA_NUMPY_LAYOUT_H_
