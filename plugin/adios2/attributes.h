/* The deisa ADIOS2 engine's attributes: an io's ADIOS2 attributes as plain Python values, and the
 * Python side that decides what each array gets (deisa/bridge/engine/attributes.py). */

#ifndef DEISA_ADIOS2_ATTRIBUTES_H_
#define DEISA_ADIOS2_ATTRIBUTES_H_

#include <adios2.h>
#include <pybind11/pybind11.h>

namespace deisa {

/** Every attribute of `io' (global ones and variables' `var/attr', by ADIOS2's names) as a plain
 * Python value: a single value as a Python number or string, an array as a list of them (a
 * float as the double of the same value); a complex or long double attribute is left out, as
 * values that do not travel plainly.  The GIL must be held.
 * \param io the io
 * \return a dict, by ADIOS2's attribute names
 */
pybind11::dict io_attributes(adios2::IO& io);

} // namespace deisa

#endif // DEISA_ADIOS2_ATTRIBUTES_H_
