/* The array order of an io, which ADIOS2's public API does not give an engine. */

#ifndef DEISA_ADIOS2_ARRAY_ORDER_H_
#define DEISA_ADIOS2_ARRAY_ORDER_H_

#include <algorithm>
#include <vector>

#include <adios2.h>

namespace deisa {

/// The array orders of an io, as ADIOS2 2.12's BP5 writer reads them
struct Io_order {
	/// the io's: its variables' dimensions are in Fortran's order (the first runs fastest in
	/// memory), BP5 records it and a row-major reader (C++, Python) sees them reversed; set by a
	/// Fortran code (ADIOS2's Fortran bindings) or DeclareIO(name, ArrayOrdering::ColumnMajor)
	bool column_major = false;

	/// the language of the code's (Fortran, R, Matlab), in which BP5 reads memory selections
	bool language_column_major = false;
};

/** The array orders of `io'.
 *
 * ADIOS2 2.12's public IO has no getter for them (only Kokkos and GPU builds give a variable's
 * layout): they are read from the core IO, whose first members are checked against what the
 * public IO says (its name) before they are trusted.
 * \param io the engine's io
 * \return its orders
 * \throws std::invalid_argument naming the io if its core IO is not laid out as ADIOS2 2.12's
 */
Io_order array_order(const adios2::IO& io);

/// `dims' in the reverse order: a column-major io's dimensions, as a row-major reader sees them
template <typename T>
std::vector<T> reversed(std::vector<T> dims)
{
	std::reverse(dims.begin(), dims.end());
	return dims;
}

} // namespace deisa

#endif // DEISA_ADIOS2_ARRAY_ORDER_H_
