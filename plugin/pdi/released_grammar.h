/* The released DEISA plugin's grammar (PDI 1.8 and 1.9): `deisa_arrays', `map_in', `time_step'. */

#ifndef DEISA_RELEASED_GRAMMAR_H_
#define DEISA_RELEASED_GRAMMAR_H_

#include <memory>
#include <vector>

#include <paraconf.h>

#include <pdi/pdi_fwd.h>

#include "array_transfer.h"
#include "condition.h"
#include "dataset_description.h"

namespace deisa {

/** Translates the grammar of the DEISA plugin that PDI 1.8 and 1.9 shipped into transfers.
 *
 * ```yaml
 * deisa:
 *   scheduler_info: scheduler.json
 *   init_on: init                 # the event after which the metadata is complete
 *   time_step: $timestep          # the time index of every publication
 *   deisa_arrays:
 *     global_t:
 *       type: array
 *       subtype: double
 *       size: [$MaxtimeSteps, '$nx * $px', '$ny * $py']  # the time axis first
 *       subsize: [1, '$nx', '$ny']                       # this rank's block
 *       start: [$timestep, '$nx * $cx', '$ny * $cy']     # its position (time: `time_step')
 *       +timedim: 0
 *   map_in: {local_t: global_t}   # the exposed data published into each array
 * ```
 *
 * Each `map_in' entry publishes the whole exposed data (its own `subsize' and `start' in `data',
 * if any, exclude its ghosts, as the released plugin's to_python did) into its array, at the
 * block that `subsize' and `start' give, at the time index `time_step' (which replaces
 * `start[0]', as in the released plugin).  `+timedim' must be 0.  A time axis of a fixed
 * length holds that many steps: a later one is not published (Past_end::END).  `scheduler_info'
 * and `init_on' are the plugin's (Configuration).
 */
class Released_grammar
{
public:
	/** Parses `deisa_arrays', `map_in' and `time_step'
	 * \param ctx the PDI context, to parse the element types
	 * \param config the plugin's section, for errors about a missing key
	 * \param deisa_arrays the `deisa_arrays' section
	 * \param map_in the `map_in' section
	 * \param time_step the `time_step' $-expression (absent if not given)
	 * \param default_when the plugin-level `when' (deisa's, for every array)
	 * \param datasets where to describe the global arrays
	 * \return the transfers, in `map_in' order
	 */
	static std::vector<Array_transfer> parse(
		PDI::Context& ctx,
		PC_tree_t config,
		PC_tree_t deisa_arrays,
		PC_tree_t map_in,
		PC_tree_t time_step,
		const Condition& default_when,
		const std::shared_ptr<Datasets>& datasets
	);
};

} // namespace deisa

#endif // DEISA_RELEASED_GRAMMAR_H_
