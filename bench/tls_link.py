"""TLS against plain TCP where it matters: blocks sent to a worker on another node over a link
of 10 or 25 Gb/s (issue 43, item 9).

    python -m bench.tls_link --out results/          # as root; ~3 minutes on 2 cores

Two Linux network namespaces stand for two nodes, joined by a veth pair whose two ends are
shaped with ``tc`` (a token bucket, ``tbf``, at each ``--rates`` value in Gb/s; ``0``: the veth
unshaped). In the "worker node" run two ``dask scheduler``s and their ``--workers`` ``dask
worker``s, as ``deisa-run`` starts them (:mod:`deisa.launcher.dask_processes`' command lines,
on the namespace's address instead of loopback): one cluster over ``tcp://``, one over
``tls://`` only, with fresh credentials (``deisa-run``'s: EC P-256, 0600 files in a 0700
directory, removed at the end). In the "simulation node", ``mpirun -n --ranks`` runs
:mod:`bench._tls_link_rank`: each rank publishes a block of each ``--sizes`` MiB with a
``Bridge`` per cluster (``mode="sync"``, ``transport="tcp"``: the path to a worker on another
node; on one node the Bridge sends by shared memory, without TLS), the two protocols taking
turns at every step so that both see the same load; rank 0 takes every step with an Adapter so
the workers' memory is freed. Bandwidth: ``ranks * size`` over the median step, from a barrier
before the publishes to a barrier after them.

Nothing of this is reachable from outside the machine: the namespaces have no other interface
and no route; the plain-TCP cluster exists only as the comparison.

Target (issue 43): TLS costs at most 15 % of TCP's bandwidth at 10 Gb/s (every size); the other
rates are reported. Kernel TLS (``ssl.OP_ENABLE_KTLS``, Python >= 3.12, and the kernel's ``tls``
ULP) is probed and recorded: where both exist, Python's ``ssl`` can hand the record layer to the
kernel. Writes ``tls_link.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench._common import (
    PINS,
    MiB,
    TLSFiles,
    child_env,
    finish,
    loadavg,
    median,
    table,
    tls_credentials,
)

os.environ.update(PINS)

LANES = ("tcp", "tls")
TARGET_RATE = 10  # Gb/s: where the 15 % target applies
TARGET = 0.15
STARTUP = 120.0
SENDER, RECEIVER = "10.77.43.1", "10.77.43.2"  # inside private namespaces: nothing else sees them


def kernel_tls() -> dict[str, Any]:
    """What kernel TLS needs here: Python's ``ssl.OP_ENABLE_KTLS`` (3.12+) and the kernel's
    ``tls`` upper-layer protocol (``TCP_ULP``; ``CONFIG_TLS``, built in or the ``tls`` module)."""
    import ssl

    probe = socket.socket()
    try:
        probe.bind(("127.0.0.1", 0))
        probe.listen()
        with socket.create_connection(probe.getsockname()) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, 31, b"tls")  # TCP_ULP
        ulp = "available"
    except OSError as exc:
        ulp = f"absent ({exc.strerror})"
    finally:
        probe.close()
    return {
        "python": sys.version.split()[0],
        "ssl.OP_ENABLE_KTLS": hasattr(ssl, "OP_ENABLE_KTLS"),
        "kernel tls ULP": ulp,
        "openssl": ssl.OPENSSL_VERSION,
    }


def _run(*cmd: str) -> None:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip()}")


@contextmanager
def two_nodes() -> Iterator[tuple[str, str, str, str]]:
    """Two network namespaces joined by a veth pair; ``(sender ns, receiver ns, sender
    interface, receiver interface)``; both deleted at the end (and the pair with them)."""
    tag = f"{os.getpid() % 100000}"
    names = (f"dtls{tag}s", f"dtls{tag}r")
    ends = (f"vtls{tag}s", f"vtls{tag}r")
    try:
        for ns in names:
            _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
        for ns, end, address in zip(names, ends, (SENDER, RECEIVER), strict=True):
            _run("ip", "link", "set", end, "netns", ns)
            _run("ip", "-n", ns, "addr", "add", f"{address}/30", "dev", end)
            _run("ip", "-n", ns, "link", "set", end, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        yield names[0], names[1], ends[0], ends[1]
    finally:
        for ns in names:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=60)


def shape(names: tuple[str, str], ends: tuple[str, str], gbit: float) -> str:
    """Both ends of the link at ``gbit`` Gb/s (a tbf: burst of 1 ms at that rate, at least
    1 MiB; 100 ms of queue); ``0``: no qdisc. The qdisc's description."""
    for ns, end in zip(names, ends, strict=True):
        subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", end, "root"],
                       capture_output=True, timeout=60)  # fmt: skip
        if gbit:
            burst = max(MiB, int(gbit * 1e9 / 8 / 1000))
            _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", end, "root", "tbf",
                 "rate", f"{gbit}gbit", "burst", str(burst), "latency", "100ms")  # fmt: skip
    return f"tbf rate {gbit}gbit" if gbit else "veth, unshaped"


