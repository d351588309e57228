/* The deisa.Bridge options of the deisa plugin configuration (`placement', `buffer_nb'...). */

#include <memory>
#include <string>

#include <pybind11/pybind11.h>

#include <pdi/context.h>
#include <pdi/error.h>
#include <pdi/expression.h>
#include <pdi/paraconf_wrapper.h>
#include <pdi/ref_any.h>
#include <pdi/scalar_datatype.h>

#include "bridge_options.h"
#include "core/python_bridge.h"

namespace py = pybind11;
using PDI::Context;
using PDI::Expression;
using PDI::Ref_r;
using PDI::Scalar_datatype;
using PDI::Scalar_kind;
using PDI::Spectree_error;
using PDI::to_string;
using std::string;

namespace deisa {

namespace {

/// Whether a YAML scalar is a null (YAML 1.1 core schema, as PyYAML writes None)
bool is_null(const string& text)
{
	return text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL";
}

} // namespace

void Bridge_options::add(PC_tree_t key_tree, PC_tree_t value)
{
	Option option{to_string(key_tree), key_tree, value, std::nullopt};
	if (!PDI::is_scalar(value)) {
		// an unknown key first (check_keys): a mapping under a misspelt key is not an option's value
		option.not_scalar = true;
		m_options.emplace_back(std::move(option));
		return;
	}
	const string text = to_string(value);
	if (!is_null(text)) {
		try {
			option.value.emplace(text);
		} catch (const PDI::Error& e) {
			throw Spectree_error{value, "Invalid $-expression for `{}' in deisa configuration: {}", option.key, e.what()};
		}
	}
	m_options.emplace_back(std::move(option));
}

void Bridge_options::check_keys(py::handle deisa) const
{
	py::object names = deisa.attr("BridgeOptions").attr("names")();
	for (auto&& option: m_options) {
		if (!names.contains(py::str(option.key))) {
			throw Spectree_error{option.key_tree, "Unknown key in deisa configuration: `{}'", option.key};
		}
		if (option.not_scalar) {
			throw Spectree_error{
				option.value_tree,
				"Invalid value for `{}' in deisa configuration: expecting a scalar or a $-expression",
				option.key};
		}
	}
}

py::object Bridge_options::to_python(Context& ctx, const Option& option)
{
	if (!option.value) return py::none();
	Ref_r ref = option.value->to_ref(ctx);
	auto&& scalar = std::dynamic_pointer_cast<const Scalar_datatype>(ref.type());
	if (scalar && (scalar->kind() == Scalar_kind::SIGNED || scalar->kind() == Scalar_kind::UNSIGNED)) {
		return py::int_(ref.scalar_value<long>());
	}
	if (scalar && scalar->kind() == Scalar_kind::FLOAT) {
		return py::float_(ref.scalar_value<double>());
	}
	// anything else (`round_robin', `$name' of a string...) as its text
	return py::str(option.value->to_string(ctx));
}

py::object Bridge_options::build(Context& ctx, const Python_bridge& python, bool may_defer) const
{
	py::dict mapping;
	for (auto&& option: m_options) {
		try {
			mapping[py::str(option.key)] = to_python(ctx, option);
		} catch (const PDI::Error& e) {
			if (may_defer) return py::none(); // refers to data not shared yet: checked at the first publication
			throw Spectree_error{option.value_tree, "Cannot evaluate `{}' in deisa configuration: {}", option.key, e.what()};
		}
	}
	try {
		return python.options(mapping);
	} catch (const Option_error& e) {
		const string& message = e.message;
		for (auto&& option: m_options) {
			if (option.key == e.option) {
				throw Spectree_error{
					option.value_tree,
					"Invalid value for `{}' in deisa configuration: `{}' ({})",
					option.key,
					to_string(option.value_tree),
					message};
			}
		}
		throw Spectree_error{m_config, "Invalid deisa configuration: {}", message};
	}
}

} // namespace deisa
