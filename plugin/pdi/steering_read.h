/* One entry of the deisa plugin's `read' section: exposed data filled from a steering value. */

#ifndef DEISA_STEERING_READ_H_
#define DEISA_STEERING_READ_H_

#include <string>
#include <vector>

#include <paraconf.h>
#include <pybind11/pybind11.h>

#include <pdi/pdi_fwd.h>
#include <pdi/ref_any.h>

#include "condition.h"

namespace deisa {

/** Fills an exposed buffer with the latest steering value the analytics set.
 *
 * Mirrors decl_hdf5's `read' grammar: a list of data names (each read from the
 * steering value of the same name), or a mapping from data names to an entry
 * with `dataset' (the steering value's name) and `when'.  The data must be
 * exposed with PDI_IN or PDI_INOUT; while the analytics has set no value the
 * buffer is left as it is.  Reading is collective over the bridge's ranks
 * (deisa.Bridge.get): every rank must expose the data at the same point, with
 * the same `when'.
 */
class Steering_read
{
	/// name of the exposed data
	std::string m_data;

	/// name of the steering value (`dataset')
	std::string m_value;

	/// condition to read
	Condition m_when;

public:
	/** Parses one `read' entry
	 * \param data_tree name of the exposed data (the key in `read', or an element of its list form)
	 * \param tree the entry's mapping (absent or empty for the defaults)
	 * \param default_when the plugin-level `when' (always true if absent)
	 */
	Steering_read(PC_tree_t data_tree, PC_tree_t tree, const Condition& default_when);

	/** Parses the `read' section: a list of data names, or a mapping from data names to entries
	 * \param tree the section
	 * \param default_when the plugin-level `when'
	 * \return the entries, in configuration order
	 */
	static std::vector<Steering_read> parse_read(PC_tree_t tree, const Condition& default_when);

	/** Name of the exposed data
	 * \return the key in `read'
	 */
	const std::string& data() const { return m_data; }

	/** Name of the steering value
	 * \return `dataset', or the data's name
	 */
	const std::string& value_name() const { return m_value; }

	/** Evaluates `when'
	 * \param ctx the context in which to evaluate the condition
	 * \return whether to read now
	 */
	bool when(PDI::Context& ctx) const { return m_when.evaluate(ctx, m_data); }

	/** Copies a steering value into the exposed buffer (the GIL must be held)
	 * \param ref the exposed data
	 * \param value the steering value: a scalar or an array of the buffer's shape, whose
	 *        type converts to the buffer's without changing kind (bool to int is fine, float to int is not)
	 */
	void fill(PDI::Ref ref, pybind11::handle value) const;
};

} // namespace deisa

#endif // DEISA_STEERING_READ_H_
