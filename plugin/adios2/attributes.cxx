/* The deisa ADIOS2 engine's attributes (attributes.h). */

#include "attributes.h"

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <pybind11/stl.h>

namespace py = pybind11;

namespace deisa {

namespace {

/// One element as a Python number or string (a char, an int8 as ADIOS2 writes it, as a number)
template <typename T>
py::object element(const T& value)
{
	if constexpr (std::is_same_v<T, char>) {
		return py::int_(static_cast<int>(value));
	} else {
		return py::cast(value);
	}
}

template <typename T>
void add(py::dict& found, adios2::IO& io, const std::string& name)
{
	adios2::Attribute<T> attribute = io.InquireAttribute<T>(name);
	if (!attribute) return;
	const std::vector<T> data = attribute.Data();
	if (attribute.IsValue()) {
		if (data.empty()) return;
		found[py::str(name)] = element(data.front());
		return;
	}
	py::list values;
	for (auto&& value: data) {
		values.append(element(value));
	}
	found[py::str(name)] = values;
}

} // namespace

py::dict io_attributes(adios2::IO& io)
{
	py::dict found;
	for (auto&& [name, parameters]: io.AvailableAttributes()) {
		auto type = parameters.find("Type");
		if (type == parameters.end()) continue;
		if (type->second == "string") {
			add<std::string>(found, io, name);
			continue;
		}
#define DEISA_ATTRIBUTE(T)                                                                                                                           \
	else if (type->second == adios2::GetType<T>()) {                                                                                                 \
		add<T>(found, io, name);                                                                                                                     \
	}
		if (false) {
		}
		DEISA_ATTRIBUTE(char)
		DEISA_ATTRIBUTE(int8_t)
		DEISA_ATTRIBUTE(int16_t)
		DEISA_ATTRIBUTE(int32_t)
		DEISA_ATTRIBUTE(int64_t)
		DEISA_ATTRIBUTE(uint8_t)
		DEISA_ATTRIBUTE(uint16_t)
		DEISA_ATTRIBUTE(uint32_t)
		DEISA_ATTRIBUTE(uint64_t)
		DEISA_ATTRIBUTE(float)
		DEISA_ATTRIBUTE(double)
#undef DEISA_ATTRIBUTE
	}
	return found;
}

} // namespace deisa
