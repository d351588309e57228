/* The `moving' key of a `write' entry: an array whose sizes and starts change from step to step. */

#include <regex>
#include <string>

#include <pdi/error.h>
#include <pdi/paraconf_wrapper.h>

#include "moving.h"

using PDI::Spectree_error;
using PDI::to_string;
using std::string;

namespace deisa {

namespace {

/// a YAML 1.2 core schema boolean: 1 for true, 0 for false, -1 for anything else
int yaml_boolean(PC_tree_t tree)
{
	if (!PDI::is_scalar(tree) || tree.node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return -1;
	static const std::regex yes{"true|True|TRUE"};
	static const std::regex no{"false|False|FALSE"};
	const string text = to_string(tree, "");
	if (std::regex_match(text, yes)) return 1;
	if (std::regex_match(text, no)) return 0;
	return -1;
}

} // namespace

Moving::Moving(PC_tree_t tree, const string& data)
	: m_tree{tree}
{
	const string expecting = "true, false, or a mapping of `joined' and `boxes_until' (e.g. `moving: {joined: true}')";
	const int flag = yaml_boolean(tree);
	if (flag >= 0) {
		m_moving = flag;
		return;
	}
	if (!PDI::is_map(tree)) throw Spectree_error{tree, "`moving' of `{}' must be {}, not `{}'", data, expecting, to_string(tree, "")};
	m_moving = true;
	PDI::each(tree, [&](PC_tree_t key_tree, PC_tree_t value) {
		const string key = to_string(key_tree);
		if (key == "joined") {
			m_joined_tree = value;
			const int joined = yaml_boolean(value);
			if (joined >= 0) {
				m_joined_axis = joined ? 0 : -1;
				return;
			}
			const string text = PDI::is_scalar(value) ? to_string(value, "") : "";
			if (!std::regex_match(text, std::regex{"[0-9]+"})) {
				throw Spectree_error{
					value,
					"`moving.joined' of `{}' must be true (the first spatial axis), false, or the index of a spatial axis (0 for the "
					"first, the time axis excluded), not `{}'",
					data,
					text};
			}
			m_joined_axis = std::stol(text);
		} else if (key == "boxes_until") {
			const string event = PDI::is_scalar(value) ? to_string(value, "") : "";
			if (event.empty() || event.find('$') != string::npos) {
				throw Spectree_error{
					value,
					"`moving.boxes_until' of `{}' must name the event that ends a step's boxes (e.g. `boxes_until: end_step'), not `{}'",
					data,
					event};
			}
			m_boxes_until = event;
		} else {
			throw Spectree_error{key_tree, "Unknown key in deisa `moving' of `{}': `{}' (expecting joined or boxes_until)", data, key};
		}
	});
}

void Moving::check_rank(size_t rank, const string& data, const string& dataset) const
{
	if (m_joined_axis < 0 || static_cast<size_t>(m_joined_axis) < rank) return;
	throw Spectree_error{
		m_joined_tree,
		"`moving.joined' of `{}' is axis {}, but dataset `{}' has {} spatial axis/axes (0 to {}, the time axis excluded)",
		data,
		m_joined_axis,
		dataset,
		rank,
		rank - 1};
}

} // namespace deisa
