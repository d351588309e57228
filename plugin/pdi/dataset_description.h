/* A global array of the deisa plugin's configuration, in any of its grammars. */

#ifndef DEISA_DATASET_DESCRIPTION_H_
#define DEISA_DATASET_DESCRIPTION_H_

#include <climits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <paraconf.h>

#include <pdi/pdi_fwd.h>
#include <pdi/datatype_template.h>
#include <pdi/expression.h>

namespace deisa {

/// What a publication past the end of a fixed-length time axis does
enum class Past_end {
	ERROR, ///< a PDI error, as decl_hdf5's write into a full dataset (`datasets' of deisa's own grammar)
	END ///< nothing is published, with one warning: the stream holds the declared steps (the older grammars)
};

/// A global array, evaluated: what the bridge needs to know of it
struct Dataset_shape {
	/// numpy name of the element type (e.g. `float64')
	std::string dtype;

	/// spatial size (the time axis is excluded)
	std::vector<long> global_shape;

	/// length of the time axis, LONG_MAX when it is unbounded (`inf')
	long time_extent = LONG_MAX;

	/// names of the spatial axes (`dims'), empty when the YAML names none
	std::vector<std::string> dims;
};

/** A global array: a time axis first, then the spatial axes, and an element type.
 *
 * The grammars describe it in two ways, both kept here so that every later step (the geometry
 * of a block, the check of its time index) is the same:
 * - deisa's own grammar (decl_hdf5's `datasets'): any PDI type, evaluated as PDI does;
 * - the older grammars (the DEISA paper's array in `data', the released plugin's `deisa_arrays'):
 *   a `type: array' mapping whose `subtype' and `size' are read here, so that a time size of
 *   `inf' (the paper's unbounded time axis) and a `start' that moves with the step (the released
 *   plugin's) need no evaluation by PDI.
 */
class Dataset_description
{
	/// the YAML node of the array, for error messages
	PC_tree_t m_tree = {PC_NODE_NOT_FOUND, nullptr, nullptr};

	/// where the array is described, for error messages (e.g. "deisa_arrays.global_t")
	std::string m_path;

	/// the whole type (deisa's own grammar), null for the older grammars
	PDI::Datatype_template_sptr m_type;

	/// the element type (older grammars)
	PDI::Datatype_template_sptr m_element;

	/// the time axis's length (older grammars), absent when it is unbounded (`inf')
	std::optional<PDI::Expression> m_time_size;

	/// the spatial sizes (older grammars)
	std::vector<PDI::Expression> m_size;

	/// what a publication past the end of the time axis does
	Past_end m_past_end = Past_end::ERROR;

	/// the names of the spatial axes (deisa's own grammar: `dims' of the `datasets' entry), empty if none
	std::vector<std::string> m_dims;

	/// the `dims' node, for error messages
	PC_tree_t m_dims_tree = {PC_NODE_NOT_FOUND, nullptr, nullptr};

public:
	/** A `datasets' entry of deisa's own grammar
	 *
	 * Its `dims' key, if any (PDI ignores it in a type, so does decl_hdf5), names the spatial
	 * axes: a list of distinct, non-empty names, not `step' (the time axis's), one per spatial
	 * axis (the `size' list's length minus one, the time axis excluded).
	 * \param ctx the PDI context, to tell a scalar `subtype' (then the `size' list gives the rank)
	 * \param tree the type's YAML node
	 * \param type the type, as PDI parsed it
	 * \param name the entry's name, for error messages
	 * \throw PDI::Spectree_error if `dims' is not such a list
	 */
	Dataset_description(PDI::Context& ctx, PC_tree_t tree, PDI::Datatype_template_sptr type, const std::string& name);

	/** An array of the older grammars: a mapping with `type: array', `subtype' and `size' (time first)
	 *
	 * Its other keys are the caller's to check.
	 * \param ctx the PDI context, to parse the element type
	 * \param tree the array's YAML node
	 * \param path where the array is described, for error messages (e.g. "deisa_arrays.global_t")
	 * \param past_end what a publication past the end of a fixed-length time axis does
	 */
	Dataset_description(PDI::Context& ctx, PC_tree_t tree, std::string path, Past_end past_end);

	/** The YAML node of the array
	 * \return its node, for error messages
	 */
	PC_tree_t tree() const { return m_tree; }

	/** What a publication past the end of the time axis does
	 * \return the policy
	 */
	Past_end past_end() const { return m_past_end; }

	/** Where the time axis's length is given, for messages
	 * \return e.g. "`size[0]' of `deisa_arrays.global_t'", or "`datasets'"
	 */
	std::string time_axis_key() const;

	/** Evaluates the element type and the sizes
	 * \param ctx the context in which to evaluate the $-expressions
	 * \param name the array's name, for error messages
	 * \return the element type, the spatial shape, the time axis's length and the axes' names
	 * \throw PDI::Spectree_error if `dims' does not name every spatial axis of the evaluated type
	 */
	Dataset_shape evaluate(PDI::Context& ctx, const std::string& name) const;
};

/// The global arrays, in configuration order: name (a regular expression, as in decl_hdf5's `datasets') and description
using Datasets = std::vector<std::pair<std::string, Dataset_description>>;

} // namespace deisa

#endif // DEISA_DATASET_DESCRIPTION_H_
