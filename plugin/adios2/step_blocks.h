/* The blocks of the step an ADIOS2 code is writing, and the arrays they must match. */

#ifndef DEISA_STEP_BLOCKS_H_
#define DEISA_STEP_BLOCKS_H_

#include <string>
#include <vector>

#include "core/python_bridge.h"

namespace deisa {

/// This rank's block of one variable in one step
struct Step_block {
	/// the variable's name, the global array's
	std::string name;

	/// numpy name of the element type
	std::string dtype;

	/// whether the variable is a global single value (a one-element array published by rank 0)
	bool value = false;

	/// the global array's shape
	std::vector<long> global_shape;

	/// first index of the block in the global array
	std::vector<long> start;

	/// size of the block
	std::vector<long> shape;

	/// the block's memory: the code's (a deferred Put) or `copy'
	const void* data = nullptr;

	/// strides in elements of the code's buffer when the block is a sub-box of it (a memory selection), empty: contiguous
	std::vector<long> memory_strides;

	/// the engine's copy of the block, if it was copied
	std::vector<unsigned char> copy;

	/// the block's size in bytes (contiguous)
	size_t nbytes = 0;

	/** Copies the block into `copy', contiguous, and points `data' there, if not done yet
	 */
	void keep_copy();

	/** Copies the sub-box of the code's buffer that `memory_strides' describes into `copy'
	 * \param bytes the block's first element in the buffer
	 */
	void copy_rows(const unsigned char* bytes);

	/** The block as a numpy description: C-order, contiguous or strided as the code's buffer
	 * \param itemsize the size of an element in bytes
	 */
	Strided_block strided(long itemsize) const;
};

/** The blocks Put in the step being written, checked against the arrays the Bridge was created with.
 *
 * Every error is a std::invalid_argument whose message names the variable, the step and what
 * differs, for the engine to raise at the Put or the EndStep that caused it.
 */
class Step_blocks
{
	/// the blocks of the step, in Put order
	std::vector<Step_block> m_blocks;

	/// the arrays of the Bridge (their geometry, no data), by name
	std::vector<Step_block> m_declared;

public:
	/** Records a block
	 * \param block the block
	 * \param step the step, for messages
	 */
	void add(Step_block block, size_t step);

	/// Copies every block not copied yet (PerformPuts: the code may reuse its buffers)
	void keep_copies();

	/// Forgets the step's blocks
	void clear() { m_blocks.clear(); }

	/// Whether no block was Put in the step
	bool empty() const { return m_blocks.empty(); }

	/** The names of the single values Put in the step
	 * \return the names, in Put order
	 */
	std::vector<std::string> value_names() const;

	/** The blocks of the step become the arrays of the Bridge
	 * \param value_names the names of the single values (rank 0's, on every rank)
	 */
	void declare(const std::vector<std::string>& value_names);

	/// Whether the arrays are declared
	bool declared() const { return !m_declared.empty(); }

	/// The arrays of the Bridge, by name
	const std::vector<Step_block>& arrays() const { return m_declared; }

	/** The blocks to publish, by name, checked against the declared arrays
	 * \param step the step, for messages
	 * \param rank this rank: the single values are published by rank 0 only
	 * \return the blocks
	 */
	std::vector<const Step_block*> to_publish(size_t step, int rank) const;
};

} // namespace deisa

#endif // DEISA_STEP_BLOCKS_H_
