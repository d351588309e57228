"""2D explicit heat solver on an MPI Cartesian grid, publishing its field through a deisa Bridge.

The Python twin of ``simulation/heat.c``: the same configuration file, decomposition, initial
and boundary conditions and arithmetic, so both produce bitwise the same field. It is the
simulation used wherever PDI is absent.

Run it with::

    mpirun -np 4 python -m deisa_simulation.heat configs/simulation.yml \
        --scheduler-file scheduler.json

Physics: ``u_t = Δu`` with an explicit five-point stencil (``new = u + 0.2 * (((up + down) +
left) + right - 4u)``), a hot disc in the middle of a cold plate, and Dirichlet zero
temperature around the domain.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from deisa.bridge.arrays.decomposition import ArraySpec, even_split
from deisa.bridge.options import BridgeOptionError, BridgeOptions
from deisa.wire import SCHEDULER_FILE_ENV

logger = logging.getLogger("deisa_simulation.heat")

DIFFUSION = 0.2  # explicit scheme is stable for DIFFUSION <= 0.25


@dataclass(frozen=True)
class HeatConfig:
    """Settings of a heat run, as in ``configs/simulation.yml``.

    Parameters
    ----------
    global_size
        Rows and columns of the whole field.
    process_grid
        Rows and columns of the MPI Cartesian grid; their product is the number of ranks.
    steps
        Number of outputs (the length of the time axis).
    output_period
        Solver iterations between two outputs.
    """

    global_size: tuple[int, int] = (64, 64)
    process_grid: tuple[int, int] = (2, 2)
    steps: int = 10
    output_period: int = 5

    def __post_init__(self) -> None:
        for key in ("global_size", "process_grid"):
            value = getattr(self, key)
            if (
                not isinstance(value, (list, tuple))
                or len(value) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
            ):
                raise ValueError(f"{key}: expected two positive integers, got {value!r}")
            object.__setattr__(self, key, tuple(value))
        for key in ("steps", "output_period"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{key}: expected a positive integer, got {value!r}")
        for axis in range(2):
            if self.process_grid[axis] > self.global_size[axis]:
                raise ValueError(
                    f"process_grid: {self.process_grid[axis]} ranks along axis {axis} for only "
                    f"{self.global_size[axis]} cells (global_size)"
                )

    @classmethod
    def from_yaml(cls, path: str | Path) -> HeatConfig:
        """Read and check a configuration file; errors name the file and the key."""
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"{path}: cannot read the simulation configuration: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{path}: unknown key(s) {unknown}; valid keys are {sorted(known)}")
        try:
            return cls(**data)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc


class HeatSolver:
    """One rank's part of the heat field, with one layer of ghost cells.

    Parameters
    ----------
    config
        The run settings.
    comm
        mpi4py communicator of ``prod(config.process_grid)`` ranks.
    """

    def __init__(self, config: HeatConfig, comm: Any) -> None:
        from mpi4py import MPI

        nranks = comm.Get_size()
        if nranks != config.process_grid[0] * config.process_grid[1]:
            raise ValueError(
                f"process_grid {list(config.process_grid)} needs "
                f"{config.process_grid[0] * config.process_grid[1]} ranks, mpirun gave {nranks}"
            )
        self.config = config
        self.cart = comm.Create_cart(dims=list(config.process_grid), periods=[False, False])
        self.coords = tuple(self.cart.Get_coords(self.cart.Get_rank()))
        split = [
            even_split(config.global_size[a], config.process_grid[a], self.coords[a])
            for a in range(2)
        ]
        self.start = (split[0][0], split[1][0])
        self.shape = (split[0][1], split[1][1])
        self.neighbours = {
            "up": self.cart.Shift(0, 1)[0],
            "down": self.cart.Shift(0, 1)[1],
            "left": self.cart.Shift(1, 1)[0],
            "right": self.cart.Shift(1, 1)[1],
        }
        self._proc_null = MPI.PROC_NULL
        self.field = np.zeros((self.shape[0] + 2, self.shape[1] + 2))
        self.field[1:-1, 1:-1] = initial_field(config.global_size, self.start, self.shape)

    @property
    def interior(self) -> np.ndarray:
        """The rank's cells without ghosts: a strided view, not a copy."""
        return self.field[1:-1, 1:-1]

    def spec(self) -> ArraySpec:
        """This rank's block of the global field, for the Bridge."""
        return ArraySpec(self.field.dtype, self.config.global_size, self.start, self.shape)

    def exchange_ghosts(self) -> None:
        """Swap boundary rows and columns with the four neighbours (zero outside the domain)."""
        u, nb = self.field, self.neighbours
        recv_row = np.empty(u.shape[1] - 2)
        for send, recv, source, dest in (
            (1, -1, nb["down"], nb["up"]),
            (-2, 0, nb["up"], nb["down"]),
        ):
            self.cart.Sendrecv(
                np.ascontiguousarray(u[send, 1:-1]), dest, recvbuf=recv_row, source=source
            )
            if source != self._proc_null:
                u[recv, 1:-1] = recv_row
        recv_col = np.empty(u.shape[0] - 2)
        for send, recv, source, dest in (
            (1, -1, nb["right"], nb["left"]),
            (-2, 0, nb["left"], nb["right"]),
        ):
            self.cart.Sendrecv(
                np.ascontiguousarray(u[1:-1, send]), dest, recvbuf=recv_col, source=source
            )
            if source != self._proc_null:
                u[1:-1, recv] = recv_col

    def iterate(self) -> None:
        """One explicit time step, in the same operation order as the C solver."""
        self.exchange_ghosts()
        u = self.field
        centre = u[1:-1, 1:-1]
        up, down = u[:-2, 1:-1], u[2:, 1:-1]
        left, right = u[1:-1, :-2], u[1:-1, 2:]
        self.field[1:-1, 1:-1] = centre + DIFFUSION * (
            (((up + down) + left) + right) - 4.0 * centre
        )


