/* A memory or dataset selection in the deisa plugin configuration. */

#ifndef DEISA_SELECTION_H_
#define DEISA_SELECTION_H_

#include <optional>
#include <string>
#include <vector>

#include <paraconf.h>

#include <pdi/pdi_fwd.h>
#include <pdi/expression.h>

namespace deisa {

/** A hyperslab, as decl_hdf5's `memory_selection' and `dataset_selection'.
 *
 * A `size' and a `start', each a list of $-expressions (or a single one in 1D), either absent
 * for the default.  In deisa's own grammar they are the two keys of one mapping; the older
 * grammars give them elsewhere (the DEISA paper's `+map_in', the released plugin's
 * `subsize' and `start' of a `deisa_arrays' entry, whose time index is `time_step'), with the
 * names that error messages then use.
 */
class Selection
{
	/// the YAML node of the selection, for error messages
	PC_tree_t m_tree = {PC_NODE_NOT_FOUND, nullptr, nullptr};

	/// the YAML key of the selection (e.g. `memory_selection'), for error messages
	std::string m_key;

	/// the YAML path of `size', for error messages (e.g. `dataset_selection.size')
	std::string m_size_key;

	/// the YAML node of `size', absent for the default
	PC_tree_t m_size_tree = {PC_NODE_NOT_FOUND, nullptr, nullptr};

	/// size in each dimension, empty for the default
	std::vector<PDI::Expression> m_size;

	/// the YAML path of `start', for error messages (e.g. `dataset_selection.start')
	std::string m_start_key;

	/// the YAML node of `start', absent for the default
	PC_tree_t m_start_tree = {PC_NODE_NOT_FOUND, nullptr, nullptr};

	/// first selected index in each dimension, empty for the default
	std::vector<PDI::Expression> m_start;

	/// a $-expression that replaces `start[0]' (the released plugin's `time_step'), and its node and key
	std::optional<PDI::Expression> m_time;

	/// the YAML node of the time index
	PC_tree_t m_time_tree = {PC_NODE_NOT_FOUND, nullptr, nullptr};

	/// the YAML key of the time index
	std::string m_time_key;

	/// throws unless `start' has `rank' elements
	void check_start_rank(size_t rank) const;

public:
	/** An empty selection: everything, from index 0
	 * \param key the YAML key of the selection, for error messages
	 */
	explicit Selection(std::string key);

	/** Parses a selection mapping with optional `size' and `start' (deisa's own grammar)
	 * \param key the YAML key of the selection, for error messages
	 * \param tree the mapping
	 */
	Selection(std::string key, PC_tree_t tree);

	/** Parses a selection given by two nodes (the older grammars)
	 * \param tree the node that holds them, for error messages
	 * \param size_key the YAML path of `size', for error messages
	 * \param size the node of `size', absent for the default
	 * \param start_key the YAML path of `start', for error messages
	 * \param start the node of `start', absent for the default
	 */
	Selection(PC_tree_t tree, std::string size_key, PC_tree_t size, std::string start_key, PC_tree_t start);

	/** Takes the first index of `start' (the time index) from another $-expression
	 * \param key the YAML key of the expression, for error messages (e.g. `time_step')
	 * \param tree the expression's node
	 */
	void time_index(std::string key, PC_tree_t tree);

	/** Whether `start' was given
	 * \return true if `start' was given
	 */
	bool has_start() const { return !m_start.empty(); }

	/** The number of dimensions of `start'
	 * \return its length, 0 if absent
	 */
	size_t start_rank() const { return m_start.size(); }

	/** Whether `size' was given
	 * \return true if `size' was given
	 */
	bool has_size() const { return !m_size.empty(); }

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

	/** Evaluates the first index of `start' only, the time index (or the expression that replaces it)
	 * \param ctx the context in which to evaluate the $-expressions
	 * \param rank the expected number of dimensions, the time axis included
	 * \return the time index (0 when `start' is absent)
	 */
	long time_start(PDI::Context& ctx, size_t rank) const;

	/** Evaluates `start' but its first index, the time index: the block's place in space, known
	 * before the first step's time index (at an `init_on' event, before `$step' is shared)
	 * \param ctx the context in which to evaluate the $-expressions
	 * \param rank the expected number of dimensions, the time axis included
	 * \return the start in each dimension but the first
	 */
	std::vector<long> spatial_start(PDI::Context& ctx, size_t rank) const;

	/** The YAML node, for error messages
	 * \return the selection's node, or an invalid node for a default selection
	 */
	PC_tree_t tree() const { return m_tree; }

	/** The YAML node of `size', for error messages
	 * \return its node, else the selection's (invalid for a default selection)
	 */
	PC_tree_t size_tree() const { return PC_status(m_size_tree) ? m_tree : m_size_tree; }

	/** The YAML key of the selection
	 * \return e.g. `memory_selection'
	 */
	const std::string& key() const { return m_key; }

	/** The YAML path of `size'
	 * \return e.g. `dataset_selection.size'
	 */
	const std::string& size_key() const { return m_size_key; }
};

} // namespace deisa

#endif // DEISA_SELECTION_H_
