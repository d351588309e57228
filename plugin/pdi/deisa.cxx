/* The deisa PDI plugin: publishes exposed arrays to Dask through one deisa.Bridge per MPI rank.
 *
 * Its configuration is read in any of three grammars (Configuration): deisa's own, decl_hdf5's
 * (going in situ is a two-line change), the DEISA paper's and the released DEISA plugin's.  Its
 * `read' section fills data exposed PDI_IN or PDI_INOUT from the analytics' steering values.
 * See plugin/pdi/README.md.
 */

#include <string>
#include <tuple>

#include <paraconf.h>

#include <pdi/context.h>
#include <pdi/logger.h>
#include <pdi/plugin.h>
#include <pdi/ref_any.h>

#include "bridge_handle.h"
#include "configuration.h"
#include "core/python_interpreter.h"
#include "gathered_boxes.h"
#include "steering_read.h"

namespace {

using deisa::Bridge_handle;
using deisa::Configuration;
using deisa::Gathered_boxes;
using deisa::Python_interpreter;
using deisa::Steering_read;
using deisa::Step_boxes;
using PDI::Context;
using PDI::Plugin;
using PDI::Ref;
using std::string;

/** The deisa plugin
 */
class deisa_plugin: public Plugin
{
	/// the embedded Python, first to be built and last to be destroyed
	Python_interpreter m_interpreter;

	/// this rank's deisa.Bridge
	Bridge_handle m_bridge;

	/// the configuration, in any grammar: the transfers, the steering reads, the events
	Configuration m_config;

	/// whether the `init_on' event happened
	bool m_init_seen = false;

	/// the boxes of the `moving.boxes_until' entries exposed since their event
	Gathered_boxes m_boxes;

	/// whether some `write' entry gathers its boxes until an event
	bool gathers() const
	{
		for (auto&& transfer: m_config.transfers()) {
			if (!transfer.moving().boxes_until().empty()) return true;
		}
		return false;
	}

public:
	deisa_plugin(Context& ctx, PC_tree_t config)
		: Plugin{ctx}
		, m_config{ctx, config, m_bridge.settings()}
	{
		if (m_interpreter.started()) {
			ctx.logger().debug("Python interpreter started by the plugin in {:.3f} s", m_interpreter.start_seconds());
		} else {
			ctx.logger().debug("Using the host program's Python interpreter");
		}
		m_bridge.validate(ctx, config, m_interpreter.start_seconds());
		if (!m_config.events().empty() || !m_config.init_on().empty() || gathers()) {
			ctx.callbacks().add_event_callback([this](const string& name) { this->event(name); });
		}
		if (m_config.events().empty()) {
			ctx.callbacks().add_data_callback([this](const string& name, Ref ref) { this->data(name, ref); });
		}
		ctx.logger().info("Plugin loaded successfully");
	}

	~deisa_plugin() noexcept(false)
	{
		if (!m_config.init_on().empty() && !m_init_seen) {
			context().logger().warn(
				"The `init_on' event `{}' never happened: the deisa Bridge was created at the first publication",
				m_config.init_on()
			);
		}
		for (auto&& pending: m_boxes.pending()) {
			context().logger().warn(
				"{} box(es) of `{}' for `{}' step {} were exposed after the last `{}' event (`moving.boxes_until'), which never came: "
				"they are not published",
				pending.second.boxes.size(),
				pending.first->data(),
				pending.second.dataset,
				pending.second.step,
				pending.first->moving().boxes_until()
			);
		}
		m_bridge.close(context());
		context().logger().info("Closing plugin");
	}

	/** Publishes exposed data `name' for every matching `write' entry, then fills it from every matching `read' entry
	 * \param name the name of the exposed data
	 * \param ref a reference to it
	 */
	void data(const string& name, Ref ref) { transfer(&name, &ref); }

	/** At the `init_on' event, creates the Bridge; at an `on_event' event, publishes every transfer, then reads every `read'
	 * entry, whose condition holds (as decl_hdf5 does)
	 * \param event the name of the event
	 */
	void event(const string& event)
	{
		if (event == m_config.init_on()) {
			m_init_seen = true;
			guarded([&] { m_bridge.open(context(), m_config.transfers()); });
		}
		if (m_config.events().count(event)) transfer(nullptr, nullptr);
		guarded([&] {
			for (auto&& transfer: m_config.transfers()) {
				if (transfer.moving().boxes_until() == event) publish_boxes(transfer);
			}
		});
	}

	/** Publishes the boxes of a `moving.boxes_until' entry exposed since its event (collective:
	 * none from this rank if it exposed none, unless its `when' is false now)
	 * \param transfer the entry
	 */
	void publish_boxes(const deisa::Array_transfer& transfer)
	{
		Step_boxes boxes = m_boxes.take(transfer);
		if (boxes.boxes.empty()) {
			if (!transfer.when(context())) return;
			boxes.dataset = transfer.dataset(context());
			std::tie(boxes.step, boxes.global_shape) = transfer.step_without_box(context());
		}
		m_bridge.open(context(), m_config.transfers());
		if (m_bridge.outside(transfer)) return;
		m_bridge.publish_boxes(context(), boxes);
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
		guarded([&] {
			// at an event, the entries' arrays of one step in one scope (deisa.Bridge.step)
			if (!name) m_bridge.begin_event();
			try {
				for (auto&& transfer: m_config.transfers()) {
					if (!matches(transfer.data()) || !transfer.when(context())) continue;
					m_bridge.open(context(), m_config.transfers());
					if (m_bridge.outside(transfer)) continue; // this rank is outside the entry's `communicator'
					if (name && !transfer.moving().boxes_until().empty()) { // one box of several: published at the event
						m_boxes.add(transfer, transfer.dataset(context()), transfer.block(context(), *ref));
						continue;
					}
					m_bridge.publish(context(), transfer.dataset(context()), transfer.block(context(), ref_of(transfer.data())));
				}
			} catch (...) {
				m_bridge.abandon_event();
				throw;
			}
			m_bridge.end_event(context());
			for (auto&& read: m_config.reads()) {
				if (matches(read.data()) && read.when(context())) this->read(read, ref_of(read.data()));
			}
		});
	}

	/** Runs `action', waiting for the imports if it throws: PDI's error handler may exit() next
	 * \param action what to run
	 */
	template <typename Action>
	void guarded(const Action& action)
	{
		try {
			action();
		} catch (...) {
			m_bridge.join_imports(context());
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
