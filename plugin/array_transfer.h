/* One entry of the deisa plugin's `write' section. */

#ifndef DEISA_ARRAY_TRANSFER_H_
#define DEISA_ARRAY_TRANSFER_H_

#include <string>
#include <unordered_map>
#include <vector>

#include <paraconf.h>

#include <pdi/pdi_fwd.h>
#include <pdi/expression.h>
#include <pdi/ref_any.h>

#include "condition.h"
#include "selection.h"

namespace deisa {

/// A global array of the `datasets' section: its YAML node and its PDI type
struct Dataset_description {
	/// the YAML node of the type, for error messages
	PC_tree_t tree;

	/// the type, evaluated when the bridge is created
	PDI::Datatype_template_sptr type;
};

/// What the bridge must know about one global array (a deisa.ArraySpec, which checks it)
struct Array_geometry {
	/// name of the exposed data, for error messages
	std::string data;

	/// name of the global array, for error messages
	std::string dataset;

	/// the YAML node that places the block (`dataset_selection', or the dataset's type), for error messages
	PC_tree_t tree;

	/// numpy name of the element type (e.g. `float64'), from the one PDI-to-numpy conversion
	std::string dtype;

	/// spatial size of the global array (the time axis is excluded)
	std::vector<long> global_shape;

	/// first index of this rank's block in the global array
	std::vector<long> start;

	/// size of this rank's block
	std::vector<long> shape;

	/// length of the time axis declared in `datasets', an upper bound on the step index
	long time_extent;
};

/// One block to publish: a strided, zero-copy description of exposed memory
struct Block {
	/// the exposed data, kept referenced while the block is in use
	PDI::Ref ref;

	/// address of the first selected element
	const void* data;

	/// numpy name of the element type, from the one PDI-to-numpy conversion
	std::string dtype;

	/// number of selected elements in each dimension
	std::vector<long> shape;

	/// distance in bytes between two consecutive elements in each dimension
	std::vector<long> strides;

	/// index on the time axis
	long step;
};

/** Sends an exposed data to a global array of the bridge.
 *
 * Mirrors decl_hdf5's DATA_IO_DESC: `dataset', `when', `memory_selection'
 * (e.g. to exclude ghost cells) and `dataset_selection' (whose first
 * dimension is the time axis).
 */
class Array_transfer
{
	/// name of the exposed data
	std::string m_data;

	/// name of the global array (a key of `datasets')
	std::string m_dataset;

	/// type of the global array, time axis first
	Dataset_description m_dataset_description;

	/// condition to publish
	Condition m_when;

	/// block selected in the exposed memory
	Selection m_memory_selection;

	/// position of the block in the global array, time index first
	Selection m_dataset_selection;

public:
	/** Parses one `write' entry
	 * \param data name of the exposed data (the key in `write')
	 * \param tree the entry's mapping (may be empty)
	 * \param default_when the plugin-level `when' (always true if absent)
	 * \param datasets the `datasets' section
	 */
	Array_transfer(
		std::string data,
		PC_tree_t tree,
		const Condition& default_when,
		const std::unordered_map<std::string, Dataset_description>& datasets
	);

	/** Name of the exposed data
	 * \return the key in `write'
	 */
	const std::string& data() const { return m_data; }

	/** Name of the global array
	 * \return the key in `datasets'
	 */
	const std::string& dataset() const { return m_dataset; }

	/** Evaluates `when'
	 * \param ctx the context in which to evaluate the condition
	 * \return whether to publish now
	 */
	bool when(PDI::Context& ctx) const;

	/** Evaluates the global array and this rank's block; the exposed data need not be available
	 * \param ctx the context in which to evaluate the $-expressions
	 * \return the description of the array for the bridge
	 */
	Array_geometry geometry(PDI::Context& ctx) const;

	/** Describes the selected part of the exposed data, without copying it
	 * \param ctx the context in which to evaluate the $-expressions
	 * \param ref the exposed data
	 * \return the block to publish
	 */
	Block block(PDI::Context& ctx, PDI::Ref ref) const;
};

} // namespace deisa

#endif // DEISA_ARRAY_TRANSFER_H_
