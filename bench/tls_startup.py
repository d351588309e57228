"""The start-up cost of TLS (issue #33): from launching a scheduler and its workers until a
Bridge is connected and has published, over TLS against plain TCP, taking turns.

    python -m bench.tls_startup --out results/          # ~1 minute on 2 cores; --quick: ~30 s

Per repetition, once over plain TCP and once over TLS (each goes first every other time):
``dask scheduler`` is launched on loopback (port 0, a scheduler file, no dashboard; with TLS,
``--protocol tls`` and the run's ``--tls-*`` files), then, once its file is there,
``--workers`` ``dask worker`` processes (loopback, no nanny, one thread), as ``deisa-run``'s
local mode does. This process then connects a ``Client`` and waits for the workers, connects a
``Bridge`` (one rank, ``COMM_SELF``, ``mode="sync"``: it connects in its constructor) and
publishes one 1 KiB step: every kind of connection a run opens (client to scheduler, worker to
scheduler, Bridge to scheduler and to a worker), each with its handshake. Each time is taken
from the scheduler's launch. A TLS repetition first makes fresh credentials (a key, a
self-signed certificate, 0600 files in a 0700 directory: ``bench._common.tls_credentials``),
timed apart: by default those ``deisa-run`` makes for a job (``--credentials deisa-run``: EC
P-256), and those of distributed's ``Security.temporary()`` (``--credentials temporary``: RSA
2048), the other made and timed too, not used. ``import cryptography`` is timed once, in a
warm-up pair of runs left out of the medians (it also pays this process's imports).
``handshake`` is one more ``Client`` connecting to the running scheduler: the handshake alone.

Target (issue #33): TLS costs <= 0.5 s of start-up: the credentials (import included) plus the
median over the repetitions of TLS's time to the first publish minus TCP's (the two runs of a
repetition are back to back: a drift of the load hits both). Writes ``tls_startup.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench._common import (
    PINS,
    TLSFiles,
    child_env,
    finish,
    loadavg,
    median,
    table,
    tls_credentials,
)

os.environ.update(PINS)

PHASES = ("scheduler file", "client", "workers", "bridge", "first publish")
PROTOCOLS = ("tcp", "tls")
TIMEOUT = 120.0  # seconds any phase may take on a loaded machine before the run fails


@contextlib.contextmanager
def dask_processes(
    workdir: Path, workers: int, tls: TLSFiles | None, times: dict[str, float], t0: float
) -> Iterator[Path]:
    """A scheduler and ``workers`` workers launched at ``t0`` as ``deisa-run`` launches them
    (:mod:`deisa.launcher.dask_processes`); their scheduler file. Times the file's
    appearance into ``times``; stops every process at the end."""
    from deisa.launcher.dask_processes import DaskProcesses

    cluster = DaskProcesses(
        workdir / "scheduler.json", log_dir=workdir, env=child_env(), credentials=tls
    )
    try:
        cluster.start_scheduler(TIMEOUT - (time.perf_counter() - t0), interval=0.005)
        times["scheduler file"] = time.perf_counter() - t0
        cluster.start_workers(workers, local_dir=workdir)
        yield cluster.scheduler_file
    finally:
        cluster.stop(timeout=30)


def start_once(workers: int, tls: TLSFiles | None) -> dict[str, float]:
    """One launch until the first publish; seconds since the scheduler's launch per phase."""
    import dask
    import numpy as np
    from distributed import Client
    from mpi4py import MPI

    from deisa import ArraySpec, Bridge

    security = tls.security() if tls is not None else None
    times: dict[str, float] = {}
    block = np.zeros((1, 128))
    spec = ArraySpec("float64", global_shape=block.shape, start=(0, 0), shape=block.shape)
    with (
        tempfile.TemporaryDirectory() as tmp,
        dask.config.set(tls.config() if tls is not None else {}),  # what the Bridge reads
    ):  # fmt: skip
        t0 = time.perf_counter()
        with dask_processes(Path(tmp), workers, tls, times, t0) as scheduler_file:
            client = Client(scheduler_file=str(scheduler_file), security=security, timeout=TIMEOUT)
            times["client"] = time.perf_counter() - t0
            with client:
                client.wait_for_workers(workers, timeout=TIMEOUT)
                times["workers"] = time.perf_counter() - t0
                with Bridge(str(scheduler_file), {"x": spec}, comm=MPI.COMM_SELF, mode="sync",
                            min_workers=workers, connect_timeout=TIMEOUT) as bridge:  # fmt: skip
                    times["bridge"] = time.perf_counter() - t0
                    bridge.publish("x", block, 0)
                    times["first publish"] = time.perf_counter() - t0
                t1 = time.perf_counter()
                with Client(client.scheduler.address, security=security, timeout=TIMEOUT):
                    times["handshake"] = time.perf_counter() - t1
    return times


