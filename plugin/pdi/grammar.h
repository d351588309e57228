/* The three YAML grammars of the deisa plugin, and which one a configuration is written in. */

#ifndef DEISA_GRAMMAR_H_
#define DEISA_GRAMMAR_H_

#include <string>
#include <vector>

#include <paraconf.h>

namespace deisa {

/// A YAML grammar of the deisa plugin's section
enum class Grammar_kind {
	OWN, ///< deisa's own, decl_hdf5's shape: `datasets', `write', `on_event'...
	PAPER, ///< the DEISA paper's (HiPC 2021): `transfer', and `+map_in' on the data
	RELEASED ///< the released DEISA plugin's (PDI 1.8 and 1.9): `scheduler_info', `deisa_arrays', `map_in'...
};

/** Which grammar a configuration is written in, from the keys it uses.
 *
 * Most keys are deisa's whatever the grammar (`communicator', `when', `read', the Bridge
 * options...); the others belong to one grammar, or two (`scheduler_file': deisa's own and the
 * paper's).  Each such key narrows the grammars the configuration may be written in; a key that
 * leaves none is an error naming both grammars and both keys.
 */
class Grammar
{
	/// the grammars the keys seen so far allow
	std::vector<Grammar_kind> m_possible{Grammar_kind::OWN, Grammar_kind::PAPER, Grammar_kind::RELEASED};

	/// the key that last narrowed them, for error messages
	std::string m_key;

	/// its node
	PC_tree_t m_key_tree = {PC_NODE_NOT_FOUND, nullptr, nullptr};

public:
	/** The grammars a key of the plugin's section belongs to
	 * \param key the key
	 * \return its grammars, empty for a key of every grammar
	 */
	static std::vector<Grammar_kind> of_key(const std::string& key);

	/** The name of a grammar, for messages
	 * \param kind the grammar
	 * \return e.g. "the released DEISA plugin's grammar (PDI 1.8 and 1.9)"
	 */
	static std::string name(Grammar_kind kind);

	/** Records a key of the plugin's section
	 * \param key_tree the key's node
	 * \throw PDI::Spectree_error if it belongs to no grammar that the keys seen before allow
	 */
	void add(PC_tree_t key_tree);

	/** The grammar of the configuration
	 * \return the first grammar its keys allow (deisa's own when none decides)
	 */
	Grammar_kind kind() const { return m_possible.front(); }
};

} // namespace deisa

#endif // DEISA_GRAMMAR_H_
