/* The blocks of the step an ADIOS2 code is writing, and how each declared array publishes them. */

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

	/// the axis of a joined array's JoinedDim, -1: not joined
	long joined_axis = -1;

	/// the global array's shape at the Put (SetShape); a joined array's joined axis: 0
	std::vector<long> global_shape;

	/// first index of the block in the global array (SetSelection); a joined array's: empty
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

	/// Whether the block holds no element (a count of 0 on some axis)
	bool empty() const;
};

/// How the engine publishes a variable (deisa.bridge.engine.variables)
enum class Path {
	/// today's path: one block per rank on a grid, as declared (a step that differs goes as boxes)
	fixed,
	/// every step as boxes (deisa.ArraySpec.moving): its shape given per step, or joined
	moving,
	/// a global single value: a one-element array, rank 0's
	value,
};

/// An array of the Bridge: a variable declared at the first published step where some rank Put it
struct Declared_array {
	/// the variable's name
	std::string name;

	/// numpy name of the element type
	std::string dtype;

	/// how it is published
	Path path = Path::moving;

	/// a fixed array's global shape, this rank's start and count, as declared
	std::vector<long> global_shape, start, shape;
};

/// What this rank publishes of a declared array in a step
struct Publication {
	/// the array
	const Declared_array* array = nullptr;

	/// the one block, as declared (today's path: Bridge.publish of the block); null: `boxes'
	const Step_block* plain = nullptr;

	/// the step's global shape this rank gives with its boxes; empty: none (no box, or a joined array)
	std::vector<long> shape;

	/// the boxes, in Put order, those holding no element left out (none: the rank takes part with nothing)
	std::vector<const Step_block*> boxes;
};

/** The blocks Put in the step being written, and the arrays declared to the Bridge.
 *
 * A rank Puts any number of blocks of a variable in a step, each with its own selection in
 * the step's shape.  Every error is a std::invalid_argument whose message names the variable
 * and the step, for the engine to raise at the Put that caused it.
 */
class Step_blocks
{
	/// the blocks of the step, in Put order
	std::vector<Step_block> m_blocks;

	/// the arrays of the Bridge, by name
	std::vector<Declared_array> m_declared;

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

	/** The blocks of a variable in the step
	 * \param name the variable
	 * \return its blocks, in Put order
	 */
	std::vector<const Step_block*> of(const std::string& name) const;

	/** The variables Put in the step and not declared yet
	 * \return their names, sorted
	 */
	std::vector<std::string> new_names() const;

	/** Declares arrays (their geometry, no data)
	 * \param arrays the arrays, not declared yet
	 */
	void declare(std::vector<Declared_array> arrays);

	/// Whether some array is declared
	bool declared() const { return !m_declared.empty(); }

	/// The arrays of the Bridge, by name
	const std::vector<Declared_array>& arrays() const { return m_declared; }

	/** What this rank publishes of an array in the step
	 * \param array one of arrays()
	 * \return its plain block or its boxes
	 */
	Publication publication(const Declared_array& array) const;
};

} // namespace deisa

#endif // DEISA_STEP_BLOCKS_H_
