/* What the deisa plugin's configuration says of its Bridge (see bridge_settings.h). */

#include <mpi.h>

#include <cstring>
#include <memory>
#include <string>

#include <pdi/context.h>
#include <pdi/datatype.h>
#include <pdi/error.h>
#include <pdi/expression.h>
#include <pdi/paraconf_wrapper.h>
#include <pdi/ref_any.h>
#include <pdi/scalar_datatype.h>

#include "bridge_settings.h"

using PDI::Context;
using PDI::Expression;
using PDI::Ref_r;
using PDI::Scalar_datatype;
using PDI::Scalar_kind;
using PDI::Spectree_error;
using PDI::to_string;
using std::string;

namespace deisa {

On_error to_on_error(PC_tree_t tree)
{
	string value = to_string(tree);
	if (value == "abort") return On_error::ABORT;
	if (value == "warn") return On_error::WARN;
	throw Spectree_error{tree, "Invalid value for `on_error' in deisa configuration: `{}' (expecting abort or warn)", value};
}

Config_expression parse_expression(PC_tree_t value, const char* key)
{
	try {
		return {Expression{to_string(value)}, value};
	} catch (const PDI::Error& e) {
		throw Spectree_error{value, "Invalid $-expression for `{}' in deisa configuration: {}", key, e.what()};
	}
}

Ref_r evaluate(Context& ctx, const Config_expression& value, const char* key)
{
	try {
		return value.expression.to_ref(ctx);
	} catch (const PDI::Error& e) {
		throw Spectree_error{value.tree, "Cannot evaluate `{}' in deisa configuration: {}", key, e.what()};
	}
}

MPI_Fint fortran_communicator(Context& ctx, const Config_expression& value)
{
	Ref_r ref = evaluate(ctx, value, "communicator");
	auto&& scalar = std::dynamic_pointer_cast<const Scalar_datatype>(ref.type());
	if (scalar && scalar->kind() == Scalar_kind::UNKNOWN && scalar->buffersize() == sizeof(MPI_Comm)) {
		MPI_Comm comm;
		std::memcpy(&comm, ref.get(), sizeof(MPI_Comm));
		return MPI_Comm_c2f(comm);
	}
	if (scalar && (scalar->kind() == Scalar_kind::SIGNED || scalar->kind() == Scalar_kind::UNSIGNED)) {
		return static_cast<MPI_Fint>(ref.scalar_value<long>());
	}
	throw Spectree_error{value.tree, "`communicator' in deisa configuration must be an MPI_Comm (e.g. $MPI_COMM_WORLD from the mpi plugin)"};
}

void Bridge_settings::set_scheduler_file(PC_tree_t value, const string& key)
{
	scheduler_file = parse_expression(value, key.c_str());
	scheduler_key = key;
}

void Bridge_settings::set_communicator(PC_tree_t value)
{
	communicator = parse_expression(value, "communicator");
}

} // namespace deisa
