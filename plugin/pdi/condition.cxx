/* A `when' condition of the deisa plugin configuration. */

#include <string>

#include <pdi/context.h>
#include <pdi/error.h>
#include <pdi/expression.h>
#include <pdi/paraconf_wrapper.h>

#include "condition.h"

using PDI::Context;
using PDI::Expression;
using PDI::Spectree_error;
using PDI::to_string;
using std::string;

namespace deisa {

Condition::Condition(PC_tree_t tree, const string& where)
	: m_tree{tree}
{
	try {
		m_expression = Expression{to_string(tree)};
	} catch (const PDI::Error& e) {
		throw Spectree_error{tree, "Invalid `when' {}: {}", where, e.what()};
	}
}

bool Condition::evaluate(Context& ctx, const string& data) const
{
	try {
		return m_expression.to_long(ctx);
	} catch (const PDI::Error& e) {
		throw Spectree_error{m_tree, "Cannot evaluate `when' of `{}': {}", data, e.what()};
	}
}

} // namespace deisa
