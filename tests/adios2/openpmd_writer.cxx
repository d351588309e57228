/* An MPI code that writes with openPMD-api, as WarpX and PIConGPU do: the openPMD test code of
 * the deisa ADIOS2 engine (tests/test_openpmd.py, docs/openpmd.md).
 *
 *   mpirun -np N deisa_openpmd_writer SERIES CONFIG ITERATIONS [--one-chunk] [--meshes-only]
 *
 * SERIES is the openPMD series' path (`out.bp'), CONFIG its openPMD JSON configuration, inline
 * or `@file.json' (the engine, the iteration encoding: the only thing a user changes to go in
 * situ), ITERATIONS how many iterations it writes, one after the other (Access::CREATE_LINEAR:
 * one ADIOS2 step per iteration with the variable-based encoding).  Each iteration has:
 *
 * - two meshes, E and B, each with components x, y and z (double, NX x NY x NZ, row-major):
 *   the domain is cut in 2 x N boxes as AMReX cuts it, box (i, r) rows ROWS[i] and the columns
 *   of rank r (2 + r % 3 of them), so that each rank stores two chunks per component;
 * - a species `electrons' with position and momentum (x, y, z), weighting (double), id
 *   (uint64) and a constant positionOffset: rank r has 4 + (7 r + 5 it) % 9 particles at
 *   iteration it (none for the last rank at iteration 1), so the species' count changes every
 *   iteration;
 * - the iteration's time and dt, the meshes' grid spacing, offset (which moves with the
 *   iterations, as a moving window does), units and the records' unit dimensions, as a PIC
 *   code gives them.
 *
 * With --one-chunk a rank stores its two boxes (one above the other) as one chunk, the same
 * array; with --meshes-only the species is left out: fixed arrays alone, one block per rank,
 * for the deisa engine's fixed path.
 *
 * Every value is a small dyadic rational (exact in double, whatever the order of the
 * operations): the test computes the same from the formulas below and compares bitwise.
 * An error is left uncaught: the code stops as an openPMD code does, with the what().
 */

#include <mpi.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <openPMD/openPMD.hpp>

