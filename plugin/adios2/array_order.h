/* The array order of an io, which ADIOS2's public API does not give an engine. */

#ifndef DEISA_ADIOS2_ARRAY_ORDER_H_
#define DEISA_ADIOS2_ARRAY_ORDER_H_

#include <algorithm>
#include <vector>

#include <adios2.h>

namespace deisa {

/** Whether ADIOS2 records `io' as column-major: declared by a Fortran code (ADIOS2's Fortran
 * bindings) or with DeclareIO(name, ArrayOrdering::ColumnMajor).
 *
 * A column-major io's variables have their dimensions in Fortran's order (the first one runs
 * fastest in memory): BP5 writes them so, and a row-major reader (C++, Python) sees them
 * reversed.  ADIOS2 2.12's public IO has no getter for the order (only Kokkos and GPU builds
 * give a variable's layout): it is read from the core IO, whose first members are checked
 * against what the public IO says (its name) before the order is trusted.
 * \param io the engine's io
 * \return whether its arrays are column-major
 * \throws std::invalid_argument naming the io if its core IO is not laid out as ADIOS2 2.12's
 */
bool column_major(const adios2::IO& io);

/// `dims' in the reverse order: a column-major io's dimensions, as a row-major reader sees them
template <typename T>
std::vector<T> reversed(std::vector<T> dims)
{
	std::reverse(dims.begin(), dims.end());
	return dims;
}

} // namespace deisa

#endif // DEISA_ADIOS2_ARRAY_ORDER_H_
