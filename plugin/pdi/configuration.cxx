/* The deisa plugin's configuration, in any of its three grammars, as one description. */

#include <memory>
#include <string>

#include <pdi/context.h>
#include <pdi/error.h>
#include <pdi/paraconf_wrapper.h>

#include "configuration.h"
#include "ignored_keys.h"
#include "paper_grammar.h"
#include "released_grammar.h"

using PDI::Context;
using PDI::Spectree_error;
using PDI::to_string;
using std::string;

namespace deisa {

namespace {

constexpr PC_tree_t ABSENT = {PC_NODE_NOT_FOUND, nullptr, nullptr};

} // namespace

Configuration::Configuration(Context& ctx, PC_tree_t config, Bridge_settings& bridge)
{
	if (PDI::is_list(config)) {
		throw Spectree_error{
			config,
			"deisa configuration is one mapping, not a list of decl_hdf5 files: one scheduler_file, its datasets and its writes"};
	}
	auto datasets = std::make_shared<Datasets>();
	Condition default_when;
	Ignored_keys ignored;
	PC_tree_t write = ABSENT, read = ABSENT, transfer = ABSENT, deisa_arrays = ABSENT, map_in = ABSENT, time_step = ABSENT;
	PDI::each(config, [&](PC_tree_t key_tree, PC_tree_t value) {
		string key = to_string(key_tree);
		m_grammar.add(key_tree);
		if (key == "scheduler_file" || key == "scheduler_info") {
			bridge.set_scheduler_file(value, key);
		} else if (key == "communicator") {
			bridge.set_communicator(value);
		} else if (key == "on_error") {
			bridge.on_error = to_on_error(value);
		} else if (key == "when") {
			default_when = Condition{value, "in deisa configuration"};
		} else if (key == "read") {
			read = value;
		} else if (key == "logging") {
			// handled by PDI, in every grammar
		} else if (key == "datasets") {
			PDI::each(value, [&](PC_tree_t name, PC_tree_t type) {
				datasets->emplace_back(to_string(name), Dataset_description{ctx, type, ctx.datatype(type), to_string(name)});
			});
		} else if (key == "write") {
			write = value;
		} else if (key == "on_event") {
			PDI::opt_each(value, [&](PC_tree_t event) { m_events.emplace(to_string(event)); });
		} else if (is_file_only_key(key)) {
			ignored.add(key);
		} else if (key == "dims") {
			throw Spectree_error{
				key_tree,
				"Unknown key in deisa configuration: `dims' (the names of a dataset's axes are given with the dataset, in `datasets': "
				"e.g. `gtemp: {type: array, subtype: double, size: [...], dims: [x, y]}')"};
		} else if (key == "file") {
			throw Spectree_error{key_tree, "Unknown key in deisa configuration: `file' (decl_hdf5's `file' is deisa's `scheduler_file')"};
		} else if (key == "transfer") {
			transfer = value;
		} else if (key == "deisa_arrays") {
			deisa_arrays = value;
		} else if (key == "map_in") {
			map_in = value;
		} else if (key == "time_step") {
			time_step = value;
		} else if (key == "init_on") {
			m_init_on = to_string(value);
		} else {
			// a deisa.BridgeOptions key (placement, buffer_nb...), or an unknown one: Python says
			bridge.options.add(key_tree, value);
		}
	});

	switch (m_grammar.kind()) {
	case Grammar_kind::OWN:
		if (PC_status(write) || !(PDI::is_map(write) || PDI::is_list(write))) {
			throw Spectree_error{
				PC_status(write) ? config : write,
				"deisa configuration needs a `write' mapping from exposed data to datasets (e.g. `write: {{temp: {{dataset: gtemp}}}}'; "
				"or, in the older grammars, the DEISA paper's `transfer' or the released plugin's `deisa_arrays' and `map_in')"};
		}
		m_transfers = Array_transfer::parse_write(write, default_when, datasets, ignored);
		break;
	case Grammar_kind::PAPER:
		m_transfers = Paper_grammar::parse(ctx, config, transfer, default_when, datasets);
		break;
	case Grammar_kind::RELEASED:
		m_transfers = Released_grammar::parse(ctx, config, deisa_arrays, map_in, time_step, default_when, datasets);
		break;
	}
	for (auto&& transfer: m_transfers) {
		if (!transfer.moving().boxes_until().empty() && !m_events.empty()) {
			throw Spectree_error{
				transfer.moving().tree(),
				"`moving.boxes_until' of `{}' gathers the boxes of its exposes, but the plugin's `on_event' publishes at events from the "
				"data store, not on expose: leave out one of them",
				transfer.data()};
		}
	}
	if (!PC_status(read)) m_reads = Steering_read::parse_read(read, default_when);
	ignored.log(ctx);
}

} // namespace deisa
