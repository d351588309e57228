/* The memory selection guard (libdeisa_adios2_guard.so): what the deisa ADIOS2 engine asks it.
 *
 * ADIOS2's plugin engine interface (v2) gives an engine a public adios2::Variable<T>, which has
 * no getter for the memory selection a code set (SetMemorySelection: the block is a sub-box of
 * the code's buffer, whose ghost cells BP5 cuts).  Every binding (C++, C, hence Fortran and
 * Python) ends in one exported function of libadios2_core, VariableBase::SetMemorySelection: the
 * guard, preloaded (LD_PRELOAD), defines it, records the selection of each core variable and
 * calls ADIOS2's own.  It also defines VariableBase's constructor, to forget what it recorded
 * for a variable whose memory a new one reuses.  And it answers a Span's data() for the memory
 * the engine lends a Span Put (DEISA_ADIOS2_SPAN_BUFFER_INDEX, below).
 *
 * ADIOS2 2.12.1 compiles its PluginEngine in its serial core, so a plugin's EngineCreate gets
 * no communicator, while the core engine is given the io's (a helper::Comm).  The guard also
 * defines PluginEngine's constructor: while it runs (the plugin's EngineCreate and Init run
 * inside it), the guard tells the engine that core communicator (DEISA_ADIOS2_GUARD_OPENING),
 * which the engine turns into the MPI_Comm the code gave ADIOS2 with ADIOS2's own
 * helper::CommAsMPI.  And it defines IO::AddTransport, to tell the engine the io's transports
 * (the `<transport>' sections the engine ignores).  See docs/adios2.md.
 */

#ifndef DEISA_ADIOS2_MEMORY_SELECTION_GUARD_H_
#define DEISA_ADIOS2_MEMORY_SELECTION_GUARD_H_

#include <stddef.h>

/// adios2::core::VariableBase::SetMemorySelection(const Box<Dims>&), as libadios2_core exports it
#define DEISA_ADIOS2_SET_MEMORY_SELECTION "_ZN6adios24core12VariableBase18SetMemorySelectionERKSt4pairISt6vectorImSaImEES5_E"

/// adios2::core::VariableBase's constructor (name, type, element size, shape, start, count, constant shape), base object
#define DEISA_ADIOS2_VARIABLE_BASE_C2                                                                                                                \
	"_ZN6adios24core12VariableBaseC2ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEENS_8DataTypeEmRKSt6vectorImSaImEESF_SF_b"

/// adios2::plugin::PluginEngine's constructor (io, name, mode, comm), complete object and base object
#define DEISA_ADIOS2_PLUGIN_ENGINE_C1                                                                                                                \
	"_ZN6adios26plugin12PluginEngineC1ERNS_4core2IOERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEENS_4ModeENS_6helper4CommE"
#define DEISA_ADIOS2_PLUGIN_ENGINE_C2                                                                                                                \
	"_ZN6adios26plugin12PluginEngineC2ERNS_4core2IOERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEENS_4ModeENS_6helper4CommE"

/// adios2::core::IO::AddTransport(std::string, const Params&)
#define DEISA_ADIOS2_ADD_TRANSPORT                                                                                                                   \
	"_ZN6adios24core2IO12AddTransportENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERKSt3mapIS7_S7_St4lessIS7_ESaISt4pairIKS7_S7_EEE"

/// adios2::helper::CommAsMPI(const helper::Comm&), in libadios2_core_mpi: the MPI_Comm of a core communicator (MPI_COMM_NULL if serial)
#define DEISA_ADIOS2_COMM_AS_MPI "_ZN6adios26helper9CommAsMPIERKNS0_4CommE"

/// The guard's function giving the core communicator of the plugin engine being constructed
#define DEISA_ADIOS2_GUARD_OPENING "deisa_adios2_guard_opening_comm"

/// The guard's function giving an io's transports
#define DEISA_ADIOS2_GUARD_TRANSPORTS "deisa_adios2_guard_transports"

/// The guard's query function, found by the engine with dlsym(RTLD_DEFAULT, ...)
#define DEISA_ADIOS2_GUARD_QUERY "deisa_adios2_guard_memory_selection"

/// The guard's function naming its own definitions, found by the engine with dlsym(RTLD_DEFAULT, ...)
#define DEISA_ADIOS2_GUARD_DEFINITIONS "deisa_adios2_guard_definitions"

/// The guard's file name, beside the engine
#define DEISA_ADIOS2_GUARD_FILE "libdeisa_adios2_guard.so"

/** The buffer index of a Span whose memory the deisa engine lends (core::Span<T>::m_BufferIdx).
 *
 * A Span's data() calls the core engine's virtual DoBufferData_<type>(bufferIdx,
 * payloadPosition, bufferID), which ADIOS2's PluginEngine does not override: its vtable slots
 * hold core::Engine's (null), bound by the dynamic loader.  The guard defines those 14
 * functions: for this index, the payload position is the address of the engine's buffer (plus
 * the element's offset, as operator[] adds it); for any other, null, as ADIOS2's own.  Engines
 * with their own (BP5...) never call them.
 */
#define DEISA_ADIOS2_SPAN_BUFFER_INDEX (-0x44454953)

/// adios2::core::Engine::DoBufferData_<L>(int, size_t, size_t), L as ADIOS2 names it, N the length of `DoBufferData_<L>'
#define DEISA_ADIOS2_BUFFER_DATA_NAME(N, L) "_ZN6adios24core6Engine" #N "DoBufferData_" #L "Eimm"

/// Calls MACRO(N, L) for every type ADIOS2 2.12 has a DoBufferData_<L> for
#define DEISA_ADIOS2_FOREACH_BUFFER_DATA(MACRO)                                                                                                      \
	MACRO(17, char)                                                                                                                                  \
	MACRO(17, int8)                                                                                                                                  \
	MACRO(18, int16)                                                                                                                                 \
	MACRO(18, int32)                                                                                                                                 \
	MACRO(18, int64)                                                                                                                                 \
	MACRO(18, uint8)                                                                                                                                 \
	MACRO(19, uint16)                                                                                                                                \
	MACRO(19, uint32)                                                                                                                                \
	MACRO(19, uint64)                                                                                                                                \
	MACRO(18, float)                                                                                                                                 \
	MACRO(19, double)                                                                                                                                \
	MACRO(20, ldouble)                                                                                                                               \
	MACRO(19, cfloat)                                                                                                                                \
	MACRO(20, cdouble)

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

/** The core communicator (adios2::helper::Comm*) given to the PluginEngine this thread is constructing (DEISA_ADIOS2_GUARD_OPENING)
 * \return it, null outside PluginEngine's constructor
 */
typedef const void* (*Deisa_adios2_guard_opening)(void);

/** The transports added to a core io (DEISA_ADIOS2_GUARD_TRANSPORTS), one a line: `type (key, key...)'
 * \param io the adios2::core::IO*
 * \param text receives the lines, if `capacity' is enough (not null-terminated)
 * \param capacity the size of `text'
 * \return the length of the lines
 */
typedef size_t (*Deisa_adios2_guard_transports)(const void* io, char* text, size_t capacity);
}

#endif // DEISA_ADIOS2_MEMORY_SELECTION_GUARD_H_