def initial_field(
    global_size: Sequence[int], start: Sequence[int], shape: Sequence[int]
) -> np.ndarray:
    """A hot disc (1.0) of radius ``min(global_size)/4`` centred on a cold (0.0) plate."""
    gx = np.arange(start[0], start[0] + shape[0], dtype=float)[:, None]
    gy = np.arange(start[1], start[1] + shape[1], dtype=float)[None, :]
    radius = min(global_size) / 4.0
    d2 = (gx - 0.5 * global_size[0]) ** 2 + (gy - 0.5 * global_size[1]) ** 2
    return np.where(d2 < radius * radius, 1.0, 0.0)


def reference_field(config: HeatConfig, step: int) -> np.ndarray:
    """The whole field at output ``step``, computed serially (for tests and checks)."""
    u = np.zeros((config.global_size[0] + 2, config.global_size[1] + 2))
    u[1:-1, 1:-1] = initial_field(config.global_size, (0, 0), config.global_size)
    for _ in range((step + 1) * config.output_period):
        centre = u[1:-1, 1:-1]
        up, down, left, right = u[:-2, 1:-1], u[2:, 1:-1], u[1:-1, :-2], u[1:-1, 2:]
        u[1:-1, 1:-1] = centre + DIFFUSION * ((((up + down) + left) + right) - 4.0 * centre)
    return u[1:-1, 1:-1].copy()


def block_checksum(block: np.ndarray) -> str:
    """BLAKE2b digest of a block's values in C order (independent of its memory layout)."""
    return hashlib.blake2b(np.ascontiguousarray(block).tobytes(), digest_size=16).hexdigest()


@dataclass
class StepTiming:
    """What one rank spent on one output step; ``checksum`` is a BLAKE2 digest of the block."""

    step: int
    compute_s: float
    publish_s: float
    send_s: float
    nbytes: int
    start: tuple[int, int]
    checksum: str | None = None


