/* One entry of the deisa plugin's `write' section. */

#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include <pdi/array_datatype.h>
#include <pdi/context.h>
#include <pdi/data_descriptor.h>
#include <pdi/datatype.h>
#include <pdi/datatype_template.h>
#include <pdi/error.h>
#include <pdi/expression.h>
#include <pdi/paraconf_wrapper.h>
#include <pdi/ref_any.h>
#include <pdi/scalar_datatype.h>

#include "array_transfer.h"

using PDI::Context;
using PDI::Datatype_sptr;
using PDI::Expression;
using PDI::Ref;
using PDI::Ref_r;
using PDI::Spectree_error;
using PDI::to_string;
using PDI::Value_error;
using std::string;
using std::vector;

namespace deisa {

namespace {

/// The layout of an array of scalars that deisa publishes
Array_layout layout_of(const Datatype_sptr& type, const string& what)
{
	Array_layout layout = array_layout(type);
	if (layout.size.empty() || !layout.scalar) {
		throw Value_error{"deisa can only publish arrays of scalars, `{}' is a {}", what, layout.element->debug_string()};
	}
	return layout;
}

} // namespace

Array_transfer::Array_transfer(
	PC_tree_t data_tree,
	PC_tree_t tree,
	const Condition& default_when,
	std::shared_ptr<const Datasets> datasets,
	Ignored_keys& ignored
)
	: m_data{to_string(data_tree)}
	, m_dataset{m_data}
	, m_dataset_tree{PC_status(tree) ? data_tree : tree}
	, m_datasets{std::move(datasets)}
	, m_when{default_when}
	, m_memory_selection{"memory_selection"}
	, m_dataset_selection{"dataset_selection"}
{
	const string where = "write entry of `" + m_data + "'";
	if (!PC_status(tree) && PDI::is_map(tree)) {
		PDI::each(tree, [&](PC_tree_t key_tree, PC_tree_t value) {
			string key = to_string(key_tree);
			if (key == "dataset") {
				m_dataset = to_string(value);
				m_dataset_tree = value;
			} else if (key == "when") {
				m_when = Condition{value, "for `" + m_data + "'"};
			} else if (key == "memory_selection") {
				m_memory_selection = Selection{key, value};
			} else if (key == "dataset_selection") {
				m_dataset_selection = Selection{key, value};
			} else if (key == "communicator") {
				m_communicator = value;
			} else if (key == "moving") {
				m_moving = Moving{value, m_data};
			} else if (is_file_only_write_key(key)) {
				ignored.add(key, where);
			} else if (key == "dims") {
				throw Spectree_error{
					key_tree,
					"Unknown key in deisa `write' entry of `{}': `dims' (the names of a dataset's axes are given with the dataset, in "
					"`datasets': e.g. `gtemp: {{type: array, subtype: double, size: [...], dims: [x, y]}}')",
					m_data};
			} else {
				throw Spectree_error{
					key_tree,
					"Unknown key in deisa `write' entry of `{}': `{}' (expecting dataset, when, memory_selection, dataset_selection, "
					"communicator, moving, or one of decl_hdf5's keys for files: attributes, chunking, collision_policy, deflate, fletcher, mpio)",
					m_data,
					key};
			}
		});
	} else if (!PC_status(tree) && !to_string(tree, "").empty()) {
		throw Spectree_error{tree, "The deisa `write' entry of `{}' must be a mapping", m_data};
	}
	if (m_dataset.find('$') != string::npos) {
		try {
			m_dataset_expression = Expression{m_dataset};
		} catch (const PDI::Error& e) {
			throw Spectree_error{m_dataset_tree, "Invalid $-expression for `dataset' of `{}': {}", m_data, e.what()};
		}
	} else {
		description(m_dataset); // a literal name is checked now
	}
}

Array_transfer::Array_transfer(
	string data,
	string dataset,
	PC_tree_t dataset_tree,
	std::shared_ptr<const Datasets> datasets,
	Condition when,
	Selection dataset_selection,
	PC_tree_t communicator
)
	: m_data{std::move(data)}
	, m_dataset{std::move(dataset)}
	, m_dataset_tree{dataset_tree}
	, m_datasets{std::move(datasets)}
	, m_when{std::move(when)}
	, m_memory_selection{"memory_selection"}
	, m_dataset_selection{std::move(dataset_selection)}
	, m_communicator{communicator}
{
	description(m_dataset);
}

std::vector<Array_transfer>
Array_transfer::parse_write(PC_tree_t tree, const Condition& default_when, std::shared_ptr<const Datasets> datasets, Ignored_keys& ignored)
{
	vector<Array_transfer> result;
	if (PDI::is_list(tree)) { // decl_hdf5's list of names: each data to the dataset of the same name
		PDI::each(tree, [&](PC_tree_t name_tree) {
			string name = to_string(name_tree);
			if (name.find('#') != string::npos) {
				ignored.add(name, "an attribute in `write'");
			} else {
				result.emplace_back(name_tree, PC_tree_t{PC_NODE_NOT_FOUND, nullptr, nullptr}, default_when, datasets, ignored);
			}
		});
		return result;
	}
	PDI::each(tree, [&](PC_tree_t data_tree, PC_tree_t entries) {
		string data = to_string(data_tree);
		auto&& parse_entry = [&](PC_tree_t entry) {
			if (!PC_status(entry) && PDI::is_map(entry) && !PC_status(PC_get(entry, ".attribute"))) {
				ignored.add("attribute", "write entry of `" + data + "'");
			} else {
				result.emplace_back(data_tree, entry, default_when, datasets, ignored);
			}
		};
		if (!PC_status(entries) && PDI::is_list(entries)) { // several writes of one data
			PDI::each(entries, parse_entry);
		} else {
			parse_entry(entries);
		}
	});
	return result;
}

const Dataset_description& Array_transfer::description(const string& name) const
{
	for (auto&& dataset: *m_datasets) {
		if (dataset.first == name) return dataset.second;
	}
	for (auto&& dataset: *m_datasets) {
		try {
			if (std::regex_match(name, std::regex{dataset.first, std::regex::ECMAScript})) return dataset.second;
		} catch (const std::regex_error&) { // not a regular expression: only its exact name matched
		}
	}
	if (m_dataset_expression) {
		throw Spectree_error{m_dataset_tree, "Dataset `{}' (`dataset' of `{}' evaluates to it) is not described in deisa `datasets'", name, m_data};
	}
	throw Spectree_error{m_dataset_tree, "Dataset `{}' (written from `{}') is not described in deisa `datasets'", name, m_data};
}

string Array_transfer::dataset(Context& ctx) const
{
	if (!m_dataset_expression) return m_dataset;
	try {
		return m_dataset_expression->to_string(ctx);
	} catch (const PDI::Error& e) {
		throw Spectree_error{m_dataset_tree, "Cannot evaluate `dataset' of `{}': {}", m_data, e.what()};
	}
}

bool Array_transfer::when(Context& ctx) const
{
	return m_when.evaluate(ctx, m_data);
}

vector<long> Array_transfer::dataset_size(Context& ctx, const vector<long>& memory_shape, const string& dataset_name) const
{
	vector<long> size{1};
	size.insert(size.end(), memory_shape.begin(), memory_shape.end());
	size = m_dataset_selection.size(ctx, size);
	if (size[0] != 1) {
		throw Spectree_error{
			m_dataset_selection.size_tree(),
			"`{}' of `{}' must be 1 on the time axis, not {}",
			m_dataset_selection.size_key(),
			m_data,
			size[0]};
	}
	for (size_t dim = 0; dim < memory_shape.size(); ++dim) {
		if (size[dim + 1] != memory_shape[dim]) {
			throw Spectree_error{
				m_dataset_selection.size_tree(),
				"Incompatible selections for `{}': {} element(s) in memory but {} in dataset `{}' along dimension {}",
				m_data,
				memory_shape[dim],
				size[dim + 1],
				dataset_name,
				dim + 1};
		}
	}
	return vector<long>(size.begin() + 1, size.end());
}

Array_geometry Array_transfer::geometry(Context& ctx) const
{
	const string dataset_name = dataset(ctx);
	const Dataset_description& dataset_description = description(dataset_name);
	const Dataset_shape global = dataset_description.evaluate(ctx, dataset_name);
	const size_t rank = global.global_shape.size();

	Array_geometry result;
	result.data = m_data;
	result.dataset = dataset_name;
	result.tree = PC_status(m_dataset_selection.tree()) ? dataset_description.tree() : m_dataset_selection.tree();
	result.dtype = global.dtype;
	result.time_extent = global.time_extent;
	result.past_end = dataset_description.past_end();
	result.time_axis_key = dataset_description.time_axis_key();
	result.global_shape = global.global_shape;
	result.dims = global.dims;
	if (m_moving.moving()) { // its box is evaluated at each publication
		m_moving.check_rank(rank, m_data, dataset_name);
		result.moving = true;
		result.joined_axis = m_moving.joined_axis();
		result.tree = m_moving.tree();
		return result;
	}

	vector<long> memory_shape(rank, 0);
	if (m_memory_selection.has_size()) {
		memory_shape = m_memory_selection.size(ctx, memory_shape);
	} else {
		Datatype_sptr data_type;
		try {
			data_type = ctx.desc(m_data).default_type()->evaluate(ctx);
		} catch (const PDI::Error& e) {
			throw Value_error{"Cannot evaluate the type of `{}' to create the deisa bridge: {}", m_data, e.what()};
		}
		memory_shape = layout_of(data_type, m_data).subsize;
		if (memory_shape.size() != rank) {
			throw Spectree_error{
				dataset_description.tree(),
				"`{}' has {} dimension(s), dataset `{}' has {} spatial ones",
				m_data,
				memory_shape.size(),
				dataset_name,
				rank};
		}
	}
	// the time index is not evaluated: the Bridge may be created before the first step (`init_on')
	// the block's position in the global array is checked by deisa.ArraySpec
	result.start = m_dataset_selection.spatial_start(ctx, rank + 1);
	result.shape = dataset_size(ctx, memory_shape, dataset_name);
	return result;
}

std::pair<long, vector<long>> Array_transfer::step_without_box(Context& ctx) const
{
	const string dataset_name = dataset(ctx);
	const Dataset_description& dataset_description = description(dataset_name);
	vector<long> global_shape;
	size_t rank = 0;
	try {
		global_shape = dataset_description.evaluate(ctx, dataset_name).global_shape;
		rank = global_shape.size();
	} catch (const PDI::Error&) { // its sizes need a box's data: the ranks with boxes give the shape
		global_shape.clear();
	}
	if (m_moving.joined_axis() >= 0) global_shape.clear();
	if (!rank) rank = m_dataset_selection.has_start() ? m_dataset_selection.start_rank() - 1 : 0;
	return {m_dataset_selection.time_start(ctx, rank + 1), std::move(global_shape)};
}

Block Array_transfer::block(Context& ctx, Ref ref) const
{
	Ref_r readable{ref};
	if (!readable) throw PDI::Permission_error{"deisa cannot read `{}': expose it with PDI_OUT or PDI_INOUT", m_data};
	Array_layout layout = layout_of(readable.type(), m_data);
	const size_t rank = layout.size.size();
	vector<long> size = m_memory_selection.size(ctx, layout.subsize);
	vector<long> start = m_memory_selection.start(ctx, rank);

	// PDI::Ref cannot be assigned, hence the Block is built in one go at the end
	vector<long> strides = layout.strides();
	long offset = layout.filled_offset(strides);
	for (size_t dim = 0; dim < rank; ++dim) {
		if (start[dim] < 0 || size[dim] < 0 || start[dim] + size[dim] > layout.subsize[dim]) {
			throw Spectree_error{
				m_memory_selection.tree(),
				"`memory_selection' of `{}' [{}, {}) exceeds its {} element(s) along dimension {}",
				m_data,
				start[dim],
				start[dim] + size[dim],
				layout.subsize[dim],
				dim};
		}
		offset += start[dim] * strides[dim];
	}
	const void* data = static_cast<const char*>(readable.get()) + offset;
	const long step = m_dataset_selection.start(ctx, rank + 1)[0];
	if (!m_moving.moving()) return Block{ref, data, published_dtype(*layout.scalar), std::move(size), std::move(strides), step};

	// a moving array: this step's global shape and the box's place in it, evaluated now
	const string dataset_name = dataset(ctx);
	const Dataset_description& dataset_description = description(dataset_name);
	Dataset_shape global = dataset_description.evaluate(ctx, dataset_name);
	if (global.global_shape.size() != rank) {
		throw Spectree_error{
			dataset_description.tree(),
			"`{}' has {} dimension(s), dataset `{}' has {} spatial ones",
			m_data,
			rank,
			dataset_name,
			global.global_shape.size()};
	}
	m_moving.check_rank(rank, m_data, dataset_name);
	dataset_size(ctx, size, dataset_name);
	vector<long> box_start = m_dataset_selection.spatial_start(ctx, rank + 1);
	if (m_moving.joined_axis() >= 0) { // placed by the ranks' counts, in rank order: no global shape, no start
		box_start.clear();
		global.global_shape.clear();
	}
	return Block{
		ref,
		data,
		published_dtype(*layout.scalar),
		std::move(size),
		std::move(strides),
		step,
		std::move(global.global_shape),
		std::move(box_start)};
}

} // namespace deisa
