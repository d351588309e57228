/* One entry of the deisa plugin's `read' section: exposed data filled from a steering value. */

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <pdi/error.h>
#include <pdi/paraconf_wrapper.h>
#include <pdi/ref_any.h>
#include <pdi/scalar_datatype.h>

#include "numpy_layout.h"
#include "steering_read.h"

namespace py = pybind11;
using PDI::Ref;
using PDI::Ref_w;
using PDI::Spectree_error;
using PDI::to_string;
using PDI::Value_error;
using std::string;
using std::vector;

namespace deisa {

namespace {

/// the base of a numpy view of memory that PDI owns: nothing to release
void borrowed(void*) {}

} // namespace

Steering_read::Steering_read(PC_tree_t data_tree, PC_tree_t tree, const Condition& default_when)
	: m_data{to_string(data_tree)}
	, m_value{m_data}
	, m_when{default_when}
{
	if (!PC_status(tree) && PDI::is_map(tree)) {
		PDI::each(tree, [&](PC_tree_t key_tree, PC_tree_t value) {
			string key = to_string(key_tree);
			if (key == "dataset") {
				m_value = to_string(value);
			} else if (key == "when") {
				m_when = Condition{value, "for `" + m_data + "'"};
			} else {
				throw Spectree_error{
					key_tree,
					"Unknown key in deisa `read' entry of `{}': `{}' (expecting dataset, the steering value's name, or when: a `read' "
					"entry fills the whole buffer)",
					m_data,
					key};
			}
		});
	} else if (!PC_status(tree) && !to_string(tree, "").empty()) {
		throw Spectree_error{tree, "The deisa `read' entry of `{}' must be a mapping (e.g. `{{dataset: stop, when: ...}}')", m_data};
	}
	if (m_value.empty() || m_value.find('$') != string::npos) {
		throw Spectree_error{
			PC_status(tree) ? data_tree : tree,
			"`dataset' of the deisa `read' entry of `{}' must name a steering value, not `{}'",
			m_data,
			m_value};
	}
}

vector<Steering_read> Steering_read::parse_read(PC_tree_t tree, const Condition& default_when)
{
	vector<Steering_read> result;
	const PC_tree_t none{PC_NODE_NOT_FOUND, nullptr, nullptr};
	if (PDI::is_list(tree)) {
		PDI::each(tree, [&](PC_tree_t name) { result.emplace_back(name, none, default_when); });
	} else if (PDI::is_map(tree)) {
		PDI::each(tree, [&](PC_tree_t name, PC_tree_t entry) { result.emplace_back(name, entry, default_when); });
	} else if (!to_string(tree, "").empty()) {
		throw Spectree_error{tree, "deisa `read' must be a list of data names or a mapping from data names to entries"};
	}
	return result;
}

void Steering_read::fill(Ref ref, py::handle value) const
{
	Ref_w writable{ref};
	if (!writable) {
		throw PDI::Permission_error{"deisa cannot read steering value `{}' into `{}': expose it with PDI_IN or PDI_INOUT", m_value, m_data};
	}
	const Array_layout layout = array_layout(writable.type());
	if (!layout.scalar) {
		throw Value_error{
			"deisa can only read steering values into scalars or arrays of scalars, `{}' is a {}",
			m_data,
			layout.element->debug_string()};
	}
	const std::optional<string> numpy = numpy_dtype(*layout.scalar);
	if (!numpy) {
		throw Value_error{"deisa cannot read a steering value into `{}': elements of type {} are not numbers", m_data, layout.scalar->debug_string()};
	}
	const string& dtype = *numpy;
	const vector<long>& subsize = layout.subsize;
	const vector<long> strides = layout.strides();
	const long offset = layout.filled_offset(strides);

	py::module_ np = py::module_::import("numpy");
	py::object given = np.attr("asarray")(value);
	py::object target = np.attr("dtype")(dtype);
	const string described = py::str(given.attr("dtype")).cast<string>() + " of shape " + py::str(given.attr("shape")).cast<string>();
	py::tuple shape(subsize.size());
	for (size_t dim = 0; dim < subsize.size(); ++dim) {
		shape[dim] = py::int_(subsize[dim]);
	}
	if (!py::object{given.attr("shape")}.equal(shape)) {
		throw Value_error{
			"deisa cannot read steering value `{}' ({}) into `{}': {} of shape {} expected",
			m_value,
			described,
			m_data,
			dtype,
			py::str(shape).cast<string>()};
	}
	if (!np.attr("can_cast")(given.attr("dtype"), target, "same_kind").cast<bool>()) {
		throw Value_error{"deisa cannot read steering value `{}' ({}) into `{}' of {}: the kinds differ", m_value, described, m_data, dtype};
	}
	py::object converted = given.attr("astype")(target);
	if (py::str(given.attr("dtype").attr("kind")).cast<string>() != "f" && !np.attr("array_equal")(converted, given).cast<bool>()) {
		throw Value_error{"deisa cannot read steering value `{}' ({}) into `{}' of {}: it does not fit", m_value, described, m_data, dtype};
	}
	char* data = static_cast<char*>(writable.get()) + offset;
	py::array view{py::dtype(dtype), subsize, strides, data, py::capsule{data, borrowed}};
	view[py::ellipsis()] = converted;
}

} // namespace deisa