def run(
    config: HeatConfig,
    comm: Any,
    *,
    scheduler_file: str | None,
    array: str = "gtemp",
    change_array: str | None = None,
    checksums: bool = False,
    options: BridgeOptions | None = None,
    stop_value: str | None = "stop",
    boxes: int = 1,
    **bridge_options: Any,
) -> list[StepTiming]:
    """Run the solver, publishing the field every ``output_period`` iterations.

    Without ``scheduler_file`` nothing is published (a run with no output, for comparisons).
    ``change_array``: also publish, under that name, the temperature change over the last
    iteration of each output (``0.2`` times the discrete Laplacian: minus the divergence of the
    heat flux), bitwise as the C solver's ``dtemp`` (``configs/heat_deisa.yml``).
    After each publication every rank reads the steering value ``stop_value``
    (:meth:`deisa.Bridge.get`, collective) and the run ends, closing the stream normally, once
    the analytics has set it true; ``None`` reads nothing.
    ``boxes`` above 1: each rank publishes ``array`` as that many boxes, bands of its block's
    rows (:func:`bands`: what a code of several boxes per rank sends; each step then carries
    its layout).
    ``options`` and ``bridge_options`` (any :class:`~deisa.BridgeOptions` field by name) go
    to the :class:`~deisa.Bridge`. Returns this rank's timings per output step.
    """
    from deisa.bridge import Bridge

    solver = HeatSolver(config, comm)
    bridge = None
    if scheduler_file is not None:
        arrays = {array: solver.spec()}
        if change_array is not None:
            arrays[change_array] = solver.spec()
        bridge = Bridge(
            scheduler_file,
            arrays,
            comm=solver.cart,
            options=options,
            **bridge_options,
        )
    timings = []
    try:
        for step in range(config.steps):
            t0 = time.perf_counter()
            for it in range(config.output_period):
                if change_array is not None and it == config.output_period - 1:
                    previous = solver.interior.copy()
                solver.iterate()
            t1 = time.perf_counter()
            send, nbytes = 0.0, 0
            if bridge is not None:
                if boxes > 1:
                    bridge.publish(array, bands(solver.interior, solver.start, boxes), step)
                else:
                    bridge.publish(array, solver.interior, step)
                send, nbytes = bridge.timings[-1].send_s, bridge.timings[-1].nbytes
                if change_array is not None:
                    bridge.publish(change_array, solver.interior - previous, step)
            digest = block_checksum(solver.interior) if checksums else None
            timings.append(
                StepTiming(
                    step, t1 - t0, time.perf_counter() - t1, send, nbytes, solver.start, digest
                )
            )
            if bridge is not None and stop_value is not None and bridge.get(stop_value, False):
                if comm.Get_rank() == 0:
                    logger.info(
                        "stopped after step %d of %d: %r set by the analytics",
                        step,
                        config.steps,
                        stop_value,
                    )
                break
    finally:
        if bridge is not None:
            bridge.close()
    return timings


def bands(block: np.ndarray, start: Sequence[int], boxes: int) -> list[tuple[Any, np.ndarray]]:
    """``block`` (at ``start`` in the global array) as ``boxes`` boxes of whole rows, in the
    ``(start, array)`` form of :meth:`deisa.Bridge.publish` (fewer where the block has fewer
    rows)."""
    cuts = np.linspace(0, block.shape[0], boxes + 1).astype(int)
    return [
        ((start[0] + int(a), *start[1:]), block[a:b]) for a, b in itertools.pairwise(cuts) if b > a
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deisa_simulation.heat", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("config", help="simulation YAML (configs/simulation.yml)")
    parser.add_argument(
        "--scheduler-file",
        default=os.environ.get(SCHEDULER_FILE_ENV) or None,
        help=f"Dask scheduler file (default: ${SCHEDULER_FILE_ENV}, which deisa-run sets); "
        "without either, publish nothing",
    )
    parser.add_argument("--array", default="gtemp", help="name of the published array")
    parser.add_argument(
        "--change-array",
        help="also publish the temperature change over each output's last iteration under "
        "this name (the C solver's gdtemp)",
    )
    BridgeOptions.add_arguments(parser.add_argument_group("deisa Bridge options"))
    parser.add_argument("--timings", help="write every rank's per-step timings (JSON) here")
    parser.add_argument(
        "--stop-value",
        default="stop",
        help="steering value read after each publication: the run ends once the analytics sets "
        "it true (default: stop; '' reads none)",
    )
    parser.add_argument(
        "--checksums", action="store_true", help="record a checksum of every published block"
    )
    parser.add_argument(
        "--boxes", type=int, default=1,
        help="publish each rank's block as this many boxes (bands of rows; default 1: a block)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.boxes < 1:
        parser.error(f"--boxes {args.boxes}: give 1 or more")
    try:
        options = BridgeOptions.from_namespace(args)
    except BridgeOptionError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    config = HeatConfig.from_yaml(args.config)
    timings = run(
        config,
        comm,
        scheduler_file=args.scheduler_file,
        array=args.array,
        change_array=args.change_array,
        checksums=args.checksums,
        options=options,
        stop_value=args.stop_value or None,
        boxes=args.boxes,
    )
    per_rank = comm.gather([asdict(t) for t in timings], root=0)
    if comm.Get_rank() == 0 and args.timings:
        # written aside then renamed: whoever waits for the file reads it whole
        path = Path(args.timings)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps({"config": asdict(config), "ranks": per_rank}))
        partial.replace(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
