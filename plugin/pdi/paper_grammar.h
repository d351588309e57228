/* The DEISA paper's grammar (HiPC 2021): `transfer' in the plugin, `+map_in' on the data. */

#ifndef DEISA_PAPER_GRAMMAR_H_
#define DEISA_PAPER_GRAMMAR_H_

#include <memory>
#include <vector>

#include <paraconf.h>

#include <pdi/pdi_fwd.h>

#include "array_transfer.h"
#include "condition.h"
#include "dataset_description.h"

namespace deisa {

/** Translates the DEISA paper's grammar into transfers (its Listings 4 and 6).
 *
 * ```yaml
 * data:
 *   gtemp: {type: array, subtype: double, size: [inf, '$nx', '$ny']}  # virtual global array
 *   temp:
 *     type: array
 *     subtype: double
 *     size: ['$lx', '$ly']
 *     +map_in: {array: gtemp, size: [1, '$lx', '$ly'], start: [$step, '$x0', '$y0']}
 * plugins:
 *   deisa:
 *     scheduler_file: sched.json
 *     transfer: {gtemp: {when: '$step>0'}}
 * ```
 *
 * Each `transfer' entry names a global array declared in the YAML's `data' (or `metadata'),
 * time axis first and `inf' for an unbounded one, into which one data is mapped by its
 * `+map_in' (`array', and the slice's `size' and `start', time index first), or it names that
 * data itself; its value is empty or a mapping with `when' and `communicator'.  The data is
 * published whole: its own `subsize' and `start', if its type has them, exclude its ghosts.
 * `data' is read from the YAML document that holds the plugin's section (not from a file that
 * PDI's `include' brings in).
 */
class Paper_grammar
{
public:
	/** Parses `transfer' and the `+map_in' it refers to
	 * \param ctx the PDI context, to parse the element types
	 * \param config the plugin's section, to find the YAML's `data' from it
	 * \param transfer the `transfer' section: a mapping from array names to entries, or a list of names
	 * \param default_when the plugin-level `when'
	 * \param datasets where to describe the global arrays
	 * \return the transfers, in configuration order
	 */
	static std::vector<Array_transfer>
	parse(PDI::Context& ctx, PC_tree_t config, PC_tree_t transfer, const Condition& default_when, const std::shared_ptr<Datasets>& datasets);
};

} // namespace deisa

#endif // DEISA_PAPER_GRAMMAR_H_
