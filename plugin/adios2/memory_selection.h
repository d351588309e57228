/* The memory selection of a variable, as the deisa ADIOS2 engine learns it from the guard. */

#ifndef DEISA_ADIOS2_MEMORY_SELECTION_H_
#define DEISA_ADIOS2_MEMORY_SELECTION_H_

#include <cstddef>
#include <string>
#include <vector>

#include "memory_selection_guard.h"

namespace deisa {

/// A memory selection: the block is buffer.reshape(count)[start[0]:start[0]+c0, ...] of the code's buffer
struct Memory_box {
	/// the block's first index in the code's buffer
	std::vector<size_t> start;

	/// the code's buffer's dimensions (row-major, as the variable)
	std::vector<size_t> count;
};

/** What the engine knows of the memory selections the code sets (SetMemorySelection).
 *
 * The public adios2::Variable<T> an engine receives hides the selection: the memory selection
 * guard (libdeisa_adios2_guard.so, memory_selection_guard.h), preloaded in the code, records
 * it for each core variable; this asks the guard.
 */
class Memory_selections
{
	/// the guard's query, null when the guard is not loaded
	Deisa_adios2_guard_query m_query = nullptr;

public:
	/** Looks for the guard in the process
	 * \return empty if the guard records every selection; else what is wrong, in words
	 */
	std::string find_guard();

	/// Whether the guard was found (find_guard returned empty)
	bool guarded() const { return m_query != nullptr; }

	/** The selection of a core variable, if the code set one
	 * \param variable the adios2::core::VariableBase* (the public variable's only member)
	 * \param box receives the selection
	 * \return whether the variable has one (false without the guard)
	 */
	bool find(const void* variable, Memory_box& box) const;
};

/** The path the guard has beside this engine library
 * \return its path, or its file name if the engine's is unknown
 */
std::string guard_path();

/** Applies a memory selection to a block of the code's buffer, checking it fits
 * \param name the variable, for messages
 * \param box the selection
 * \param shape the block's count
 * \param offset receives the block's first element's index in the buffer
 * \param strides receives the buffer's strides in elements, per dimension
 * \throws std::invalid_argument naming the variable if the block does not fit in the buffer
 */
void select_memory(const std::string& name, const Memory_box& box, const std::vector<long>& shape, long& offset, std::vector<long>& strides);

} // namespace deisa

#endif // DEISA_ADIOS2_MEMORY_SELECTION_H_
