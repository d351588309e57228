/* A global array of the deisa plugin's configuration, in any of its grammars. */

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <pdi/context.h>
#include <pdi/datatype.h>
#include <pdi/error.h>
#include <pdi/expression.h>
#include <pdi/paraconf_wrapper.h>
#include <pdi/scalar_datatype.h>

#include "array_transfer.h"
#include "dataset_description.h"

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

} // namespace

Dataset_description::Dataset_description(PC_tree_t tree, PDI::Datatype_template_sptr type)
	: m_tree{tree}
	, m_type{std::move(type)}
{}

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
		auto dtype = numpy_dtype(*layout.scalar);
		if (!dtype) throw PDI::Value_error{"deisa cannot publish elements of type {}", layout.scalar->debug_string()};
		result.dtype = *dtype;
		result.time_extent = layout.size[0];
		result.global_shape.assign(layout.size.begin() + 1, layout.size.end());
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
