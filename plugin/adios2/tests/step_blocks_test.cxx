/* Step_blocks (plugin/adios2/step_blocks.h): the arrays declared from the first step, and each
 * later step checked against them, every error naming the variable, the step and what differs.
 * Run by CTest (deisa_step_blocks) and tests/test_adios2.py. */

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "step_blocks.h"

using deisa::Step_block;
using deisa::Step_blocks;
using std::string;
using std::vector;

namespace {

int g_failures = 0;

void check(bool condition, const string& what)
{
	if (!condition) {
		std::fprintf(stderr, "FAILED: %s\n", what.c_str());
		++g_failures;
	}
}

Step_block block(const string& name, vector<long> start, vector<long> shape, bool value = false)
{
	static double data[64] = {};
	Step_block result;
	result.name = name;
	result.dtype = "float64";
	result.value = value;
	result.global_shape = value ? vector<long>{1} : vector<long>{13, 10};
	result.start = std::move(start);
	result.shape = std::move(shape);
	result.data = data;
	result.nbytes = 8;
	return result;
}

/// The message of what `action' throws, empty if it throws nothing
template <typename Action>
string error_of(const Action& action)
{
	try {
		action();
	} catch (const std::invalid_argument& e) {
		return e.what();
	}
	return {};
}

bool has(const string& text, const string& part)
{
	return text.find(part) != string::npos;
}

/// A Step_blocks declared from a first step of U (this rank's block at (10, 0)) and rank 0's value `step'
Step_blocks declared(int rank)
{
	Step_blocks blocks;
	blocks.add(block("U", {10, 0}, {3, 8}), 0);
	blocks.add(block("step", {0}, {1}, true), 0);
	blocks.declare({"step"});
	check(blocks.to_publish(0, rank).size() == (rank == 0 ? 2u : 1u), "step 0 publishes U, and step on rank 0 only");
	blocks.clear();
	return blocks;
}

} // namespace

int main()
{
	Step_blocks blocks = declared(0);
	check(blocks.arrays().size() == 2 && blocks.arrays()[0].name == "U" && blocks.arrays()[1].name == "step", "arrays by name");
	blocks.add(block("step", {0}, {1}, true), 1);
	blocks.add(block("U", {10, 0}, {3, 8}), 1);
	const auto published = blocks.to_publish(1, 0);
	check(published.size() == 2 && published[0]->name == "U", "a later step, in name order");

	string twice = error_of([&] { blocks.add(block("U", {10, 0}, {3, 8}), 1); });
	check(has(twice, "variable `U' Put twice by this rank in step 1"), "Put twice: " + twice);

	blocks.clear();
	blocks.add(block("U", {10, 0}, {3, 8}), 2);
	string missing = error_of([&] { blocks.to_publish(2, 0); });
	check(has(missing, "variable `step' was not Put by rank 0 in step 2"), "a value missing on rank 0: " + missing);

	blocks = declared(1);
	blocks.add(block("U", {10, 0}, {3, 8}), 1);
	check(error_of([&] { blocks.to_publish(1, 1); }).empty(), "rank 1 needs no value");
	blocks.clear();
	blocks.add(block("U", {10, 0}, {2, 8}), 2);
	string changed = error_of([&] { blocks.to_publish(2, 1); });
	check(has(changed, "variable `U' changed this rank's count ({3, 8} -> {2, 8}) in step 2"), "count changed: " + changed);
	blocks.clear();
	blocks.add(block("U", {10, 0}, {3, 8}), 3);
	blocks.add(block("W", {0, 0}, {3, 8}), 3);
	string added = error_of([&] { blocks.to_publish(3, 1); });
	check(has(added, "variable `W' is first Put in step 3"), "a new variable: " + added);

	Step_block copied = block("U", {0, 0}, {1, 1});
	copied.keep_copy();
	check(copied.copy.size() == 8 && copied.data == copied.copy.data(), "keep_copy points at the copy");
	const auto strided = block("U", {0, 0}, {3, 8}).strided(8);
	check(strided.strides == vector<long>({64, 8}), "C-order strides");
	if (g_failures == 0) std::printf("step_blocks: every check passed\n");
	return g_failures == 0 ? 0 : 1;
}