def start_cluster(
    ns: str, lane: str, workers: int, tls: TLSFiles | None, workdir: Path, stack: ExitStack
) -> tuple[Path, list[int]]:
    """A scheduler and ``workers`` workers in namespace ``ns`` on :data:`RECEIVER`, with the
    command lines ``deisa-run`` gives them; their scheduler file (once written) and the
    workers' PIDs."""
    from deisa.launcher.dask_processes import LOOPBACK, scheduler_command, worker_command

    scheduler_file = workdir / f"scheduler-{lane}.json"
    commands = [scheduler_command(scheduler_file, credentials=tls)]
    commands += [worker_command(scheduler_file, i, local_dir=workdir, credentials=tls)
                 for i in range(workers)]  # fmt: skip
    env = private_env(workdir)
    pids = []
    for i, cmd in enumerate(commands):
        at = cmd.index("--host") + 1
        cmd[at] = RECEIVER if cmd[at] == LOOPBACK else cmd[at]
        log = (workdir / f"{lane}-{i}.log").open("wb")
        stack.callback(log.close)
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, *cmd],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )  # fmt: skip (ip execs the command)
        stack.callback(_stop, proc)
        pids += [proc.pid] if i else []
        if i == 0:
            deadline = time.monotonic() + STARTUP
            while not scheduler_file.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the {lane} scheduler did not start: see {log.name}")
                time.sleep(0.1)
    return scheduler_file, pids


def private_env(workdir: Path) -> dict[str, str]:
    """:func:`child_env` with the run's private directory as every temporary directory (Dask's
    scratch space included), removed with it."""
    return child_env(TMPDIR=str(workdir), DASK_TEMPORARY_DIRECTORY=str(workdir))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def run_rate(
    sender_ns: str, spec: dict[str, Any], workdir: Path, ranks: int, gbit: float
) -> dict[str, Any]:
    """The ranks' run at one rate: their JSON."""
    spec = {**spec, "out": str(workdir / f"ranks-{gbit}.json")}
    spec_path = workdir / f"spec-{gbit}.json"
    spec_path.write_text(json.dumps(spec))
    cmd = ["ip", "netns", "exec", sender_ns, "mpirun", "--oversubscribe", "-n", str(ranks),
           sys.executable, "-P", "-m", "bench._tls_link_rank", str(spec_path)]  # fmt: skip
    proc = subprocess.run(cmd, env=private_env(workdir), capture_output=True, text=True,
                          timeout=3600)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"the ranks failed at {gbit} Gb/s:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(Path(spec["out"]).read_text())
    return result


def rows_of(rate: float, result: dict[str, Any], sizes: list[int]) -> list[dict[str, Any]]:
    """One record per size: each lane's median step, bandwidth and CPU, TLS's cost."""
    records = []
    for mib in sizes:
        record: dict[str, Any] = {"rate_gbit": rate, "mib": mib, "ranks": result["ranks"]}
        for lane in LANES:
            samples = [s for s in result["samples"] if s["lane"] == lane and s["mib"] == mib]
            wall = median([s["wall_s"] for s in samples])
            moved = result["ranks"] * mib * MiB
            record[lane] = {
                "step_s": wall,
                "gib_per_s": moved / wall / 2**30,
                "gbit_per_s": moved * 8 / wall / 1e9,
                # means: the workers' CPU is counted in clock ticks (10 ms)
                "rank0_cpu_s": sum(s["cpu_s"] for s in samples) / len(samples),
                "worker_cpu_s": sum(s["worker_cpu_s"] for s in samples) / len(samples),
                "steps": len(samples),
            }
        record["tls_cost"] = 1 - record["tls"]["gib_per_s"] / record["tcp"]["gib_per_s"]
        records.append(record)
    return records


