/* decl_hdf5 keys that only matter for HDF5 files: accepted by the deisa plugin, and ignored. */

#include <string>
#include <unordered_set>

#include <pdi/context.h>
#include <pdi/logger.h>
#include <pdi/paraconf_wrapper.h>

#include "ignored_keys.h"

using std::string;

namespace deisa {

bool is_file_only_key(const string& key)
{
	static const std::unordered_set<string> keys{"collision_policy", "deflate", "fletcher", "subfiling"};
	return keys.count(key) != 0;
}

bool is_file_only_write_key(const string& key)
{
	static const std::unordered_set<string> keys{"attributes", "chunking", "collision_policy", "deflate", "fletcher", "mpio"};
	return keys.count(key) != 0;
}

void log_ignored_read(PDI::Context& ctx, PC_tree_t read_tree)
{
	string data;
	auto&& add = [&](PC_tree_t name) {
		data += (data.empty() ? "`" : ", `") + PDI::to_string(name) + "'";
	};
	if (PDI::is_list(read_tree)) PDI::each(read_tree, add);
	if (PDI::is_map(read_tree)) PDI::each(read_tree, [&](PC_tree_t name, PC_tree_t) { add(name); });
	if (data.empty()) return;
	ctx.logger().warn("Ignoring decl_hdf5's `read' section ({}): in situ there is no file to read, these buffers keep their values", data);
}

void Ignored_keys::add(const string& key, const string& where)
{
	m_keys.emplace_back("`" + key + "'" + (where.empty() ? "" : " (" + where + ")"));
}

void Ignored_keys::log(PDI::Context& ctx) const
{
	if (m_keys.empty()) return;
	string keys;
	for (auto&& key: m_keys) {
		keys += (keys.empty() ? "" : ", ") + key;
	}
	ctx.logger().info("Ignoring decl_hdf5 keys that only matter for HDF5 files: {}", keys);
}

} // namespace deisa
