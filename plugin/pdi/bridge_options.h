/* The deisa.Bridge options of the deisa plugin configuration (`placement', `buffer_nb'...). */

#ifndef DEISA_BRIDGE_OPTIONS_H_
#define DEISA_BRIDGE_OPTIONS_H_

#include <optional>
#include <string>
#include <vector>

#include <paraconf.h>
#include <pybind11/pybind11.h>

#include <pdi/pdi_fwd.h>
#include <pdi/expression.h>

namespace deisa {

class Python_bridge;

/** The Bridge options of the configuration, checked by Python.
 *
 * The plugin does not know the options: every key it does not handle itself
 * is one, which deisa.BridgeOptions (Python) names, defaults and checks.  This
 * class keeps each key's YAML nodes, evaluates its $-expression into a Python
 * value (an int, a float, a string, or None for a YAML null) and turns a
 * deisa.BridgeOptionError into a PDI error on the YAML node of the option at
 * fault, so that messages name the key and its line.
 */
class Bridge_options
{
	/// One option key of the configuration
	struct Option {
		/// the option's name, a field of deisa.BridgeOptions
		std::string key;

		/// the key's node, for unknown keys
		PC_tree_t key_tree;

		/// the value's node, for bad values
		PC_tree_t value_tree;

		/// the value, or nothing for a YAML null (or a value that is not a scalar)
		std::optional<PDI::Expression> value;

		/// whether the value is not a scalar: an error once the key is known to be an option
		bool not_scalar = false;
	};

	/// the options, in configuration order
	std::vector<Option> m_options;

	/// the plugin's configuration node, for errors that no key carries
	PC_tree_t m_config = {PC_NODE_NOT_FOUND, nullptr, nullptr};

	/** The Python value of an option
	 * \param ctx the context in which to evaluate the $-expression
	 * \param option the option
	 * \return the value: None, an int, a float or a str
	 */
	static pybind11::object to_python(PDI::Context& ctx, const Option& option);

public:
	/** Whether the configuration has no option key
	 * \return true if every option keeps deisa.BridgeOptions's default
	 */
	bool empty() const { return m_options.empty(); }

	/** Records the configuration node for errors that no key carries
	 * \param config the plugin's configuration node
	 */
	void config(PC_tree_t config) { m_config = config; }

	/** Records an option key
	 * \param key_tree the key's node
	 * \param value the value's node: a $-expression or a YAML null
	 */
	void add(PC_tree_t key_tree, PC_tree_t value);

	/** Checks that every key names a field of deisa.BridgeOptions, and has a scalar value (the GIL must be held)
	 * \param deisa the deisa Python module
	 */
	void check_keys(pybind11::handle deisa) const;

	/** Builds the deisa.BridgeOptions (the GIL must be held)
	 *
	 * A bad value is a PDI error on its YAML node, whatever `on_error' says;
	 * other Python failures propagate as pybind11::error_already_set.
	 *
	 * \param ctx the context in which to evaluate the $-expressions
	 * \param python the deisa module (the core, shared with the ADIOS2 engine, builds the options)
	 * \param may_defer whether to return None, rather than fail, when a $-expression cannot be evaluated yet
	 * \return the options, or None if deferred
	 */
	pybind11::object build(PDI::Context& ctx, const Python_bridge& python, bool may_defer) const;
};

} // namespace deisa

#endif // DEISA_BRIDGE_OPTIONS_H_
