/* The DEISA paper's grammar (HiPC 2021): `transfer' in the plugin, `+map_in' on the data. */

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <pdi/context.h>
#include <pdi/error.h>
#include <pdi/paraconf_wrapper.h>

#include "paper_grammar.h"

using PDI::Context;
using PDI::Spectree_error;
using PDI::to_string;
using std::string;
using std::vector;

namespace deisa {

namespace {

constexpr PC_tree_t ABSENT = {PC_NODE_NOT_FOUND, nullptr, nullptr};

/// A data of the YAML's `data' or `metadata' section
struct Data_entry {
	/// its name
	string name;

	/// the node of its name
	PC_tree_t key;

	/// its type
	PC_tree_t type;

	/// its `+map_in' (absent if none), and the array named there
	PC_tree_t map_in = ABSENT;

	/// `+map_in.array'
	string array;
};

/// Whether `tree' holds `plugins' with `config' among them
bool holds_plugin(PC_tree_t tree, PC_tree_t config)
{
	bool found = false;
	PDI::each(tree, [&](PC_tree_t key, PC_tree_t value) {
		if (to_string(key) != "plugins" || !PDI::is_map(value)) return;
		PDI::each(value, [&](PC_tree_t, PC_tree_t plugin) { found = found || plugin.node == config.node; });
	});
	return found;
}

/// The PDI specification tree whose `plugins' hold `config', searched from `tree' (absent if none)
PC_tree_t specification_of(PC_tree_t tree, PC_tree_t config)
{
	PC_tree_t result = ABSENT;
	auto search = [&](PC_tree_t child) {
		if (PC_status(result)) result = specification_of(child, config);
	};
	if (PDI::is_map(tree)) {
		if (holds_plugin(tree, config)) return tree;
		PDI::each(tree, [&](PC_tree_t, PC_tree_t value) { search(value); });
	} else if (PDI::is_list(tree)) {
		PDI::each(tree, search);
	}
	return result;
}

/// The data and metadata of the specification, with their `+map_in'
vector<Data_entry> data_of(PC_tree_t specification)
{
	vector<Data_entry> result;
	PDI::each(specification, [&](PC_tree_t section_key, PC_tree_t section) {
		const string section_name = to_string(section_key);
		if ((section_name != "data" && section_name != "metadata") || !PDI::is_map(section)) return;
		PDI::each(section, [&](PC_tree_t name, PC_tree_t type) {
			Data_entry entry{to_string(name), name, type};
			if (PDI::is_map(type)) {
				PDI::each(type, [&](PC_tree_t key, PC_tree_t value) {
					if (to_string(key) == "+map_in") entry.map_in = value;
				});
			}
			if (!PC_status(entry.map_in)) {
				if (!PDI::is_map(entry.map_in)) {
					throw Spectree_error{entry.map_in, "`+map_in' of `{}' must be a mapping with array, size and start", entry.name};
				}
				PDI::each(entry.map_in, [&](PC_tree_t key, PC_tree_t value) {
					const string sub_key = to_string(key);
					if (sub_key == "array") {
						entry.array = to_string(value);
					} else if (sub_key != "size" && sub_key != "start") {
						throw Spectree_error{
							key,
							"Unknown key in `+map_in' of `{}': `{}' (expecting array: the global array, size and start: the slice of "
							"it that `{}' fills, time axis first)",
							entry.name,
							sub_key,
							entry.name};
					}
				});
				if (entry.array.empty()) {
					throw Spectree_error{entry.map_in, "`+map_in' of `{}' needs `array', the global array it is mapped into", entry.name};
				}
			}
			result.emplace_back(std::move(entry));
		});
	});
	return result;
}

/// Checks the keys of the DEISA paper's global array `name' (declared in `data' or `metadata')
void check_global_array(const Data_entry& array)
{
	if (!PDI::is_map(array.type)) return; // Dataset_description says what it needs
	PDI::each(array.type, [&](PC_tree_t key, PC_tree_t) {
		const string name = to_string(key);
		if (name != "type" && name != "subtype" && name != "size" && name[0] != '+') {
			throw Spectree_error{
				key,
				"`{}' of the global array `{}' has no meaning in situ (expecting type: array, subtype and size, the time axis first: "
				"`inf' or its length)",
				name,
				array.name};
		}
	});
}

} // namespace

vector<Array_transfer>
Paper_grammar::parse(Context& ctx, PC_tree_t config, PC_tree_t transfer, const Condition& default_when, const std::shared_ptr<Datasets>& datasets)
{
	PC_tree_t specification = specification_of(PC_root(config.document), config);
	if (PC_status(specification)) {
		throw Spectree_error{transfer, "Cannot find the PDI specification tree (with `data' and `plugins') that holds this deisa section"};
	}
	const vector<Data_entry> data = data_of(specification);
	auto&& find = [&](const string& name) -> const Data_entry* {
		for (auto&& entry: data) {
			if (entry.name == name) return &entry;
		}
		return nullptr;
	};

	vector<Array_transfer> result;
	auto&& add = [&](PC_tree_t name_tree, PC_tree_t entry) {
		const string name = to_string(name_tree);
		Condition when = default_when;
		PC_tree_t communicator = ABSENT;
		if (!PC_status(entry) && PDI::is_map(entry)) {
			PDI::each(entry, [&](PC_tree_t key, PC_tree_t value) {
				const string sub_key = to_string(key);
				if (sub_key == "when") {
					when = Condition{value, "for `" + name + "'"};
				} else if (sub_key == "communicator") {
					communicator = value;
				} else {
					throw Spectree_error{key, "Unknown key in deisa `transfer' entry of `{}': `{}' (expecting when or communicator)", name, sub_key};
				}
			});
		} else if (!PC_status(entry) && !to_string(entry, "").empty()) {
			throw Spectree_error{entry, "The deisa `transfer' entry of `{}' must be a mapping (with when or communicator)", name};
		}

		// `name' is the global array (the paper's Listing 6), or the data mapped into it
		const Data_entry* mapped = nullptr;
		for (auto&& candidate: data) {
			if (PC_status(candidate.map_in) || candidate.array != name) continue;
			if (mapped) {
				throw Spectree_error{
					name_tree,
					"deisa `transfer' of `{}': both `{}' and `{}' are mapped into it (`+map_in'); deisa publishes one data per array",
					name,
					mapped->name,
					candidate.name};
			}
			mapped = &candidate;
		}
		const Data_entry* self = find(name);
		if (!mapped && self && !PC_status(self->map_in)) mapped = self;
		if (!mapped) {
			throw Spectree_error{
				name_tree,
				"deisa `transfer' names `{}', but no data is mapped into it: give the data that fills it `+map_in: {{array: {}, size: "
				"[1, ...], start: [$step, ...]}}'",
				name,
				name};
		}
		const Data_entry* array = find(mapped->array);
		if (!array) {
			throw Spectree_error{
				PC_get(mapped->map_in, ".array"),
				"`{}' (`+map_in' of `{}') is not declared in the YAML's `data': declare it with type: array, subtype and size, the time "
				"axis first (`inf' for an unbounded one)",
				mapped->array,
				mapped->name};
		}
		check_global_array(*array);
		bool described = false;
		for (auto&& dataset: *datasets) {
			described = described || dataset.first == array->name;
		}
		if (!described) {
			datasets->emplace_back(array->name, Dataset_description{ctx, array->type, "data." + array->name, Past_end::END});
		}
		PC_tree_t array_tree = PC_get(mapped->map_in, ".array");
		const string where = "data." + mapped->name + ".+map_in";
		Selection selection{mapped->map_in, where + ".size", PC_get(mapped->map_in, ".size"), where + ".start", PC_get(mapped->map_in, ".start")};
		result.emplace_back(mapped->name, array->name, array_tree, datasets, when, std::move(selection), communicator);
	};

	if (PDI::is_list(transfer)) {
		PDI::each(transfer, [&](PC_tree_t name) { add(name, ABSENT); });
	} else if (PDI::is_map(transfer)) {
		PDI::each(transfer, add);
	} else {
		throw Spectree_error{transfer, "deisa `transfer' must be a mapping from global arrays to entries (with when), or a list of them"};
	}
	return result;
}

} // namespace deisa
