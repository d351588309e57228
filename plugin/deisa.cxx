/* The deisa PDI plugin: publishes exposed arrays to Dask through one deisa.Bridge per MPI rank.
 *
 * Its configuration accepts decl_hdf5's (`datasets', `write' with `dataset', `when',
 * `memory_selection', `dataset_selection', `communicator', `on_event'; the keys that only
 * matter for files are ignored), so that switching a simulation from HDF5 files to in situ
 * analytics is a matter of two lines.  Its `read' section fills data exposed with PDI_IN or
 * PDI_INOUT from the steering values the analytics sets (deisa.Adapter.set).  See plugin/README.md.
 */

#include <memory>
#include <string>
#include <unordered_set>
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
#include "ignored_keys.h"
#include "python_interpreter.h"
#include "steering_read.h"

namespace {

using deisa::Array_transfer;
using deisa::Bridge_handle;
using deisa::Condition;
using deisa::Datasets;
using deisa::Ignored_keys;
using deisa::Python_interpreter;
using deisa::Steering_read;
using PDI::Context;
using PDI::each;
using PDI::Plugin;
using PDI::Ref;
using PDI::Spectree_error;
using PDI::to_string;
using std::string;
using std::unordered_set;
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

	/// the `read' entries: exposed data filled from steering values, in configuration order
	vector<Steering_read> m_reads;

	/// `on_event': the events at which every `write' entry is published; on data exposure if empty
	unordered_set<string> m_events;

public:
	deisa_plugin(Context& ctx, PC_tree_t config)
		: Plugin{ctx}
		, m_interpreter{ctx}
	{
		if (PDI::is_list(config)) {
			throw Spectree_error{
				config,
				"deisa configuration is one mapping, not a list of decl_hdf5 files: one scheduler_file, its datasets and its writes"};
		}
		auto datasets = std::make_shared<Datasets>();
		Condition default_when;
		Ignored_keys ignored;
		PC_tree_t write_tree = {PC_NODE_NOT_FOUND, nullptr, nullptr};
		PC_tree_t read_tree = {PC_NODE_NOT_FOUND, nullptr, nullptr};
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
				each(value, [&](PC_tree_t name, PC_tree_t type) {
					datasets->emplace_back(to_string(name), deisa::Dataset_description{type, ctx.datatype(type)});
				});
			} else if (key == "write") {
				write_tree = value;
			} else if (key == "on_event") {
				PDI::opt_each(value, [&](PC_tree_t event) { m_events.emplace(to_string(event)); });
			} else if (key == "read") {
				read_tree = value;
			} else if (deisa::is_file_only_key(key)) {
				ignored.add(key);
			} else if (key == "logging") {
				// handled by PDI
			} else if (key == "file") {
				throw Spectree_error{key_tree, "Unknown key in deisa configuration: `file' (decl_hdf5's `file' is deisa's `scheduler_file')"};
			} else {
				// a deisa.BridgeOptions key (placement, buffer_nb...), or an unknown one: Python says
				m_bridge.option(key_tree, value);
			}
		});
		if (PC_status(write_tree) || !(PDI::is_map(write_tree) || PDI::is_list(write_tree))) {
			throw Spectree_error{
				PC_status(write_tree) ? config : write_tree,
				"deisa configuration needs a `write' mapping from exposed data to datasets (e.g. `write: {{temp: {{dataset: gtemp}}}}')"};
		}
		m_transfers = Array_transfer::parse_write(write_tree, default_when, datasets, ignored);
		if (!PC_status(read_tree)) m_reads = Steering_read::parse_read(read_tree, default_when);
		m_bridge.validate(ctx, config, m_interpreter.start_seconds());
		ignored.log(ctx);

		if (m_events.empty()) {
			ctx.callbacks().add_data_callback([this](const string& name, Ref ref) { this->data(name, ref); });
		} else {
			ctx.callbacks().add_event_callback([this](const string& name) { this->event(name); });
		}
		ctx.logger().info("Plugin loaded successfully");
	}

	~deisa_plugin() noexcept(false)
	{
		m_bridge.close(context());
		context().logger().info("Closing plugin");
	}

	/** Publishes exposed data `name' for every matching `write' entry, then fills it from every matching `read' entry
	 * \param name the name of the exposed data
	 * \param ref a reference to it
	 */
	void data(const string& name, Ref ref) { transfer(&name, &ref); }

	/** Publishes every `write' entry, then reads every `read' entry, whose condition holds, at an `on_event' event (as decl_hdf5 does)
	 * \param event the name of the event
	 */
	void event(const string& event)
	{
		if (m_events.count(event)) transfer(nullptr, nullptr);
	}

	/** Publishes the `write' entries, then reads the `read' entries, of exposed data `name' (every entry if null) whose condition holds
	 * \param name the exposed data just shared, or null at an event
	 * \param ref a reference to it, or null to take each entry's data from the store
	 */
	void transfer(const string* name, const Ref* ref)
	{
		auto matches = [&](const string& data) {
			return !name || data == *name;
		};
		auto ref_of = [&](const string& data) {
			return ref ? *ref : context().desc(data).ref();
		};
		try {
			for (auto&& transfer: m_transfers) {
				if (!matches(transfer.data()) || !transfer.when(context())) continue;
				m_bridge.open(context(), m_transfers);
				if (m_bridge.outside(transfer)) continue; // this rank is outside the entry's `communicator'
				m_bridge.publish(context(), transfer.dataset(context()), transfer.block(context(), ref_of(transfer.data())));
			}
			for (auto&& read: m_reads) {
				if (matches(read.data()) && read.when(context())) this->read(read, ref_of(read.data()));
			}
		} catch (...) {
			m_bridge.join_imports(context()); // PDI's error handler may exit() next
			throw;
		}
	}

	/** Fills exposed data from the latest steering value of a `read' entry (collective), if the analytics set one
	 * \param read the entry
	 * \param ref the exposed data
	 */
	void read(const Steering_read& read, Ref ref)
	{
		m_bridge.get(context(), read.value_name(), [&](pybind11::handle value) { read.fill(ref, value); });
	}

	/** Pretty name for the plugin that will be shown in the logger
	 *
	 * \return pretty name of the plugin
	 */
	static string pretty_name() { return "Deisa"; }

}; // class deisa_plugin

} // namespace

PDI_PLUGIN(deisa)
