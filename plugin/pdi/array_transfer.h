/* One entry of the deisa plugin's `write' section. */

#ifndef DEISA_ARRAY_TRANSFER_H_
#define DEISA_ARRAY_TRANSFER_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <paraconf.h>

#include <pdi/pdi_fwd.h>
#include <pdi/expression.h>
#include <pdi/ref_any.h>

#include "condition.h"
#include "dataset_description.h"
#include "ignored_keys.h"
#include "moving.h"
#include "numpy_layout.h"
#include "selection.h"

namespace deisa {

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

	/// length of the time axis, an upper bound on the step index (LONG_MAX: unbounded)
	long time_extent;

	/// what a publication past the end of the time axis does
	Past_end past_end;

	/// where the time axis's length is given, for messages
	std::string time_axis_key;

	/// names of the spatial axes (`dims' of the dataset), empty when the YAML names none
	std::vector<std::string> dims;

	/// whether its sizes and starts are evaluated at each step (`moving'): then `global_shape' holds the first
	/// publication's, for the rank only, and `start' and `shape' are empty
	bool moving = false;

	/// the joined spatial axis (`moving.joined'), -1 if none
	long joined_axis = -1;
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

	/// a moving array's (`moving'): this step's global shape, the time axis excluded (empty when joined)
	std::vector<long> global_shape = {};

	/// a moving array's: the box's first index in this step's global shape (empty when joined: placed in rank order)
	std::vector<long> start = {};
};

/** Sends an exposed data to a global array of the bridge: the internal description of a
 * transfer that every grammar of the configuration is translated into.
 *
 * In deisa's own grammar, mirrors decl_hdf5's DATA_IO_DESC: `dataset' (a name or a
 * $-expression, matched against the `datasets' keys as decl_hdf5 does), `when',
 * `memory_selection' (e.g. to exclude ghost cells), `dataset_selection' (whose first dimension
 * is the time axis) and `communicator'; the keys that only matter for files (`mpio',
 * `attributes'...) are accepted and ignored.  The older grammars (Paper_grammar,
 * Released_grammar) build it from its parts.
 */
class Array_transfer
{
	/// name of the exposed data
	std::string m_data;

	/// `dataset' as written: the name of the global array, or a $-expression of it
	std::string m_dataset;

	/// `dataset' when it is a $-expression, evaluated at each publication
	std::optional<PDI::Expression> m_dataset_expression;

	/// the YAML node of `dataset' (or of the entry), for error messages
	PC_tree_t m_dataset_tree;

	/// the `datasets' section
	std::shared_ptr<const Datasets> m_datasets;

	/// condition to publish
	Condition m_when;

	/// block selected in the exposed memory
	Selection m_memory_selection;

	/// position of the block in the global array, time index first
	Selection m_dataset_selection;

	/// the YAML node of `communicator', absent if not given
	PC_tree_t m_communicator = {PC_NODE_NOT_FOUND, nullptr, nullptr};

	/// whether and how the sizes and starts change from step to step (`moving')
	Moving m_moving;

	/** The block's size in the dataset, checked against the memory selection's
	 * \param ctx the context in which to evaluate the $-expressions
	 * \param memory_shape the size selected in memory
	 * \param dataset_name the dataset's name, for error messages
	 * \return the spatial size (the time axis's, 1, excluded)
	 */
	std::vector<long> dataset_size(PDI::Context& ctx, const std::vector<long>& memory_shape, const std::string& dataset_name) const;

	/** The description of a dataset
	 * \param name the evaluated `dataset'
	 * 
eturn its entry of `datasets' (exact name first, then the first regular expression that matches it)
	 */
	const Dataset_description& description(const std::string& name) const;

public:
	/** Parses one `write' entry (a DATA_IO_DESC)
	 * \param data_tree name of the exposed data (the key in `write', or an element of its list form)
	 * \param tree the entry's mapping (absent or empty for the defaults)
	 * \param default_when the plugin-level `when' (always true if absent)
	 * \param datasets the `datasets' section
	 * \param ignored where to record the keys that only matter for files
	 */
	Array_transfer(
		PC_tree_t data_tree,
		PC_tree_t tree,
		const Condition& default_when,
		std::shared_ptr<const Datasets> datasets,
		Ignored_keys& ignored
	);

