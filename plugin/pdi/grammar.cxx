/* The three YAML grammars of the deisa plugin, and which one a configuration is written in. */

#include <algorithm>
#include <string>
#include <vector>

#include <pdi/error.h>
#include <pdi/paraconf_wrapper.h>

#include "grammar.h"
#include "ignored_keys.h"

using PDI::Spectree_error;
using PDI::to_string;
using std::string;
using std::vector;

namespace deisa {

namespace {

/// "A", "A or B", "A, B or C"
string names(const vector<Grammar_kind>& kinds)
{
	string result;
	for (size_t ii = 0; ii < kinds.size(); ++ii) {
		result += (ii == 0 ? "" : ii + 1 == kinds.size() ? " or " : ", ") + Grammar::name(kinds[ii]);
	}
	return result;
}

} // namespace

vector<Grammar_kind> Grammar::of_key(const string& key)
{
	if (key == "datasets" || key == "write" || key == "on_event" || key == "file" || is_file_only_key(key)) {
		return {Grammar_kind::OWN};
	}
	if (key == "scheduler_file") return {Grammar_kind::OWN, Grammar_kind::PAPER};
	if (key == "transfer") return {Grammar_kind::PAPER};
	if (key == "scheduler_info" || key == "time_step" || key == "deisa_arrays" || key == "map_in") {
		return {Grammar_kind::RELEASED};
	}
	return {};
}

string Grammar::name(Grammar_kind kind)
{
	switch (kind) {
	case Grammar_kind::OWN:
		return "deisa's own grammar (decl_hdf5's shape)";
	case Grammar_kind::PAPER:
		return "the DEISA paper's grammar (HiPC 2021)";
	case Grammar_kind::RELEASED:
		return "the released DEISA plugin's grammar (PDI 1.8 and 1.9)";
	}
	return "";
}

void Grammar::add(PC_tree_t key_tree)
{
	const string key = to_string(key_tree);
	const vector<Grammar_kind> kinds = of_key(key);
	if (kinds.empty()) return;
	vector<Grammar_kind> possible;
	for (auto&& kind: m_possible) {
		if (std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) possible.emplace_back(kind);
	}
	if (possible.empty()) {
		throw Spectree_error{
			key_tree,
			"deisa configuration mixes two grammars: `{}' is a key of {}, `{}' (line {}) of {}; write the section in one of them "
			"(docs/yaml-reference.md shows them side by side)",
			key,
			names(kinds),
			m_key,
			m_key_tree.node->start_mark.line + 1,
			names(m_possible)};
	}
	if (possible.size() < m_possible.size()) {
		m_possible = std::move(possible);
		m_key = key;
		m_key_tree = key_tree;
	}
}

} // namespace deisa
