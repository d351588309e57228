/* The deisa PDI plugin: publishes exposed arrays to Dask through one deisa.Bridge per MPI rank.
 *
 * Its configuration mirrors decl_hdf5's (`datasets', `write' with `dataset', `when',
 * `memory_selection', `dataset_selection'), so that switching a simulation from HDF5 files
 * to in situ analytics is a matter of a few lines.  See plugin/README.md.
 */

#include <string>
#include <unordered_map>
#include <vector>

#include <paraconf.h>

#include <pdi/context.h>
#include <pdi/error.h>
#include <pdi/logger.h>
#include <pdi/paraconf_wrapper.h>
#include <pdi/plugin.h>
#include <pdi/ref_any.h>

#include "array_transfer.h"
#include "bridge_handle.h"
#include "python_interpreter.h"

namespace {

using deisa::Array_transfer;
using deisa::Bridge_handle;
using deisa::Condition;
using deisa::Dataset_description;
using deisa::Python_interpreter;
using PDI::Context;
using PDI::each;
using PDI::Plugin;
using PDI::Ref;
using PDI::Spectree_error;
using PDI::to_string;
using std::string;
using std::unordered_map;
using std::vector;

/** The deisa plugin
 */
class deisa_plugin: public Plugin
{
	/// the embedded Python, first to be built and last to be destroyed
	Python_interpreter m_interpreter;

	/// this rank's deisa.Bridge
	Bridge_handle m_bridge;

	/// the `write' entries, in configuration order
	vector<Array_transfer> m_transfers;

public:
	deisa_plugin(Context& ctx, PC_tree_t config)
		: Plugin{ctx}
		, m_interpreter{ctx}
	{
		unordered_map<string, Dataset_description> datasets;
		Condition default_when;
		PC_tree_t write_tree = {PC_NODE_NOT_FOUND, nullptr, nullptr};
		each(config, [&](PC_tree_t key_tree, PC_tree_t value) {
			string key = to_string(key_tree);
			if (key == "scheduler_file") {
				m_bridge.scheduler_file(value);
			} else if (key == "communicator") {
				m_bridge.communicator(value);
			} else if (key == "on_error") {
				m_bridge.on_error(deisa::to_on_error(value));
			} else if (key == "when") {
				default_when = Condition{value, "in deisa configuration"};
			} else if (key == "datasets") {
				each(value, [&](PC_tree_t name, PC_tree_t type) { datasets[to_string(name)] = {type, ctx.datatype(type)}; });
			} else if (key == "write") {
				write_tree = value;
			} else if (key == "logging") {
				// handled by PDI
			} else {
				// a deisa.BridgeOptions key (placement, buffer_nb...), or an unknown one: Python says
				m_bridge.option(key_tree, value);
			}
		});
		if (PC_status(write_tree) || !PDI::is_map(write_tree)) {
			throw Spectree_error{
				PC_status(write_tree) ? config : write_tree,
				"deisa configuration needs a `write' mapping from exposed data to datasets (e.g. `write: {{temp: {{dataset: gtemp}}}}')"};
		}
		each(write_tree, [&](PC_tree_t data, PC_tree_t entry) { m_transfers.emplace_back(to_string(data), entry, default_when, datasets); });
		m_bridge.validate(ctx, config);

		ctx.callbacks().add_data_callback([this](const string& name, Ref ref) { this->data(name, ref); });
		ctx.logger().info("Plugin loaded successfully");
	}

	~deisa_plugin() noexcept(false)
	{
		m_bridge.close(context());
		context().logger().info("Closing plugin");
	}

	/** Publishes `ref' for every matching `write' entry
	 * \param name the name of the exposed data
	 * \param ref a reference to it
	 */
	void data(const string& name, Ref ref)
	{
		for (auto&& transfer: m_transfers) {
			if (transfer.data() != name || !transfer.when(context())) continue;
			m_bridge.open(context(), m_transfers);
			m_bridge.publish(context(), transfer.dataset(), transfer.block(context(), ref));
		}
	}

	/** Pretty name for the plugin that will be shown in the logger
	 *
	 * \return pretty name of the plugin
	 */
	static string pretty_name() { return "Deisa"; }

}; // class deisa_plugin

} // namespace

PDI_PLUGIN(deisa)
