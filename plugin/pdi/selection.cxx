/* A memory or dataset selection in the deisa plugin configuration. */

#include <algorithm>
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
	if (PC_status(tree)) return result;
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
	, m_size_key{m_key + ".size"}
	, m_start_key{m_key + ".start"}
{}

Selection::Selection(string key, PC_tree_t tree)
	: Selection{std::move(key)}
{
	m_tree = tree;
	PDI::each(tree, [&](PC_tree_t key_tree, PC_tree_t value) {
		string sub_key = to_string(key_tree);
		if (sub_key == "size") {
			m_size_tree = value;
			m_size = parse_expressions(m_size_key, value);
		} else if (sub_key == "start") {
			m_start_tree = value;
			m_start = parse_expressions(m_start_key, value);
		} else {
			throw Spectree_error{key_tree, "Unknown key in deisa `{}': `{}' (expecting size or start)", m_key, sub_key};
		}
	});
}

Selection::Selection(PC_tree_t tree, string size_key, PC_tree_t size, string start_key, PC_tree_t start)
	: m_tree{tree}
	, m_key{size_key}
	, m_size_key{std::move(size_key)}
	, m_size_tree{size}
	, m_size{parse_expressions(m_size_key, size)}
	, m_start_key{std::move(start_key)}
	, m_start_tree{start}
	, m_start{parse_expressions(m_start_key, start)}
{}

void Selection::time_index(string key, PC_tree_t tree)
{
	try {
		m_time.emplace(to_string(tree));
	} catch (const PDI::Error& e) {
		throw Spectree_error{tree, "Invalid $-expression for `{}': {}", key, e.what()};
	}
	m_time_key = std::move(key);
	m_time_tree = tree;
}

vector<long> Selection::size(Context& ctx, const vector<long>& dflt) const
{
	if (m_size.empty()) return dflt;
	return evaluate(ctx, m_size_tree, m_size_key, m_size, dflt.size());
}

long Selection::time_start(Context& ctx, size_t rank) const
{
	if (m_time) {
		// `start[0]' is not evaluated: the time index replaces it (the released plugin ignored it too)
		try {
			return m_time->to_long(ctx);
		} catch (const PDI::Error& e) {
			throw Spectree_error{m_time_tree, "Cannot evaluate `{}': {}", m_time_key, e.what()};
		}
	}
	if (m_start.empty()) return 0;
	check_start_rank(rank);
	return evaluate(ctx, m_start_tree, m_start_key, {m_start.front()}, 1)[0];
}

vector<long> Selection::start(Context& ctx, size_t rank) const
{
	if (!rank) return {};
	vector<long> result{time_start(ctx, rank)};
	vector<long> spatial = spatial_start(ctx, rank);
	result.insert(result.end(), spatial.begin(), spatial.end());
	return result;
}

vector<long> Selection::spatial_start(Context& ctx, size_t rank) const
{
	if (!rank) return {};
	if (m_start.empty()) return vector<long>(rank - 1, 0);
	check_start_rank(rank);
	return evaluate(ctx, m_start_tree, m_start_key, vector<Expression>(m_start.begin() + 1, m_start.end()), rank - 1);
}

void Selection::check_start_rank(size_t rank) const
{
	if (m_start.size() != rank) {
		throw Spectree_error{m_start_tree, "`{}' has {} dimension(s), expecting {}", m_start_key, m_start.size(), rank};
	}
}

} // namespace deisa