	/** A transfer of the older grammars, from its parts; the whole exposed data is published
	 * (its own `subsize' and `start', if its PDI type has them, exclude its ghosts)
	 * \param data name of the exposed data
	 * \param dataset name of the global array, described in `datasets'
	 * \param dataset_tree the YAML node that names the array, for error messages
	 * \param datasets the global arrays
	 * \param when condition to publish
	 * \param dataset_selection position of the block in the global array, time index first
	 * \param communicator the YAML node of a `communicator' of its own, absent if none
	 */
	Array_transfer(
		std::string data,
		std::string dataset,
		PC_tree_t dataset_tree,
		std::shared_ptr<const Datasets> datasets,
		Condition when,
		Selection dataset_selection,
		PC_tree_t communicator = {PC_NODE_NOT_FOUND, nullptr, nullptr}
	);

	/** Parses the `write' section, in any of decl_hdf5's forms: a list of data names, or a mapping
	 * from data names to a DATA_IO_DESC or a list of them; attribute writes are ignored
	 * \param tree the `write' section
	 * \param default_when the plugin-level `when'
	 * \param datasets the `datasets' section
	 * \param ignored where to record the keys and the entries that only matter for files
	 * 
eturn the entries, in configuration order
	 */
	static std::vector<Array_transfer>
	parse_write(PC_tree_t tree, const Condition& default_when, std::shared_ptr<const Datasets> datasets, Ignored_keys& ignored);

	/** Name of the exposed data
	 * 
eturn the key in `write'
	 */
	const std::string& data() const { return m_data; }

	/** Name of the global array
	 * \param ctx the context in which to evaluate `dataset' if it is a $-expression
	 * 
eturn the evaluated `dataset'
	 */
	std::string dataset(PDI::Context& ctx) const;

	/** The `communicator' of this entry
	 * 
eturn its YAML node, absent (PC_status non-zero) if not given
	 */
	PC_tree_t communicator() const { return m_communicator; }

	/** How the array moves (`moving')
	 * \return it: not moving if the entry has no `moving' key
	 */
	const Moving& moving() const { return m_moving; }

	/** Evaluates `when'
	 * \param ctx the context in which to evaluate the condition
	 * \return whether to publish now
	 */
	bool when(PDI::Context& ctx) const;

	/** Evaluates the global array and this rank's block (only the dtype and the rank of a moving
	 * array, whose block is evaluated at each publication by block); the exposed data need not be available
	 * \param ctx the context in which to evaluate the $-expressions
	 * \return the description of the array for the bridge
	 */
	Array_geometry geometry(PDI::Context& ctx) const;

	/** A step of a moving array from which this rank has no box (`moving.boxes_until': nothing
	 * exposed since the last event): its time index and, if it can be evaluated now, its global shape
	 * \param ctx the context in which to evaluate the $-expressions
	 * \return the time index, and the global shape (empty for a joined array, or one that cannot
	 * be evaluated without the data of a box: the ranks with boxes give it)
	 */
	std::pair<long, std::vector<long>> step_without_box(PDI::Context& ctx) const;

	/** Describes the selected part of the exposed data, without copying it; for a moving array
	 * (`moving'), also evaluates this step's global shape and the box's start
	 * \param ctx the context in which to evaluate the $-expressions
	 * \param ref the exposed data
	 * \return the block to publish
	 */
	Block block(PDI::Context& ctx, PDI::Ref ref) const;
};

} // namespace deisa

#endif // DEISA_ARRAY_TRANSFER_H_