MAKERS = ("deisa-run", "temporary")


def run_pair(r: int, workers: int, maker: str) -> dict[str, dict[str, float]]:
    """Repetition ``r``: TCP and TLS in turns, fresh credentials from ``maker`` for TLS
    (timed; the other maker's are made and timed too, and not used)."""
    out: dict[str, dict[str, float]] = {}
    for proto in PROTOCOLS if r % 2 == 0 else PROTOCOLS[::-1]:
        if proto == "tcp":
            out[proto] = start_once(workers, None)
            continue
        (other,) = set(MAKERS) - {maker}
        t0 = time.perf_counter()
        with tls_credentials(maker=other) as unused:
            other_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with tls_credentials(maker=maker) as tls:
            made = time.perf_counter() - t0
            out[proto] = start_once(workers, tls)
        out[proto].update({"credentials": made, f"credentials {other}": other_s,
                           "import_s": max(tls.import_s, unused.import_s)})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--credentials", choices=MAKERS, default="deisa-run",
                        help="deisa-run's (EC P-256) or distributed's Security.temporary (RSA "
                        "2048)")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="--repeats 3")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = min(args.repeats, 3)
    args.out.mkdir(parents=True, exist_ok=True)
    load_before = loadavg()
    print(f"start-up, scheduler + {args.workers} worker(s) until a Bridge has published, TLS "
          f"against TCP in turns: median of {args.repeats}; load {load_before}",
          flush=True)  # fmt: skip
    warm_up = run_pair(0, args.workers, args.credentials)
    import_s = warm_up["tls"]["import_s"]
    runs = []
    for r in range(args.repeats):
        runs.append(run_pair(r, args.workers, args.credentials))
        print(f"  {r}: first publish tcp {runs[-1]['tcp']['first publish']:.2f} s, tls "
              f"{runs[-1]['tls']['first publish']:.2f} s", flush=True)  # fmt: skip
    load_after = loadavg()
    med = {p: {k: median([run[p][k] for run in runs]) for k in runs[0][p]} for p in PROTOCOLS}
    rows = [[phase, *(f"{med[p][phase]:.3f}" for p in PROTOCOLS),
             f"{med['tls'][phase] - med['tcp'][phase]:+.3f}"]
            for phase in (*PHASES, "handshake")]  # fmt: skip
    credentials = med["tls"]["credentials"]
    rows.append([f"credentials, {args.credentials} (TLS only)", "", f"{credentials:.3f}",
                 f"{credentials:+.3f}"])  # fmt: skip
    (other,) = set(MAKERS) - {args.credentials}
    print(f"credentials {other} (made, not used): {med['tls'][f'credentials {other}']:.3f} s")
    print(table(["seconds since the scheduler's launch", "tcp", "tls", "tls - tcp"], rows))
    print(f"import cryptography (once, warm-up): {import_s:.3f} s")
    print(f"load {load_before} before, {load_after} after")
    paired = [run["tls"]["first publish"] - run["tcp"]["first publish"] for run in runs]
    extra = median(paired)
    print(f"TLS - TCP to the first publish, per repetition: "
          f"{', '.join(f'{d:+.3f}' for d in paired)} s (median {extra:+.3f})")  # fmt: skip
    cost = import_s + credentials + extra
    targets = [(
        "TLS costs <= 0.5 s of start-up (credentials + extra time to the first publish)",
        cost <= 0.5,
        f"{cost:.3f} s: import {import_s:.3f} + credentials {credentials:.3f} + "
        f"{extra:+.3f} s to the first publish (median of the repetitions' differences; medians "
        f"{med['tls']['first publish']:.3f} against {med['tcp']['first publish']:.3f} s)",
    )]  # fmt: skip
    return finish(
        args.out, "tls_startup", targets, workers=args.workers, repeats=args.repeats,
        credentials=args.credentials,
        load_before=load_before, load_after=load_after, import_cryptography_s=import_s,
        medians=med, warm_up=warm_up, runs=runs,
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