def print_table(records: list[dict[str, Any]]) -> None:
    rows = [
        [r["rate_gbit"] or "none", r["mib"], r["ranks"],
         f"{r['tcp']['gbit_per_s']:.2f}", f"{r['tls']['gbit_per_s']:.2f}",
         f"{100 * r['tls_cost']:.1f} %",
         f"{1000 * r['tcp']['step_s']:.1f}", f"{1000 * r['tls']['step_s']:.1f}",
         f"{1000 * r['tcp']['rank0_cpu_s']:.0f} / {1000 * r['tcp']['worker_cpu_s']:.0f}",
         f"{1000 * r['tls']['rank0_cpu_s']:.0f} / {1000 * r['tls']['worker_cpu_s']:.0f}"]
        for r in records
    ]  # fmt: skip
    headers = ["link Gb/s", "MiB/rank", "ranks", "tcp Gb/s", "tls Gb/s", "TLS cost",
               "tcp step ms", "tls step ms", "tcp cpu ms rank0/worker",
               "tls cpu ms rank0/worker"]  # fmt: skip
    print(table(headers, rows), flush=True)


def targets_of(records: list[dict[str, Any]]) -> list[tuple[str, bool | None, str]]:
    at_target = [r for r in records if r["rate_gbit"] == TARGET_RATE]
    description = f"TLS costs <= {TARGET:.0%} of TCP's bandwidth at {TARGET_RATE} Gb/s"
    if not at_target:
        return [(description, None, f"--rates has no {TARGET_RATE}")]
    worst = max(at_target, key=lambda r: r["tls_cost"])
    measured = ", ".join(f"{r['mib']} MiB: {100 * r['tls_cost']:.1f} %" for r in at_target)
    return [(description, worst["tls_cost"] <= TARGET, measured)]


def refusal() -> str | None:
    """Why this machine cannot run the benchmark, or ``None``."""
    if os.geteuid() != 0:
        return "network namespaces and tc need root"
    missing = [b for b in ("ip", "tc", "mpirun") if shutil.which(b) is None]
    return f"not installed: {', '.join(missing)}" if missing else None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="10,25", help="link rates in Gb/s, comma-separated "
                        "(0: the veth unshaped); default 10,25")  # fmt: skip
    parser.add_argument("--sizes", default="16,64", help="MiB per rank and step; default 16,64")
    parser.add_argument("--ranks", type=int, default=1, help="MPI ranks publishing; default 1")
    parser.add_argument("--workers", type=int, default=1, help="Dask workers per protocol")
    parser.add_argument("--repeat", type=int, default=10, help="timed steps per size and rate")
    parser.add_argument("--quick", action="store_true", help="--sizes 16 --repeat 4")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeat = "16", 4
    args.rate_list = [float(r) if "." in r else int(r) for r in args.rates.split(",")]
    args.size_list = [int(s) for s in args.sizes.split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    reason = refusal()
    if reason is not None:
        print(f"bench.tls_link: cannot run here: {reason}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    ktls = kernel_tls()
    print(f"kernel TLS: {ktls}", flush=True)
    records: list[dict[str, Any]] = []
    links: dict[str, str] = {}
    load = [loadavg()]
    cipher: dict[str, Any] = {}
    with (
        tls_credentials(maker="deisa-run") as tls,
        tempfile.TemporaryDirectory(prefix="deisa-bench-link-") as tmp,
        two_nodes() as (sender, receiver, sender_end, receiver_end),
        ExitStack() as stack,
    ):
        workdir = Path(tmp)
        clusters = {lane: start_cluster(receiver, lane, args.workers,
                                        tls if lane == "tls" else None, workdir, stack)
                    for lane in LANES}  # fmt: skip
        spec = {"lanes": {lane: str(c[0]) for lane, c in clusters.items()},
                "worker_pids": {lane: c[1] for lane, c in clusters.items()},
                "tls_config": tls.config(), "sizes": args.size_list, "repeat": args.repeat,
                "workers": args.workers}  # fmt: skip
        for rate in args.rate_list:
            links[str(rate)] = shape((sender, receiver), (sender_end, receiver_end), rate)
            print(f"link: {links[str(rate)]} ...", flush=True)
            result = run_rate(sender, spec, workdir, args.ranks, rate)
            records += rows_of(rate, result, args.size_list)
            cipher = result["cipher"]
            load.append(loadavg())
    print_table(records)
    return finish(args.out, "tls_link", targets_of(records), records=records, links=links,
                  kernel_tls=ktls, loadavg=load, workers=args.workers, repeat=args.repeat,
                  cipher=cipher)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
