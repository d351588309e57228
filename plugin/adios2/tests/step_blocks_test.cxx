/* Step_blocks (plugin/adios2/step_blocks.h): the arrays declared from the first step, and each
 * later step checked against them, every error naming the variable, the step and what differs;
 * a block that is a sub-box of the code's buffer (a memory selection, memory_selection.h),
 * described strided and copied row by row.  Run by CTest (deisa_step_blocks) and
 * tests/test_adios2.py. */

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "memory_selection.h"
#include "step_blocks.h"

using deisa::Memory_box;
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

/// A block of 3 x 4 at (1, 2) in a buffer of 6 x 7 with ghost cells (memory_selection.h)
void check_memory_selection()
{
	vector<double> buffer(6 * 7);
	for (size_t at = 0; at < buffer.size(); ++at) {
		buffer[at] = static_cast<double>(at); // element (i, j) holds i * 7 + j
	}
	long offset = -1;
	Step_block sub = block("U", {0, 0}, {3, 4});
	deisa::select_memory("U", Memory_box{{1, 2}, {6, 7}}, sub.shape, offset, sub.memory_strides);
	check(offset == 9 && sub.memory_strides == vector<long>({7, 1}), "the block's offset and the buffer's strides");
	sub.data = buffer.data() + offset;
	sub.nbytes = 3 * 4 * sizeof(double);
	check(sub.strided(8).strides == vector<long>({56, 8}), "a deferred Put's view: the buffer's strides");
	sub.keep_copy();
	const auto* copied = reinterpret_cast<const double*>(sub.copy.data());
	bool rows = sub.copy.size() == sub.nbytes;
	for (size_t i = 0; rows && i < 3; ++i) {
		for (size_t j = 0; j < 4; ++j) {
			rows = rows && copied[i * 4 + j] == static_cast<double>((1 + i) * 7 + 2 + j);
		}
	}
	check(rows && sub.data == sub.copy.data(), "keep_copy copies the sub-box, row by row");
	check(sub.strided(8).strides == vector<long>({32, 8}), "the copy is contiguous");

	Step_block line = block("V", {0}, {3});
	deisa::select_memory("V", Memory_box{{2}, {5}}, line.shape, offset, line.memory_strides);
	line.data = buffer.data() + offset;
	line.nbytes = 3 * sizeof(double);
	line.keep_copy();
	check(reinterpret_cast<const double*>(line.copy.data())[0] == 2.0 && line.copy.size() == 24, "one axis");

	vector<long> strides;
	string small = error_of([&] { deisa::select_memory("U", Memory_box{{1, 4}, {6, 7}}, {3, 4}, offset, strides); });
	check(
		has(small, "variable `U': its block (count {3, 4}) at memory start {1, 4} does not fit in its memory count {6, 7} (axis 1)"),
		"too small: " + small
	);
	string dims = error_of([&] { deisa::select_memory("U", Memory_box{{1}, {6}}, {3, 4}, offset, strides); });
	check(has(dims, "variable `U' has a memory selection of 1 dimensions for a block of 2"), "dimensions: " + dims);
}

} // namespace

int main()
{
	check_memory_selection();
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
