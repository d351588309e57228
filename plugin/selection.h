/* A memory or dataset selection in the deisa plugin configuration. */

#ifndef DEISA_SELECTION_H_
#define DEISA_SELECTION_H_

#include <string>
#include <vector>

#include <paraconf.h>

#include <pdi/pdi_fwd.h>
#include <pdi/expression.h>

namespace deisa {

/** A hyperslab, as decl_hdf5's `memory_selection' and `dataset_selection'.
 *
 * A mapping with two optional keys, `size' and `start', each a list of
 * $-expressions (or a single one in 1D).
 */
class Selection
{
	/// the YAML node of the selection, for error messages
	PC_tree_t m_tree = {PC_NODE_NOT_FOUND, nullptr, nullptr};

	/// the YAML key of the selection (`memory_selection' or `dataset_selection')
	std::string m_key;

	/// size in each dimension, empty for the default
	std::vector<PDI::Expression> m_size;

	/// first selected index in each dimension, empty for the default
	std::vector<PDI::Expression> m_start;

public:
	/** An empty selection: everything, from index 0
	 * \param key the YAML key of the selection, for error messages
	 */
	explicit Selection(std::string key);

	/** Parses a selection
	 * \param key the YAML key of the selection, for error messages
	 * \param tree the mapping with optional `size' and `start'
	 */
	Selection(std::string key, PC_tree_t tree);

	/** Whether `size' was given
	 * \return true if `size' was given
	 */
	bool has_size() const { return !m_size.empty(); }

	/** Whether `start' was given
	 * \return true if `start' was given
	 */
	bool has_start() const { return !m_start.empty(); }

	/** Evaluates `size'
	 * \param ctx the context in which to evaluate the $-expressions
	 * \param dflt the value when `size' is absent; its length is the expected rank
	 * \return the size in each dimension
	 */
	std::vector<long> size(PDI::Context& ctx, const std::vector<long>& dflt) const;

	/** Evaluates `start'
	 * \param ctx the context in which to evaluate the $-expressions
	 * \param rank the expected number of dimensions (the default is 0 in each)
	 * \return the start in each dimension
	 */
	std::vector<long> start(PDI::Context& ctx, size_t rank) const;

	/** The YAML node, for error messages
	 * \return the selection's node, or an invalid node for a default selection
	 */
	PC_tree_t tree() const { return m_tree; }

	/** The YAML key of the selection
	 * \return `memory_selection' or `dataset_selection'
	 */
	const std::string& key() const { return m_key; }
};

} // namespace deisa

#endif // DEISA_SELECTION_H_
