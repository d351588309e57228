/* A global array of the deisa plugin's configuration, in any of its grammars. */

#include <algorithm>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include <pdi/context.h>
#include <pdi/datatype.h>
#include <pdi/error.h>
#include <pdi/expression.h>
#include <pdi/paraconf_wrapper.h>
#include <pdi/scalar_datatype.h>

#include "dataset_description.h"
#include "numpy_layout.h"

using PDI::Context;
using PDI::Datatype_sptr;
using PDI::Expression;
using PDI::Spectree_error;
using PDI::to_string;
using std::string;
using std::vector;

namespace deisa {

namespace {

/// Whether a size is the DEISA paper's unbounded time axis (`inf', or YAML's `.inf')
bool is_infinite(const string& text)
{
	return text == "inf" || text == "Inf" || text == "INF" || text == ".inf" || text == ".Inf" || text == ".INF";
}

/** What a YAML scalar is when it is not a string (YAML 1.2's core schema: a plain null, boolean,
 * integer or float)
 * \param scalar the node
 * \return "null", "a boolean" or "a number"; empty for a string (quoted, or plain and none of these)
 */
string non_string(PC_tree_t scalar)
{
	if (scalar.node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return "";
	static const std::regex null{"~|null|Null|NULL|"};
	static const std::regex boolean{"true|True|TRUE|false|False|FALSE"};
	static const std::regex number{
		"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+|[-+]?([.][0-9]+|[0-9]+([.][0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?[.](inf|Inf|INF)|[.](nan|NaN|NAN)"};
	const string text = to_string(scalar, "");
	if (std::regex_match(text, null)) return "null";
	if (std::regex_match(text, boolean)) return "a boolean";
	if (std::regex_match(text, number)) return "a number";
	return "";
}

/// Whether an array type's `subtype' is a scalar type (then its `size' lists every axis)
bool scalar_subtype(Context& ctx, PC_tree_t tree)
{
	PC_tree_t subtype = PC_get(tree, ".subtype");
	if (PC_status(subtype)) return false;
	try {
		return static_cast<bool>(std::dynamic_pointer_cast<const PDI::Scalar_datatype>(ctx.datatype(subtype)->evaluate(ctx)));
	} catch (const PDI::Error&) {
		return false; // not evaluable now: the length of `dims' is checked at the first publication
	}
}

} // namespace

Dataset_description::Dataset_description(Context& ctx, PC_tree_t tree, PDI::Datatype_template_sptr type, const string& name)
	: m_tree{tree}
	, m_type{std::move(type)}
{
	if (!PDI::is_map(tree)) return;
	PC_tree_t dims = PC_get(tree, ".dims");
	if (PC_status(dims)) return;
	m_dims_tree = dims;
	if (!PDI::is_list(dims)) {
		throw Spectree_error{
			dims,
			"`dims' of dataset `{}' must be a list of names, one per spatial axis, the time axis excluded (e.g. `dims: [x, y]')",
			name};
	}
	const int length = PDI::len(dims);
	for (int index = 0; index < length; ++index) {
		PC_tree_t element = PC_get(dims, "[%d]", index);
		if (!PDI::is_scalar(element)) {
			throw Spectree_error{element, "`dims[{}]' of dataset `{}' is not a name: a string, e.g. `x', is expected", index, name};
		}
		const string what = non_string(element);
		const string text = to_string(element, "");
		if (!what.empty()) {
			throw Spectree_error{
				element,
				"`dims[{}]' of dataset `{}' is `{}', {}, not a name: a string is expected (quote it, `\"{}\"', to make it a name)",
				index,
				name,
				text,
				what,
				text};
		}
		if (text.empty()) throw Spectree_error{element, "`dims[{}]' of dataset `{}' is empty: a name cannot be", index, name};
		if (text == "step") {
			throw Spectree_error{
				element,
				"`dims[{}]' of dataset `{}' is `step', the name of the time axis (the step numbers): give the spatial axes other names",
				index,
				name};
		}
		if (std::find(m_dims.begin(), m_dims.end(), text) != m_dims.end()) {
			throw Spectree_error{element, "`dims' of dataset `{}' names two axes `{}'", name, text};
		}
		m_dims.emplace_back(text);
	}
	PC_tree_t size = PC_get(tree, ".size");
	if (to_string(PC_get(tree, ".type"), "") == "array" && !PC_status(size) && PDI::is_list(size) && scalar_subtype(ctx, tree)) {
		const int axes = PDI::len(size) - 1;
		if (length != axes) {
			throw Spectree_error{
				dims,
				"`dims' of dataset `{}' gives {} name(s) for its {} spatial axes (`size' has {} axes, the time axis first, which is not named: "
				"it is `step')",
				name,
				length,
				axes,
				axes + 1};
		}
	}
	if (!length) throw Spectree_error{dims, "`dims' of dataset `{}' is empty: name every spatial axis, or leave `dims' out", name};
}

Dataset_description::Dataset_description(Context& ctx, PC_tree_t tree, string path, Past_end past_end)
	: m_tree{tree}
	, m_path{std::move(path)}
	, m_past_end{past_end}
{
	const string expecting = "type: array, subtype and size, the time axis first";
	if (!PDI::is_map(tree)) throw Spectree_error{tree, "`{}' must be a mapping ({})", m_path, expecting};
	PC_tree_t type = PC_get(tree, ".type");
	if (PC_status(type) || to_string(type) != "array") {
		throw Spectree_error{PC_status(type) ? tree : type, "`{}.type' must be `array' ({})", m_path, expecting};
	}
	PC_tree_t subtype = PC_get(tree, ".subtype");
	if (PC_status(subtype)) throw Spectree_error{tree, "`{}' needs a `subtype', the element type ({})", m_path, expecting};
	m_element = ctx.datatype(subtype);
	PC_tree_t size = PC_get(tree, ".size");
	if (PC_status(size) || !PDI::is_list(size) || PDI::len(size) < 2) {
		throw Spectree_error{PC_status(size) ? tree : size, "`{}.size' must list the time axis's length (or `inf') then each spatial size", m_path};
	}
	const int length = PDI::len(size);
	for (int index = 0; index < length; ++index) {
		PC_tree_t element = PC_get(size, "[%d]", index);
		const string text = to_string(element);
		if (is_infinite(text)) {
			if (index) throw Spectree_error{element, "`{}.size': only the time axis (the first) may be `{}'", m_path, text};
			continue; // an unbounded time axis
		}
		try {
			if (index) {
				m_size.emplace_back(text);
			} else {
				m_time_size.emplace(text);
			}
		} catch (const PDI::Error& e) {
			throw Spectree_error{element, "Invalid $-expression in `{}.size': {}", m_path, e.what()};
		}
	}
}

string Dataset_description::time_axis_key() const
{
	if (m_type) return "`datasets'";
	return "`" + m_path + ".size[0]'";
}

Dataset_shape Dataset_description::evaluate(Context& ctx, const string& name) const
{
	Dataset_shape result;
	if (m_type) {
		Datatype_sptr type;
		try {
			type = m_type->evaluate(ctx);
		} catch (const PDI::Error& e) {
			throw Spectree_error{m_tree, "Cannot evaluate the type of dataset `{}': {}", name, e.what()};
		}
		Array_layout layout = array_layout(type);
		if (layout.size.empty() || !layout.scalar) {
			throw PDI::Value_error{"deisa can only publish arrays of scalars, `{}' is a {}", name, layout.element->debug_string()};
		}
		if (layout.size.size() < 2) {
			throw Spectree_error{m_tree, "Dataset `{}' needs a time axis first and at least one spatial dimension", name};
		}
		result.dtype = published_dtype(*layout.scalar);
		result.time_extent = layout.size[0];
		result.global_shape.assign(layout.size.begin() + 1, layout.size.end());
		if (!m_dims.empty() && m_dims.size() != result.global_shape.size()) {
			throw Spectree_error{
				m_dims_tree,
				"`dims' of dataset `{}' gives {} name(s) for its {} spatial axes (the time axis, the first, is not named: it is `step')",
				name,
				m_dims.size(),
				result.global_shape.size()};
		}
		result.dims = m_dims;
		return result;
	}
	PC_tree_t subtype = PC_get(m_tree, ".subtype");
	Datatype_sptr element;
	try {
		element = m_element->evaluate(ctx);
	} catch (const PDI::Error& e) {
		throw Spectree_error{subtype, "Cannot evaluate `{}.subtype': {}", m_path, e.what()};
	}
	auto scalar = std::dynamic_pointer_cast<const PDI::Scalar_datatype>(element);
	auto dtype = scalar ? numpy_dtype(*scalar) : std::nullopt;
	if (!dtype) throw Spectree_error{subtype, "`{}.subtype' must be a number type, not {}", m_path, element->debug_string()};
	result.dtype = *dtype;
	PC_tree_t size = PC_get(m_tree, ".size");
	auto evaluate = [&](const Expression& expression) {
		try {
			return expression.to_long(ctx);
		} catch (const PDI::Error& e) {
			throw Spectree_error{size, "Cannot evaluate `{}.size' of `{}': {}", m_path, name, e.what()};
		}
	};
	if (m_time_size) result.time_extent = evaluate(*m_time_size);
	for (auto&& spatial: m_size) {
		result.global_shape.emplace_back(evaluate(spatial));
	}
	return result;
}

} // namespace deisa
