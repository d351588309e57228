/* The array order of an io (array_order.h). */

#include <memory>
#include <stdexcept>
#include <string>

#include "array_order.h"

namespace deisa {

namespace {

/// The first members of ADIOS2 2.12's adios2::core::IO (source/adios2/core/IO.h), which has no
/// virtual function: the ADIOS that created it, its group, its name, the host language, the order
struct Core_io_head {
	void* adios;
	std::shared_ptr<void> group;
	std::string name;
	std::string host_language;
	adios2::ArrayOrdering order;
};

} // namespace

Io_order array_order(const adios2::IO& io)
{
	// the public IO's only member is its core IO's pointer
	static_assert(sizeof(adios2::IO) == sizeof(void*), "adios2::IO is its core IO's pointer");
	const auto* core = *reinterpret_cast<const Core_io_head* const *>(&io);
	const adios2::ArrayOrdering order = core ? core->order : adios2::ArrayOrdering::Auto;
	if (core == nullptr || core->name != io.Name() || (order != adios2::ArrayOrdering::RowMajor && order != adios2::ArrayOrdering::ColumnMajor)) {
		throw std::invalid_argument{
			"deisa ADIOS2 engine: the array order (row- or column-major) of io `" + io.Name()
			+ "' cannot be read: this ADIOS2's core IO is not laid out as ADIOS2 2.12's, which the engine was written for"};
	}
	// as ADIOS2's helper::IsRowMajor(hostLanguage)
	const std::string& language = core->host_language;
	return {order == adios2::ArrayOrdering::ColumnMajor, language == "Fortran" || language == "R" || language == "Matlab"};
}

} // namespace deisa
