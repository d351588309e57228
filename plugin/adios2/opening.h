/* What the deisa ADIOS2 engine learns of the io it opens: the code's communicator and the io's transports. */

#ifndef DEISA_ADIOS2_OPENING_H_
#define DEISA_ADIOS2_OPENING_H_

#include <mpi.h>

#include <string>
#include <vector>

#include <adios2.h>

namespace deisa {

/** The io being opened, as the memory selection guard tells it (memory_selection_guard.h).
 *
 * ADIOS2 2.12.1 gives a plugin engine no communicator: the guard, preloaded, tells the engine
 * the core communicator of the PluginEngine being constructed, a duplicate of the one the code
 * gave ADIOS2 (ADIOS(config, comm), IO::Open(name, mode, comm)).
 */
struct Opening {
	/// the communicator the code gave ADIOS2 for the io; MPI_COMM_NULL where it cannot be known
	MPI_Comm comm = MPI_COMM_NULL;

	/// why `comm' cannot be known, in words (empty when it is known)
	std::string unknown;

	/// what to do where `comm' cannot be known, in words
	std::string fix;

	/// the io's transports (`<transport>' sections), one each: `type (key, key...)'
	std::vector<std::string> transports;
};

/** Asks the guard, if loaded, what it knows of the io being opened (inside ADIOS2's Open only)
 * \param io the io
 * \return what is known
 */
Opening learn_opening(const adios2::IO& io);

/** Whether every rank of a communicator reaches this call within a time (a non-blocking barrier polled until the deadline)
 * \param comm the communicator
 * \param seconds the time
 * \return whether every rank arrived; if not, the barrier is left pending (the caller stops)
 */
bool every_rank_arrives(MPI_Comm comm, double seconds);

} // namespace deisa

#endif // DEISA_ADIOS2_OPENING_H_
