/* The deisa ADIOS2 engine: an ADIOS2 code's steps, published to Dask through one deisa.Bridge per MPI rank. */

#ifndef DEISA_ADIOS2_ENGINE_H_
#define DEISA_ADIOS2_ENGINE_H_

#include <mpi.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <adios2.h>
#include <adios2/plugin/PluginEngineInterface.h>
#include <pybind11/pybind11.h>

#include "array_order.h"
#include "core/python_bridge.h"
#include "memory_selection.h"
#include "opening.h"
#include "step_blocks.h"

#if !defined(ADIOS2_PLUGIN_ENGINE_INTERFACE) || ADIOS2_PLUGIN_ENGINE_INTERFACE < 2
#error "the deisa ADIOS2 engine needs ADIOS2's plugin engine interface v2 (ADIOS2 >= 2.12)"
#endif

namespace deisa {

/** The `deisa' engine of ADIOS2 (`<engine type="plugin">', PluginName `deisa').
 *
 * Each Put of a global array (any number per rank and step, each with its selection in the
 * step's shape; a joined array's) is a block of the array of the variable's name; a global single
 * value is a one-element array published by rank 0.  EndStep publishes the step's blocks, in
 * name order, through this rank's deisa.Bridge (created at the first published step, with the
 * variables Put then; a variable first Put later is declared then), the ADIOS2 step being the
 * time index: a variable whose first step's blocks were one per rank on a grid as declared
 * (today's path), any other as boxes (Step_blocks::publication).  A sync
 * Put is copied (the code may reuse its buffer at once), a deferred Put is read at EndStep, or
 * copied at PerformPuts, as BP5 does; with a memory selection, the block is its sub-box of the
 * code's buffer (the memory selection guard tells it).  A Span Put lends the code the engine's
 * memory for the step, which the guard's BufferData gives the Span's data().  What has no meaning
 * here (reading, local arrays, operators, strings) is a std::invalid_argument naming the feature
 * and the variable, at Open for the variables defined then, else at their Put.  See docs/adios2.md.
 */
class Deisa_engine: public adios2::plugin::PluginEngineInterface
{
	/// the deisa module, its background imports and the Bridge (shared with the PDI plugin)
	Python_bridge m_python;

	/// the engine's parameters (deisa.bridge.engine.parameters.EngineParameters)
	pybind11::object m_parameters;

	/// the arrays' published names and rank 0's attributes sent (deisa.bridge.engine.attributes)
	pybind11::object m_attributes;

	/// the name each variable is published under (an openPMD record's), where not its own
	std::map<std::string, std::string> m_published_as;

	/// The name `variable' is published under
	const std::string& published_as(const std::string& variable) const;

	/// the scheduler file, for messages
	std::string m_scheduler_file;

	/// whether the logger `deisa.adios2' logs at debug level (the phases of every EndStep), as at Open
	bool m_debug = false;

	/// whether each variable asked so far is published: a Put takes no GIL once its variable is known
	mutable std::map<std::string, bool> m_publishes;

	/// the blocks Put in the step being written
	Step_blocks m_step_blocks;

	/// the memory selections the code sets, from the guard (memory_selection_guard.h)
	Memory_selections m_memory_selections;

	/// the index of the step being written (the time index of what it publishes)
	size_t m_step = 0;

	/// whether BeginStep was called and EndStep not yet
	bool m_in_step = false;

	/// whether BeginStep was ever called (else the Puts before Close are one step)
	bool m_began = false;

	/// whether Close was called
	bool m_closed = false;

	/// the communicator of the Bridge: a duplicate of the code's (the guard tells it, opening.h), else of MPI_COMM_WORLD
	MPI_Comm m_comm = MPI_COMM_NULL;

	/// this rank in the engine's communicator
	int m_rank = 0;

	/// the io's array orders: a column-major io's (a Fortran code's) dimensions are published reversed (array_order.h)
	Io_order m_order;

	/// the communicator of the single values: rank 0 alone (MPI_COMM_NULL elsewhere), once the Bridge exists
	MPI_Comm m_values_comm = MPI_COMM_NULL;

	/** Whether a variable is published (the `Variables' parameter)
	 * \param name the variable
	 */
	bool publishes(const std::string& name) const;

	/** Refuses what the engine cannot publish right: reading, local arrays, operators, strings
	 * \param name the variable
	 * \param shape_id its kind of shape
	 * \param operators the types of its operators (compression...)
	 */
	void check(const std::string& name, adios2::ShapeID shape_id, const std::vector<std::string>& operators) const;

	/// Checks every variable defined before Open
	void check_defined_variables();

	/// Refuses to open without the memory selection guard, unless the code says it sets no selection
	void find_guard();

	/** Takes the code's communicator; where it cannot be known, MPI_COMM_WORLD once every rank of it opened within OpenTimeout (collective)
	 * \param opening what the guard told of the io being opened
	 */
	void take_communicator(const Opening& opening);

