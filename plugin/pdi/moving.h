/* The `moving' key of a `write' entry: an array whose sizes and starts change from step to step. */

#ifndef DEISA_MOVING_H_
#define DEISA_MOVING_H_

#include <string>

#include <paraconf.h>

namespace deisa {

/** How a `write' entry's array moves (deisa's own grammar: the older grammars are not extended).
 *
 * Absent (or `moving: false'), the array is fixed, as before: its global size and this rank's
 * block are evaluated once, at the first publication, and a block of another shape later is an
 * error.  `moving: true' (or a mapping of the keys below) re-evaluates at each publication the
 * dataset's `size' (the step's global shape), `memory_selection' and `dataset_selection' (this
 * rank's box): the array is a `deisa.ArraySpec.moving' and each step is published with its shape
 * and boxes.  The mapping's keys:
 * - `joined': `true' (the first spatial axis) or a spatial axis's index: the ranks' boxes follow
 *   one another along that axis in rank order, each rank giving only its count (a particle
 *   array), as ADIOS2's JoinedDim; that axis's size in `datasets' and start in
 *   `dataset_selection' are not used;
 * - `boxes_until': an event's name: the data is exposed several times a step (one box each, at
 *   its `dataset_selection'), each box is copied at its expose, and the step's boxes are
 *   published together at that event (none from a rank that exposed none).
 */
class Moving
{
	/// the `moving' node, for error messages (absent: a fixed array)
	PC_tree_t m_tree = {PC_NODE_NOT_FOUND, nullptr, nullptr};

	/// whether the array moves
	bool m_moving = false;

	/// the joined spatial axis, -1 if none
	long m_joined_axis = -1;

	/// the `joined' node, for error messages
	PC_tree_t m_joined_tree = {PC_NODE_NOT_FOUND, nullptr, nullptr};

	/// the event at which the step's boxes are published, empty: each expose is published at once
	std::string m_boxes_until;

public:
	/// A fixed array (no `moving' key)
	Moving() = default;

	/** Parses the `moving' value of a `write' entry
	 * \param tree the value's node
	 * \param data the entry's exposed data, for error messages
	 * \throw PDI::Spectree_error naming `moving' or its key at fault
	 */
	Moving(PC_tree_t tree, const std::string& data);

	/** Whether the array moves
	 * \return true with `moving: true' or a mapping
	 */
	bool moving() const { return m_moving; }

	/** The joined spatial axis
	 * \return its index among the spatial axes, -1 if none
	 */
	long joined_axis() const { return m_joined_axis; }

	/** The event that ends a step's boxes
	 * \return its name, empty if each expose is published at once
	 */
	const std::string& boxes_until() const { return m_boxes_until; }

	/** The `moving' node
	 * \return it, absent for a fixed array
	 */
	PC_tree_t tree() const { return m_tree; }

	/** Checks the joined axis against the dataset's spatial rank
	 * \param rank the number of spatial axes of the dataset
	 * \param data the entry's exposed data, for error messages
	 * \param dataset the dataset's name, for error messages
	 * \throw PDI::Spectree_error on `joined' if the axis is not one of them
	 */
	void check_rank(size_t rank, const std::string& data, const std::string& dataset) const;
};

} // namespace deisa

#endif // DEISA_MOVING_H_
