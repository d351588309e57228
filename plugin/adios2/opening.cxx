/* What the deisa ADIOS2 engine learns of the io it opens: the code's communicator and the io's transports. */

#include <dlfcn.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "memory_selection.h"
#include "memory_selection_guard.h"
#include "opening.h"

using std::string;

namespace deisa {

Opening learn_opening(const adios2::IO& io)
{
	Opening opening;
	auto* opening_comm = reinterpret_cast<Deisa_adios2_guard_opening>(dlsym(RTLD_DEFAULT, DEISA_ADIOS2_GUARD_OPENING));
	auto* transports = reinterpret_cast<Deisa_adios2_guard_transports>(dlsym(RTLD_DEFAULT, DEISA_ADIOS2_GUARD_TRANSPORTS));
	if (opening_comm == nullptr || transports == nullptr) {
		opening.unknown = "the memory selection guard, which tells it, is not loaded";
		opening.fix = "run the code under deisa-run, which preloads the guard, or with LD_PRELOAD=" + guard_path()
		            + ", and the engine publishes over the code's communicator";
		return opening;
	}
	// the public io's only member is its core io, as a variable's (deisa_engine.cxx)
	static_assert(sizeof(adios2::IO) == sizeof(void*), "adios2::IO is its core io's pointer");
	const void* core_io = *reinterpret_cast<void* const *>(&io);
	string lines(transports(core_io, nullptr, 0), '\0');
	lines.resize(transports(core_io, lines.data(), lines.size()) == lines.size() ? lines.size() : 0);
	for (size_t begin = 0, end; (end = lines.find('\n', begin)) != string::npos; begin = end + 1) {
		opening.transports.emplace_back(lines.substr(begin, end - begin));
	}
	opening.fix = "give ADIOS2 the communicator of the ranks that write (adios2::ADIOS(config, comm), or IO::Open(name, mode, comm)), or "
				  "open the io on every rank";
	const void* comm = opening_comm();
	using Comm_as_mpi = MPI_Comm (*)(const void*);
	auto* comm_as_mpi = reinterpret_cast<Comm_as_mpi>(dlsym(RTLD_DEFAULT, DEISA_ADIOS2_COMM_AS_MPI));
	if (comm == nullptr) {
		opening.unknown = "the guard did not see ADIOS2's PluginEngine constructed: it was loaded, not preloaded";
		opening.fix = "preload the guard: run the code under deisa-run, or with LD_PRELOAD=" + guard_path();
	} else if (comm_as_mpi == nullptr) {
		opening.unknown = "ADIOS2's MPI library (libadios2_core_mpi) is not loaded";
	} else if ((opening.comm = comm_as_mpi(comm)) == MPI_COMM_NULL) {
		opening.unknown = "the code gave ADIOS2 no MPI communicator";
	}
	return opening;
}

bool every_rank_arrives(MPI_Comm comm, double seconds)
{
	using Clock = std::chrono::steady_clock;
	const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
	MPI_Request request;
	MPI_Ibarrier(comm, &request);
	for (int done = 0;;) {
		MPI_Test(&request, &done, MPI_STATUS_IGNORE);
		if (done) return true;
		if (Clock::now() >= deadline) return false;
		std::this_thread::sleep_for(std::chrono::milliseconds(2));
	}
}

} // namespace deisa