namespace {

constexpr std::array<std::uint64_t, 2> ROWS{3, 5}; // the rows of the two boxes of a rank
constexpr std::uint64_t NX = ROWS[0] + ROWS[1];
constexpr std::uint64_t NZ = 6;
constexpr std::array<char const *, 3> AXES{"x", "y", "z"};

std::uint64_t columns(int rank)
{
	return 2 + rank % 3;
}

/// A mesh component's value at (a, b, k) of iteration `it': field 0 is E, 1 is B
double field_value(int it, int field, int component, std::uint64_t a, std::uint64_t b, std::uint64_t k, std::uint64_t ny)
{
	return it * 1e5 + field * 1e4 + component * 1e3 + static_cast<double>((a * ny + b) * NZ + k) * 0.5;
}

/// How many electrons rank `rank' has at iteration `it'
std::uint64_t particles(int rank, int nranks, int it)
{
	if (it == 1 && rank == nranks - 1) return 0;
	return 4 + (7 * rank + 5 * it) % 9;
}

void write_meshes(openPMD::Iteration& iteration, int it, int rank, int nranks, bool one_chunk, std::vector<std::vector<double>>& kept)
{
	std::uint64_t ny = 0, first_column = 0;
	for (int r = 0; r < nranks; ++r) {
		if (r == rank) first_column = ny;
		ny += columns(r);
	}
	char const * names[2] = {"E", "B"};
	for (int field = 0; field < 2; ++field) {
		openPMD::Mesh mesh = iteration.meshes[names[field]];
		mesh.setGeometry(openPMD::Mesh::Geometry::cartesian);
		mesh.setDataOrder(openPMD::Mesh::DataOrder::C);
		mesh.setAxisLabels({"x", "y", "z"});
		mesh.setGridSpacing(std::vector<double>{0.5, 0.25, 0.125});
		mesh.setGridGlobalOffset({-2.0 + 0.25 * it, -1.0, 0.0}); // a moving window along x
		mesh.setGridUnitSI(1e-6);
		if (field == 0) {
			mesh.setUnitDimension(
				{{openPMD::UnitDimension::L, 1}, {openPMD::UnitDimension::M, 1}, {openPMD::UnitDimension::T, -3}, {openPMD::UnitDimension::I, -1}}
			);
		} else {
			mesh.setUnitDimension({{openPMD::UnitDimension::M, 1}, {openPMD::UnitDimension::T, -2}, {openPMD::UnitDimension::I, -1}});
		}
		for (int c = 0; c < 3; ++c) {
			openPMD::MeshRecordComponent component = mesh[AXES[c]];
			component.resetDataset(openPMD::Dataset(openPMD::Datatype::DOUBLE, {NX, ny, NZ}));
			component.setPosition(std::vector<double>{0.5, 0.5, 0.5});
			component.setUnitSI(1.0);
			std::vector<std::uint64_t> chunks(ROWS.begin(), ROWS.end()); // two boxes, two chunks
			if (one_chunk) chunks = {NX}; // the rank's two boxes, one above the other, as one chunk
			std::uint64_t first_row = 0;
			for (std::uint64_t rows: chunks) {
				std::vector<double> box(rows * columns(rank) * NZ);
				std::size_t at = 0;
				for (std::uint64_t a = first_row; a < first_row + rows; ++a) {
					for (std::uint64_t b = first_column; b < first_column + columns(rank); ++b) {
						for (std::uint64_t k = 0; k < NZ; ++k) {
							box[at++] = field_value(it, field, c, a, b, k, ny);
						}
					}
				}
				kept.push_back(std::move(box)); // alive until the iteration is closed
				component.storeChunkRaw(kept.back().data(), {first_row, first_column, 0}, {rows, columns(rank), NZ});
				first_row += rows;
			}
		}
	}
}

void write_particles(
	openPMD::Iteration& iteration,
	int it,
	int rank,
	int nranks,
	std::vector<std::vector<double>>& kept,
	std::vector<std::vector<std::uint64_t>>& kept_ids
)
{
	std::uint64_t total = 0, offset = 0;
	for (int r = 0; r < nranks; ++r) {
		if (r == rank) offset = total;
		total += particles(r, nranks, it);
	}
	const std::uint64_t n = particles(rank, nranks, it);
	openPMD::ParticleSpecies electrons = iteration.particles["electrons"];
	const openPMD::Dataset doubles(openPMD::Datatype::DOUBLE, {total});
	for (int c = 0; c < 3; ++c) {
		std::vector<double> position(n), momentum(n);
		for (std::uint64_t p = 0; p < n; ++p) {
			const std::uint64_t g = offset + p;
			position[p] = it + 0.5 * g + 0.125 * c;
			momentum[p] = -(it + 0.25 * g) * (c + 1);
		}
		openPMD::RecordComponent x = electrons["position"][AXES[c]];
		x.resetDataset(doubles);
		x.setUnitSI(1e-6);
		openPMD::RecordComponent u = electrons["momentum"][AXES[c]];
		u.resetDataset(doubles);
		u.setUnitSI(2.73092449e-22);
		openPMD::RecordComponent offset_c = electrons["positionOffset"][AXES[c]];
		offset_c.resetDataset(doubles);
		offset_c.makeConstant(0.0);
		if (n > 0) { // a rank with no particle stores nothing, as WarpX does
			kept.push_back(std::move(position));
			x.storeChunkRaw(kept.back().data(), {offset}, {n});
			kept.push_back(std::move(momentum));
			u.storeChunkRaw(kept.back().data(), {offset}, {n});
		}
	}
	electrons["position"].setUnitDimension({{openPMD::UnitDimension::L, 1}});
	electrons["positionOffset"].setUnitDimension({{openPMD::UnitDimension::L, 1}});
	electrons["momentum"].setUnitDimension({{openPMD::UnitDimension::L, 1}, {openPMD::UnitDimension::M, 1}, {openPMD::UnitDimension::T, -1}});
	std::vector<double> weighting(n);
	std::vector<std::uint64_t> id(n);
	for (std::uint64_t p = 0; p < n; ++p) {
		weighting[p] = 1 + 0.5 * rank + 0.001953125 * p;
		id[p] = 1000 * static_cast<std::uint64_t>(rank) + p + 1;
	}
	openPMD::RecordComponent w = electrons["weighting"][openPMD::RecordComponent::SCALAR];
	w.resetDataset(doubles);
	w.setUnitSI(1.0);
	openPMD::RecordComponent ids = electrons["id"][openPMD::RecordComponent::SCALAR];
	ids.resetDataset(openPMD::Dataset(openPMD::Datatype::ULONG, {total}));
	if (n > 0) {
		kept.push_back(std::move(weighting));
		w.storeChunkRaw(kept.back().data(), {offset}, {n});
		kept_ids.push_back(std::move(id));
		ids.storeChunkRaw(kept_ids.back().data(), {offset}, {n});
	}
}

} // namespace

int main(int argc, char* argv[])
{
	MPI_Init(&argc, &argv);
	bool one_chunk = false, meshes_only = false;
	for (int i = 4; i < argc; ++i) {
		const std::string flag = argv[i];
		if (flag == "--one-chunk") {
			one_chunk = true;
		} else if (flag == "--meshes-only") {
			meshes_only = true;
		} else {
			argc = 0; // a usage error
		}
	}
	if (argc < 4) {
		std::fprintf(stderr, "usage: %s SERIES CONFIG ITERATIONS [--one-chunk] [--meshes-only]\n", argv[0]);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int rank = 0, nranks = 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	const int iterations = std::atoi(argv[3]);
	{
		openPMD::Series series(argv[1], openPMD::Access::CREATE_LINEAR, MPI_COMM_WORLD, argv[2]);
		series.setAuthor("deisa tests <openpmd_writer.cxx>");
		series.setSoftware("deisa_openpmd_writer", "1");
		openPMD::Snapshots snapshots = series.snapshots();
		for (int it = 0; it < iterations; ++it) {
			openPMD::Iteration iteration = snapshots[it];
			iteration.setTime(0.5 * it);
			iteration.setDt(0.5);
			iteration.setTimeUnitSI(1e-15);
			std::vector<std::vector<double>> kept; // the chunks, until the iteration is closed
			std::vector<std::vector<std::uint64_t>> kept_ids;
			write_meshes(iteration, it, rank, nranks, one_chunk, kept);
			if (!meshes_only) write_particles(iteration, it, rank, nranks, kept, kept_ids);
			iteration.close();
		}
		series.close();
	}
	if (rank == 0) std::printf("openpmd writer: %d ranks, %d iterations\n", nranks, iterations);
	MPI_Finalize();
	return 0;
}
