/* decl_hdf5 keys that only matter for HDF5 files: accepted by the deisa plugin, and ignored. */

#include <string>
#include <unordered_set>

#include <pdi/context.h>
#include <pdi/logger.h>

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
