/* The released DEISA plugin's grammar (PDI 1.8 and 1.9): `deisa_arrays', `map_in', `time_step'. */

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <pdi/context.h>
#include <pdi/error.h>
#include <pdi/logger.h>
#include <pdi/paraconf_wrapper.h>

#include "released_grammar.h"

using PDI::Context;
using PDI::Spectree_error;
using PDI::to_string;
using std::string;
using std::vector;

namespace deisa {

namespace {

/// Checks the keys of a `deisa_arrays' entry, and that its time axis is the first
void check_array(PC_tree_t tree, const string& path)
{
	if (!PDI::is_map(tree)) return; // Dataset_description says what it needs
	PDI::each(tree, [&](PC_tree_t key, PC_tree_t value) {
		const string name = to_string(key);
		if (name == "+timedim") {
			if (to_string(value) != "0") {
				throw Spectree_error{
					value,
					"`{}.+timedim' must be 0: the time axis is the first (the released plugin supported no other), not `{}'",
					path,
					to_string(value)};
			}
		} else if (name != "type" && name != "subtype" && name != "size" && name != "subsize" && name != "start" && name[0] != '+') {
			throw Spectree_error{key, "Unknown key in `{}': `{}' (expecting type: array, subtype, size, subsize, start and +timedim: 0)", path, name};
		}
	});
}

} // namespace

vector<Array_transfer> Released_grammar::parse(
	Context& ctx,
	PC_tree_t config,
	PC_tree_t deisa_arrays,
	PC_tree_t map_in,
	PC_tree_t time_step,
	const Condition& default_when,
	const std::shared_ptr<Datasets>& datasets
)
{
	if (PC_status(deisa_arrays) || PC_status(map_in)) {
		throw Spectree_error{
			config,
			"deisa configuration in the released DEISA plugin's grammar needs `deisa_arrays' (the global arrays) and `map_in' (the "
			"exposed data published into each)"};
	}
	if (!PDI::is_map(deisa_arrays)) {
		throw Spectree_error{deisa_arrays, "`deisa_arrays' must be a mapping from array names to their description"};
	}
	PDI::each(deisa_arrays, [&](PC_tree_t name, PC_tree_t array) {
		const string path = "deisa_arrays." + to_string(name);
		check_array(array, path);
		datasets->emplace_back(to_string(name), Dataset_description{ctx, array, path, Past_end::END});
	});
	if (!PDI::is_map(map_in)) {
		throw Spectree_error{map_in, "`map_in' must be a mapping from exposed data to `deisa_arrays' names (e.g. `map_in: {{local_t: global_t}}')"};
	}
	if (PC_status(time_step)) {
		throw Spectree_error{
			config,
			"deisa configuration in the released DEISA plugin's grammar needs `time_step', the time index (e.g. `time_step: $timestep')"};
	}

	vector<Array_transfer> result;
	vector<string> mapped;
	PDI::each(map_in, [&](PC_tree_t data, PC_tree_t array_tree) {
		const string array = to_string(array_tree, "");
		if (!PDI::is_scalar(array_tree) || array.empty()) {
			throw Spectree_error{array_tree, "`map_in.{}' must name an array of `deisa_arrays'", to_string(data)};
		}
		PC_tree_t array_desc = {PC_NODE_NOT_FOUND, nullptr, nullptr};
		PDI::each(deisa_arrays, [&](PC_tree_t name, PC_tree_t desc) {
			if (to_string(name) == array) array_desc = desc;
		});
		if (PC_status(array_desc)) {
			throw Spectree_error{array_tree, "`map_in.{}': `{}' is not an array of `deisa_arrays'", to_string(data), array};
		}
		const string path = "deisa_arrays." + array;
		Selection selection{array_desc, path + ".subsize", PC_get(array_desc, ".subsize"), path + ".start", PC_get(array_desc, ".start")};
		selection.time_index("time_step", time_step);
		result.emplace_back(to_string(data), array, array_tree, datasets, default_when, std::move(selection));
		mapped.emplace_back(array);
	});
	for (auto&& array: *datasets) {
		if (std::find(mapped.begin(), mapped.end(), array.first) == mapped.end()) {
			ctx.logger().warn("`deisa_arrays.{}' is mapped from no data in `map_in': it is not published", array.first);
		}
	}
	return result;
}

} // namespace deisa