	/** Points a block at its sub-box of the code's buffer, if the code set a memory selection
	 * \param variable the variable (its core variable: the public one's only member)
	 * \param block the block, its shape set
	 * \param values the code's buffer
	 */
	template <typename T>
	void select_memory(const adios2::Variable<T>& variable, Step_block& block, const T* values) const;

	/// the core Spans whose memory the engine lent in the step (lent_span.h): taken back at EndStep
	std::vector<void*> m_lent_spans;

	/// the memory lent to the Spans of variables not published (the `Variables' parameter), until EndStep
	std::vector<std::vector<unsigned char>> m_unpublished_spans;

	/** Describes this rank's block of a variable (no data yet), refusing what the engine cannot publish
	 * \param variable the variable
	 * \param block receives its name, type and geometry
	 * \return whether the variable is published (else `block' is untouched)
	 */
	template <typename T>
	bool block_of(const adios2::Variable<T>& variable, Step_block& block) const;

	/** Lends the code's Span the engine's memory, the variable's block for the step (lent_span.h)
	 * \param variable the variable
	 * \param span the code's Span
	 * \param initialize whether to fill the memory with `value'
	 * \param value the value
	 */
	template <typename T>
	void put_span(adios2::Variable<T> variable, typename adios2::Variable<T>::Span& span, bool initialize, const T& value);

	/** Records this rank's block of a variable for the step
	 * \param variable the variable
	 * \param values the code's memory
	 * \param copy whether to copy it now (a sync Put)
	 */
	template <typename T>
	void put(adios2::Variable<T> variable, const T* values, bool copy);

	/** Which declared arrays some rank Put in the step, and whether some rank Put a variable not declared yet (collective: one small
	 * non-blocking allreduce, polled)
	 * \param news receives whether some rank Put a variable not declared yet
	 * \return the names of the declared arrays some rank Put
	 */
	std::set<std::string> agree_on_step(bool& news);

	/** Declares the variables first Put in the step by some rank (deisa.bridge.engine.variables.agree), creating the Bridge with them at the
	 * first (collective)
	 * \param put receives their names: published in the step
	 */
	void declare_new_arrays(std::set<std::string>& put);

	/// Publishes the step's blocks, if the step is published: every array some rank Put, by every rank (collective)
	void publish_step();

	/** Runs a call to Python, turning a failure into one std::runtime_error naming `action' (the traceback is logged)
	 * \param action what is done, for the message
	 * \param call the call
	 */
	template <typename Call>
	void python(const std::string& action, const Call& call);

public:
	/** The engine of an io opened by the code (ADIOS2's EngineCreate)
	 * \param io the io
	 * \param name the name given to Open
	 * \param mode the open mode: Write or Append
	 */
	Deisa_engine(adios2::IO io, const std::string& name, adios2::Mode mode);

	~Deisa_engine() override;

	adios2::StepStatus BeginStep(adios2::StepMode mode, const float timeoutSeconds = -1.0f) override;

	void EndStep() override;

	size_t CurrentStep() const override;

	void PerformPuts() override;

protected:
	void Init() override;

#define DEISA_DECLARE_PUT(T)                                                                                                                         \
	void DoPutSync(adios2::Variable<T> variable, const T* values) override;                                                                          \
	void DoPutDeferred(adios2::Variable<T> variable, const T* values) override;
	ADIOS2_FOREACH_STDTYPE_1ARG(DEISA_DECLARE_PUT)
#undef DEISA_DECLARE_PUT

#define DEISA_DECLARE_SPAN(T)                                                                                                                        \
	void DoPut(adios2::Variable<T> variable, typename adios2::Variable<T>::Span& span, const bool initialize, const T& value) override;
	ADIOS2_FOREACH_PRIMITIVE_STDTYPE_1ARG(DEISA_DECLARE_SPAN)
#undef DEISA_DECLARE_SPAN

	void DoClose(const int transportIndex = -1) override;
};

} // namespace deisa

extern "C" {

/** ADIOS2's entry point: the engine of an io opened with PluginName `deisa'
 *
 * Without the communicator: ADIOS2 2.12.1 compiles its PluginEngine, which calls this, in its
 * serial core, where the plugin manager's signature has no MPI_Comm (what the MPI signature
 * would receive there is garbage); the engine learns the code's from the guard (opening.h).
 */
__attribute__((visibility("default"))) adios2::plugin::PluginEngineInterface*
EngineCreate(adios2::IO io, const std::string& name, const adios2::Mode mode);

/// ADIOS2's exit point
__attribute__((visibility("default"))) void EngineDestroy(adios2::plugin::PluginEngineInterface* engine);
}

#endif // DEISA_ADIOS2_ENGINE_H_
