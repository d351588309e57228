/* decl_hdf5 keys that only matter for HDF5 files: accepted by the deisa plugin, and ignored. */

#ifndef DEISA_IGNORED_KEYS_H_
#define DEISA_IGNORED_KEYS_H_

#include <string>
#include <vector>

#include <paraconf.h>

#include <pdi/pdi_fwd.h>

namespace deisa {

/** Whether a key of decl_hdf5's FILE_DESC only matters for files (`collision_policy', `deflate'...)
 * \param key the key
 * \return true if the deisa plugin accepts and ignores it at the plugin level
 */
bool is_file_only_key(const std::string& key);

/** Whether a key of decl_hdf5's DATA_IO_DESC only matters for files (`mpio', `attributes'...)
 * \param key the key
 * \return true if the deisa plugin accepts and ignores it in a `write' entry
 */
bool is_file_only_write_key(const std::string& key);

/** The decl_hdf5 keys of a configuration that the deisa plugin ignores, reported in one line.
 *
 * A decl_hdf5 configuration goes in situ by renaming two keys: the keys that only
 * matter for files are accepted, collected here while parsing, and named once.
 */
class Ignored_keys
{
	/// each ignored key with where it was given, e.g. "`mpio' (write entry of `temp')"
	std::vector<std::string> m_keys;

public:
	/** Records an ignored key
	 * \param key the key
	 * \param where where it was given (e.g. "write entry of `temp'"), empty at the plugin level
	 */
	void add(const std::string& key, const std::string& where = "");

	/** Logs the ignored keys in one info line, if there are any
	 * \param ctx the PDI context
	 */
	void log(PDI::Context& ctx) const;
};

} // namespace deisa

#endif // DEISA_IGNORED_KEYS_H_
