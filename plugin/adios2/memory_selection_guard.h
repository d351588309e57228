/* The memory selection guard (libdeisa_adios2_guard.so): what the deisa ADIOS2 engine asks it.
 *
 * ADIOS2's plugin engine interface (v2) gives an engine a public adios2::Variable<T>, which has
 * no getter for the memory selection a code set (SetMemorySelection: the block is a sub-box of
 * the code's buffer, whose ghost cells BP5 cuts).  Every binding (C++, C, hence Fortran and
 * Python) ends in one exported function of libadios2_core, VariableBase::SetMemorySelection: the
 * guard, preloaded (LD_PRELOAD), defines it, records the selection of each core variable and
 * calls ADIOS2's own.  It also defines VariableBase's constructor, to forget what it recorded
 * for a variable whose memory a new one reuses.  See docs/adios2.md.
 */

#ifndef DEISA_ADIOS2_MEMORY_SELECTION_GUARD_H_
#define DEISA_ADIOS2_MEMORY_SELECTION_GUARD_H_

#include <stddef.h>

/// adios2::core::VariableBase::SetMemorySelection(const Box<Dims>&), as libadios2_core exports it
#define DEISA_ADIOS2_SET_MEMORY_SELECTION "_ZN6adios24core12VariableBase18SetMemorySelectionERKSt4pairISt6vectorImSaImEES5_E"

/// adios2::core::VariableBase's constructor (name, type, element size, shape, start, count, constant shape), base object
#define DEISA_ADIOS2_VARIABLE_BASE_C2                                                                                                                \
	"_ZN6adios24core12VariableBaseC2ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEENS_8DataTypeEmRKSt6vectorImSaImEESF_SF_b"

/// The guard's query function, found by the engine with dlsym(RTLD_DEFAULT, ...)
#define DEISA_ADIOS2_GUARD_QUERY "deisa_adios2_guard_memory_selection"

/// The guard's function naming its own definitions, found by the engine with dlsym(RTLD_DEFAULT, ...)
#define DEISA_ADIOS2_GUARD_DEFINITIONS "deisa_adios2_guard_definitions"

/// The guard's file name, beside the engine
#define DEISA_ADIOS2_GUARD_FILE "libdeisa_adios2_guard.so"

extern "C" {

/** The memory selection a code set on a core variable (the guard's DEISA_ADIOS2_GUARD_QUERY)
 * \param variable the adios2::core::VariableBase*
 * \param capacity the size of `start' and `count'
 * \param start receives the memory start (the block's offset in the code's buffer)
 * \param count receives the memory count (the code's buffer's dimensions)
 * \return the number of dimensions of the selection, 0 if none (or above `capacity': nothing copied)
 */
typedef size_t (*Deisa_adios2_guard_query)(const void* variable, size_t capacity, size_t* start, size_t* count);

/** The guard's own definitions of the two functions it interposes (DEISA_ADIOS2_GUARD_DEFINITIONS)
 * \param set_memory_selection receives its SetMemorySelection
 * \param variable_base receives its VariableBase constructor
 */
typedef void (*Deisa_adios2_guard_definitions)(const void** set_memory_selection, const void** variable_base);
}

#endif // DEISA_ADIOS2_MEMORY_SELECTION_GUARD_H_
