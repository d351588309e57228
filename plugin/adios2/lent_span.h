/* The memory the deisa ADIOS2 engine lends a Span Put, written into ADIOS2's core Span.
 *
 * A code's Put(variable) returns an adios2::Variable<T>::Span, whose only member is the core
 * Span ADIOS2 keeps in the variable; its data() asks the core engine's BufferData with the core
 * Span's buffer index and payload position.  ADIOS2's PluginEngine does not forward that call to
 * a plugin, and its default returns null: the memory selection guard, preloaded, answers it for
 * DEISA_ADIOS2_SPAN_BUFFER_INDEX with the payload position as an address
 * (memory_selection_guard.h).  The engine writes that index and its buffer's address in the
 * core Span, after checking the core Span is laid out as in ADIOS2 2.12 (Core_span), and
 * checks that data() then gives its buffer back.  See docs/adios2.md.
 */

#ifndef DEISA_ADIOS2_LENT_SPAN_H_
#define DEISA_ADIOS2_LENT_SPAN_H_

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include <adios2.h>

#include "memory_selection_guard.h"

namespace deisa {

/// adios2::core::Span<T>'s members, as ADIOS2 2.12 declares them (source/adios2/core/Span.h)
template <typename T>
struct Core_span {
	std::pair<size_t, size_t> min_max_metadata_positions;
	size_t payload_position;
	int buffer_index;
	T value;
	void* engine; // Engine&
	size_t size;
};

/** The core Span of a code's Span, checked as far as the engine can: its size is the block's,
 * its buffer index ADIOS2's initial one (-1) or the engine's (a Span of the same variable lent
 * in an earlier step: ADIOS2 keeps one core Span per variable for a plugin engine)
 * \param span the code's Span
 * \param count the block's number of elements (the variable's Count product)
 * \return the core Span, null if it is not laid out as the engine expects
 */
template <typename T>
Core_span<T>* core_span(typename adios2::Variable<T>::Span& span, size_t count)
{
	static_assert(sizeof(span) == sizeof(void*), "adios2::Variable<T>::Span is its core Span's pointer");
	auto* core = *reinterpret_cast<Core_span<T>**>(&span);
	if (core == nullptr || core->size != count) return nullptr;
	if (core->buffer_index != -1 && core->buffer_index != DEISA_ADIOS2_SPAN_BUFFER_INDEX) return nullptr;
	if (core->buffer_index == -1 && core->payload_position != 0) return nullptr;
	return core;
}

/** Lends `buffer' to a code's Span: its data() and operator[] are in `buffer' from now on
 * \param span the code's Span
 * \param core its core Span (core_span)
 * \param buffer the engine's buffer, of the block's size
 * \return whether the Span's data() gives `buffer' (false: the guard does not answer it, the core Span is reset)
 */
template <typename T>
bool lend(typename adios2::Variable<T>::Span& span, Core_span<T>& core, T* buffer)
{
	core.buffer_index = DEISA_ADIOS2_SPAN_BUFFER_INDEX;
	core.payload_position = reinterpret_cast<std::uintptr_t>(buffer);
	if (span.data() == buffer) return true;
	core.buffer_index = -1; // as ADIOS2 left it: data() is null, as without the engine
	core.payload_position = 0;
	return false;
}

/** Takes the memory back from a core Span: its data() is null again, as before the Put
 * \param core the core Span, a Core_span<T> of any T (the members before `value' do not depend on it)
 */
inline void take_back(void* core)
{
	auto* span = static_cast<Core_span<char>*>(core);
	span->buffer_index = -1;
	span->payload_position = 0;
}

} // namespace deisa

#endif // DEISA_ADIOS2_LENT_SPAN_H_
