/* The boxes of a `moving.boxes_until' entry exposed in a step, kept until the step's event. */

#ifndef DEISA_GATHERED_BOXES_H_
#define DEISA_GATHERED_BOXES_H_

#include <string>
#include <utility>
#include <vector>

#include <pdi/pdi_fwd.h>

#include "array_transfer.h"

namespace deisa {

/// A step's boxes of one entry, copied at their exposes
struct Step_boxes {
	/// the global array
	std::string dataset;

	/// the index on the time axis
	long step = 0;

	/// the step's global shape, as the last box evaluated it (empty: a joined array's)
	std::vector<long> global_shape;

	/// the boxes, each a contiguous (C order) copy: `data' points into `copies', `ref' is null
	std::vector<Block> boxes;

	/// the copies' memory, one buffer per box
	std::vector<std::vector<char>> copies;
};

/** The boxes exposed since their entry's last `boxes_until' event, per `write' entry.
 *
 * Each box is copied at its expose (the code may refill the buffer for its next box, as a
 * file-writing code does), and the step's boxes are taken together at the event.  The boxes of
 * one entry between two events must share their time index and dataset.
 */
class Gathered_boxes
{
	/// the entries with boxes since their last event, and their boxes
	std::vector<std::pair<const Array_transfer*, Step_boxes>> m_pending;

public:
	/** Copies one exposed box of an entry
	 * \param transfer the entry
	 * \param dataset its global array at this expose
	 * \param block the box (Array_transfer::block)
	 * \throw PDI::Value_error if it belongs to another step or dataset than the entry's boxes since the last event
	 */
	void add(const Array_transfer& transfer, const std::string& dataset, const Block& block);

	/** Takes the boxes of an entry since its last event
	 * \param transfer the entry
	 * \return them; no box if it exposed none
	 */
	Step_boxes take(const Array_transfer& transfer);

	/** Whether an entry has boxes since its last event
	 * \param transfer the entry
	 * \return true if it has
	 */
	bool has(const Array_transfer& transfer) const;

	/** The entries with boxes left (their event did not come), for a warning at the end
	 * \return each entry's data, dataset, step and number of boxes
	 */
	const std::vector<std::pair<const Array_transfer*, Step_boxes>>& pending() const { return m_pending; }
};

} // namespace deisa

#endif // DEISA_GATHERED_BOXES_H_
