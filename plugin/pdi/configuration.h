/* The deisa plugin's configuration, in any of its three grammars, as one description. */

#ifndef DEISA_CONFIGURATION_H_
#define DEISA_CONFIGURATION_H_

#include <string>
#include <unordered_set>
#include <vector>

#include <paraconf.h>

#include <pdi/pdi_fwd.h>

#include "array_transfer.h"
#include "bridge_settings.h"
#include "grammar.h"
#include "steering_read.h"

namespace deisa {

/** Parses the plugin's section, in whichever of its grammars it is written (Grammar), into the
 * one description the plugin runs: the transfers (Array_transfer: a data, a global array, a
 * condition, a selection), the steering reads, and the events.
 *
 * The list of every key the section may hold is here.  The keys of every grammar
 * (`communicator', `on_error', `when', `read', `logging' and the Bridge options) keep their
 * meaning in each; the others belong to one grammar (Grammar::of_key) and are translated by it:
 * `datasets' and `write' here (decl_hdf5's shape), `transfer' by Paper_grammar, `deisa_arrays',
 * `map_in' and `time_step' by Released_grammar.  The Bridge's keys (`scheduler_file' or
 * `scheduler_info', `communicator', `on_error', the options) go to the Bridge_handle.
 */
class Configuration
{
	/// the grammar the section is written in
	Grammar m_grammar;

	/// the transfers, in configuration order (their addresses are kept by the Bridge_handle: never moved)
	std::vector<Array_transfer> m_transfers;

	/// the `read' entries: exposed data filled from steering values, in configuration order
	std::vector<Steering_read> m_reads;

	/// `on_event': the events at which every transfer is published; on data exposure if empty
	std::unordered_set<std::string> m_events;

	/// `init_on' (the released plugin's): the event at which the Bridge is created; empty if none
	std::string m_init_on;

public:
	/** Parses the plugin's section
	 * \param ctx the PDI context
	 * \param config the section
	 * \param bridge where the Bridge's keys go
	 */
	Configuration(PDI::Context& ctx, PC_tree_t config, Bridge_settings& bridge);

	Configuration(const Configuration&) = delete;

	Configuration& operator= (const Configuration&) = delete;

	/** The grammar the section is written in
	 * \return it
	 */
	Grammar_kind grammar() const { return m_grammar.kind(); }

	/** The transfers
	 * \return them, in configuration order
	 */
	const std::vector<Array_transfer>& transfers() const { return m_transfers; }

	/** The steering reads
	 * \return them, in configuration order
	 */
	const std::vector<Steering_read>& reads() const { return m_reads; }

	/** The events at which every transfer is published (`on_event')
	 * \return them; empty to publish on data exposure
	 */
	const std::unordered_set<std::string>& events() const { return m_events; }

	/** The event at which the Bridge is created (`init_on')
	 * \return its name, empty if none: the Bridge is created at the first publication
	 */
	const std::string& init_on() const { return m_init_on; }
};

} // namespace deisa

#endif // DEISA_CONFIGURATION_H_
