/* Step_blocks (plugin/adios2/step_blocks.h): what each declared array publishes of a step's
 * blocks (a fixed array's block as declared, else boxes: several, moved, none, in another shape,
 * joined), the variables first Put in a step, the errors naming the variable and the step; a
 * block that is a sub-box of the code's buffer (a memory selection, memory_selection.h),
 * described strided and copied row by row.  Run by CTest (deisa_step_blocks) and
 * tests/test_adios2.py. */

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "memory_selection.h"
#include "step_blocks.h"

using deisa::Declared_array;
using deisa::Memory_box;
using deisa::Path;
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

/// A Step_blocks whose arrays are U (fixed, this rank's block at (10, 0)), P (moving) and the value `step'
Step_blocks declared()
{
	Step_blocks blocks;
	blocks.add(block("U", {10, 0}, {3, 8}), 0);
	blocks.add(block("P", {0, 0}, {3, 8}), 0);
	blocks.add(block("P", {3, 0}, {2, 8}), 0);
	blocks.add(block("step", {0}, {1}, true), 0);
	check(blocks.new_names() == vector<string>({"P", "U", "step"}), "the new variables, by name");
	Declared_array u{"U", "float64", Path::fixed, {13, 10}, {10, 0}, {3, 8}};
	Declared_array p{"P", "float64", Path::moving, {}, {}, {}};
	Declared_array step{"step", "float64", Path::value, {1}, {0}, {1}};
	blocks.declare({u, step});
	blocks.declare({p});
	check(blocks.new_names().empty(), "nothing new once declared");
	check(blocks.arrays().size() == 3 && blocks.arrays()[0].name == "P" && blocks.arrays()[2].name == "step", "arrays by name");
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
	Step_blocks blocks = declared();
	const auto& u = blocks.arrays()[1];
	const auto& p = blocks.arrays()[0];
	const auto& value = blocks.arrays()[2];

	blocks.add(block("U", {10, 0}, {3, 8}), 1);
	blocks.add(block("step", {0}, {1}, true), 1);
	auto same = blocks.publication(u);
	check(same.plain == blocks.of("U").front() && same.boxes.empty(), "a fixed array's block as declared: today's path");
	check(blocks.publication(value).plain == blocks.of("step").front(), "a value: its block");
	auto none = blocks.publication(p);
	check(none.plain == nullptr && none.boxes.empty() && none.shape.empty(), "a moving array not Put: no box, no shape");
	string twice = error_of([&] { blocks.add(block("step", {0}, {1}, true), 1); });
	check(has(twice, "single value `step' Put twice by this rank in step 1"), "a value Put twice: " + twice);

	blocks.clear();
	blocks.add(block("U", {10, 0}, {2, 8}), 2);
	blocks.add(block("U", {12, 0}, {1, 8}), 2);
	auto moved = blocks.publication(u);
	check(
		moved.plain == nullptr && moved.boxes.size() == 2 && moved.boxes[1]->start == vector<long>({12, 0}) && moved.shape == vector<long>({13, 10}),
		"a fixed array's step in two boxes: boxes, with the shape"
	);
	Step_block grown = block("P", {0, 0}, {4, 10});
	grown.global_shape = {20, 10};
	blocks.add(grown, 2);
	Step_block empty = block("P", {4, 0}, {0, 10});
	empty.global_shape = {20, 10};
	blocks.add(empty, 2);
	auto resized = blocks.publication(p);
	check(resized.boxes.size() == 1 && resized.shape == vector<long>({20, 10}), "SetShape: the step's shape; an empty box left out");
	Step_block other = block("P", {0, 0}, {1, 1});
	string reshaped = error_of([&] { blocks.add(other, 2); });
	check(has(reshaped, "variable `P' Put with the shape {13, 10} after {20, 10} by this rank in step 2"), "two shapes: " + reshaped);
	blocks.add(block("W", {0, 0}, {3, 8}), 2);
	check(blocks.new_names() == vector<string>({"W"}), "a variable first Put in a later step");

	blocks.clear();
	Step_block joined = block("J", {}, {5, 3});
	joined.joined_axis = 0;
	joined.global_shape = {0, 3};
	blocks.add(joined, 3);
	blocks.add(joined, 3);
	blocks.declare({Declared_array{"J", "float64", Path::moving, {}, {}, {}}});
	auto rows = blocks.publication(blocks.arrays()[0]);
	check(rows.boxes.size() == 2 && rows.shape.empty() && rows.boxes[0]->start.empty(), "a joined array: boxes, no shape, no start");

	Step_block copied = block("U", {0, 0}, {1, 1});
	copied.keep_copy();
	check(copied.copy.size() == 8 && copied.data == copied.copy.data(), "keep_copy points at the copy");
	const auto strided = block("U", {0, 0}, {3, 8}).strided(8);
	check(strided.strides == vector<long>({64, 8}), "C-order strides");
	if (g_failures == 0) std::printf("step_blocks: every check passed\n");
	return g_failures == 0 ? 0 : 1;
}
