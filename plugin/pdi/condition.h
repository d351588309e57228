/* A `when' condition of the deisa plugin configuration. */

#ifndef DEISA_CONDITION_H_
#define DEISA_CONDITION_H_

#include <string>

#include <paraconf.h>

#include <pdi/pdi_fwd.h>
#include <pdi/expression.h>

namespace deisa {

/** A `when' value: an integer $-expression, publish when non-zero.
 *
 * Used for the plugin-level default and for each `write' entry, so that both
 * are parsed and evaluated, and report errors, the same way.
 */
class Condition
{
	/// the condition
	PDI::Expression m_expression{1L};

	/// YAML node of the condition, for error messages
	PC_tree_t m_tree = {PC_NODE_NOT_FOUND, nullptr, nullptr};

public:
	/// The absent condition: always true
	Condition() = default;

	/** Parses a `when' value
	 * \param tree the value's node
	 * \param where where it was given, for error messages (e.g. "in deisa configuration")
	 */
	Condition(PC_tree_t tree, const std::string& where);

	/** Evaluates the condition
	 * \param ctx the context in which to evaluate the $-expression
	 * \param data name of the exposed data it applies to, for error messages
	 * \return whether to publish now
	 */
	bool evaluate(PDI::Context& ctx, const std::string& data) const;
};

} // namespace deisa

#endif // DEISA_CONDITION_H_
