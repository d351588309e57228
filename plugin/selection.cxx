/* A memory or dataset selection in the deisa plugin configuration. */

#include <string>
#include <utility>
#include <vector>

#include <pdi/context.h>
#include <pdi/error.h>
#include <pdi/expression.h>
#include <pdi/paraconf_wrapper.h>

#include "selection.h"

using PDI::Context;
using PDI::Expression;
using PDI::Spectree_error;
using PDI::to_string;
using std::string;
using std::vector;

namespace deisa {

namespace {

vector<Expression> parse_expressions(const string& key, PC_tree_t tree)
{
	vector<Expression> result;
	PDI::opt_each(tree, [&](PC_tree_t element) {
		try {
			result.emplace_back(to_string(element));
		} catch (const PDI::Error& e) {
			throw Spectree_error{element, "Invalid $-expression in `{}': {}", key, e.what()};
		}
	});
	return result;
}

vector<long> evaluate(Context& ctx, PC_tree_t tree, const string& key, const vector<Expression>& expressions, size_t rank)
{
	if (expressions.size() != rank) {
		throw Spectree_error{tree, "`{}' has {} dimension(s), expecting {}", key, expressions.size(), rank};
	}
	vector<long> result;
	for (auto&& expression: expressions) {
		try {
			result.emplace_back(expression.to_long(ctx));
		} catch (const PDI::Error& e) {
			throw Spectree_error{tree, "Cannot evaluate `{}': {}", key, e.what()};
		}
	}
	return result;
}

} // namespace

Selection::Selection(string key)
	: m_key{std::move(key)}
{}

Selection::Selection(string key, PC_tree_t tree)
	: m_tree{tree}
	, m_key{std::move(key)}
{
	PDI::each(tree, [&](PC_tree_t key_tree, PC_tree_t value) {
		string sub_key = to_string(key_tree);
		if (sub_key == "size") {
			m_size = parse_expressions(m_key + ".size", value);
		} else if (sub_key == "start") {
			m_start = parse_expressions(m_key + ".start", value);
		} else {
			throw Spectree_error{key_tree, "Unknown key in deisa `{}': `{}' (expecting size or start)", m_key, sub_key};
		}
	});
}

vector<long> Selection::size(Context& ctx, const vector<long>& dflt) const
{
	if (m_size.empty()) return dflt;
	return evaluate(ctx, PC_get(m_tree, ".size"), m_key + ".size", m_size, dflt.size());
}

vector<long> Selection::start(Context& ctx, size_t rank) const
{
	if (m_start.empty()) return vector<long>(rank, 0);
	return evaluate(ctx, PC_get(m_tree, ".start"), m_key + ".start", m_start, rank);
}

} // namespace deisa
