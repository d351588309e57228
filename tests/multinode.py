"""A multi-node Slurm cluster on one machine, and what its jobs' workers saw.

:func:`start_cluster` builds, as root, one Linux network namespace per node on a private
bridge, with its own host name (UTS namespace) and ``/etc/hosts`` (a bind mount in a private
mount namespace), a ``slurmd`` per node and ``slurmctld`` in a namespace of its own; ``sbatch``
runs in the root namespace, the "login node" (``docs/slurm.md``, section "Testing without a
cluster"; facts in the design notes, "Multi-node Slurm on one machine"). Every daemon is
stopped by PID, then the namespaces and the bridge are deleted. The subnet is one that no
address or route of this machine overlaps; names carry this process's PID and a letter per
cluster, so concurrent test sessions, and clusters of one session, do not meet.

Loaded by the Dask workers of a job (named in ``distributed.worker.preload`` of the dask
configuration where the job script is written; :data:`TRANSFER_LOG_DIR` in their environment),
the module also records every key that enters a worker's memory, and from where: a line per key
in ``<dir>/keys-<host>-<pid>.jsonl`` (:func:`read_key_log`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import os
import re
import signal
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STARTUP = 120  # conftest.STARTUP; not imported: this file is also a Dask worker preload
TRANSFER_LOG_DIR = "DEISA_TEST_KEY_LOG_DIR"
INTERFACE = "deisa0"  # every node's interface on the cluster network
CPUS_PER_NODE = 8  # declared to Slurm (SlurmdParameters=config_overrides): not the real count
_STARTED = itertools.count()  # clusters started by this process


class ClusterUnavailableError(RuntimeError):
    """The machine cannot host the cluster (no root, no namespaces, no Slurm); the reason."""


# Slurm settings shared by this cluster and the one-node cluster of tests/test_slurm.py:
# no accounting, no cgroups, root everywhere, CPUs as declared.
SLURM_POLICY = """\
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
"""

SLURM_CONF = (
    """\
ClusterName=deisamulti
SlurmctldHost=ctl({ctl_address})
"""
    + SLURM_POLICY
    + """\
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmdPidFile={root}/slurmd-%n.pid
SlurmdLogFile={root}/slurmd-%n.log
TmpFS={root}/tmp/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmctldDebug=info
SlurmdDebug=info
{node_lines}
PartitionName=debug Nodes={node_names} Default=YES MaxTime=INFINITE State=UP
"""
)


@dataclass
class Cluster:
    """A running namespace cluster: ``nodes[i]`` is node ``i`` of a job that takes them all."""

    root: Path
    env: dict[str, str]
    nodes: list[str]
    addresses: dict[str, str]  # node (and "ctl") -> its address on the cluster network
    interface: str = INTERFACE
    bridge: str = ""
    namespaces: list[str] = field(default_factory=list)
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(self, *cmd: str, timeout: float = STARTUP) -> subprocess.CompletedProcess[str]:
        """A Slurm command from the login node (the root namespace)."""
        return subprocess.run(
            list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def node_of(self, address: str) -> str:
        """The node whose address ``address`` (``10.1.2.11`` or ``tcp://10.1.2.11:4000``) is."""
        host = re.sub(r"^\w+://", "", address).rsplit(":", 1)[0]
        return next(node for node, ip in self.addresses.items() if ip == host)

    def set_link(self, node: str, up: bool) -> None:
        """Bring ``node``'s interface on the cluster network down (a lost node: no RST, no
        FIN, packets to and from it vanish) or up again; its processes keep running."""
        namespace = next(ns for ns in self.namespaces if ns.endswith(f"-{node}"))
        _ip("-n", namespace, "link", "set", self.interface, "up" if up else "down")

    def node_state(self, node: str) -> str:
        """``node``'s state as ``sinfo`` reports it (``idle``, ``allocated``, ``down*``...)."""
        return self.run("sinfo", "-h", "-n", node, "-o", "%T").stdout.strip()

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.root.glob("*.log"))
        )

    def stop(self) -> None:
        """Stop every daemon by PID, then delete the namespaces and the bridge."""
        for proc in reversed(self.daemons):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.daemons:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        for namespace in self.namespaces:  # what the jobs left there (a lost node's tasks)
            for pid in _ip("netns", "pids", namespace, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            _ip("netns", "delete", namespace, check=False)
        if self.bridge:
            _ip("link", "delete", self.bridge, check=False)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise ClusterUnavailableError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.0.0.0/8 that no address or route of this machine overlaps."""
    taken = []
    for args in (("-4", "-o", "addr", "show"), ("-4", "route", "show", "table", "all")):
        for line in _ip(*args).stdout.splitlines():
            for word in re.findall(r"\d+\.\d+\.\d+\.\d+(?:/\d+)?", line):
                taken.append(ipaddress.ip_network(word, strict=False))
    start = os.getpid() % 200
    for offset in range(200):
        subnet = ipaddress.ip_network(f"10.{100 + (start + offset) % 150}.{os.getpid() % 250}.0/24")
        if not any(subnet.overlaps(net) for net in taken if net.prefixlen > 0):
            return subnet
    raise ClusterUnavailableError("no free /24 in 10.100.0.0/14 for the cluster network")


def start_cluster(
    root: Path, n_nodes: int, *, ready_timeout: float = STARTUP, slurm_conf: str = ""
) -> Cluster:
    """Start a cluster of ``n_nodes`` nodes (``node0``...) under ``root``; ``slurm_conf``:
    more ``slurm.conf`` lines (``SlurmdTimeout=10``: a node silent for 10 s is DOWN).

    Raises
    ------
    ClusterUnavailableError
        The reason it cannot start (everything already started is stopped).
    """
    missing = [
        b for b in ("slurmctld", "slurmd", "sbatch", "ip", "nsenter", "unshare") if not _which(b)
    ]
    if missing:
        raise ClusterUnavailableError(f"not installed: {', '.join(missing)}")
    if os.geteuid() != 0:
        raise ClusterUnavailableError("network namespaces and slurmd need root")
    tag = f"{os.getpid()}{chr(ord('a') + next(_STARTED) % 26)}"  # apart from this PID's others
    subnet = _free_subnet()
    hosts = list(subnet.hosts())
    nodes = [f"node{i}" for i in range(n_nodes)]
    addresses = {"ctl": str(hosts[9])} | {node: str(hosts[10 + i]) for i, node in enumerate(nodes)}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = str(root / "slurm.conf")
    cluster = Cluster(root, env, nodes, addresses, bridge=f"dbr{tag}")
    try:
        _network(cluster, subnet, tag)
        for sub in ("state", "spool", "tmp"):
            (root / sub).mkdir(exist_ok=True)
        for node in nodes:
            (root / "spool" / node).mkdir(exist_ok=True)
            (root / "tmp" / node).mkdir(exist_ok=True)
        (root / "hosts").write_text(
            "127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in addresses.items())
        )
        node_lines = "\n".join(
            f"NodeName={node} NodeAddr={addresses[node]} NodeHostname={node} "
            f"CPUs={CPUS_PER_NODE} State=UNKNOWN"
            for node in nodes
        )
        (root / "slurm.conf").write_text(
            SLURM_CONF.format(
                ctl_address=addresses["ctl"],
                root=root,
                node_lines=node_lines,
                node_names=",".join(nodes),
            )
            + slurm_conf
        )
        _daemon(cluster, "ctl", ["slurmctld", "-D", "-c", "-i", "-f", env["SLURM_CONF"]])
        for node in nodes:
            _daemon(cluster, node, ["slurmd", "-D", "-N", node, "-f", env["SLURM_CONF"]])
        _wait_ready(cluster, ready_timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _which(binary: str) -> bool:
    from shutil import which

    return which(binary) is not None


def _network(cluster: Cluster, subnet: ipaddress.IPv4Network, tag: str) -> None:
    """The bridge (the login node's address: the subnet's first) and a namespace per node."""
    prefix = subnet.prefixlen
    _ip("link", "add", cluster.bridge, "type", "bridge")
    _ip("addr", "add", f"{next(subnet.hosts())}/{prefix}", "dev", cluster.bridge)
    _ip("link", "set", cluster.bridge, "up")
    for i, (name, address) in enumerate(cluster.addresses.items()):
        namespace = f"deisa{tag}-{name}"
        _ip("netns", "add", namespace)
        cluster.namespaces.append(namespace)
        outside = f"dv{tag}-{i}"
        _ip("link", "add", outside, "type", "veth", "peer", "name", INTERFACE, "netns", namespace)
        _ip("link", "set", outside, "master", cluster.bridge, "up")
        _ip("-n", namespace, "addr", "add", f"{address}/{prefix}", "dev", INTERFACE)
        _ip("-n", namespace, "link", "set", INTERFACE, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")


def _daemon(cluster: Cluster, name: str, command: Sequence[str]) -> None:
    """``command`` in the namespace of ``name``, with its host name and /etc/hosts.

    Not ``ip netns exec``: it remounts /sys, hiding /sys/fs/cgroup, and slurmd then fails to
    initialize its cgroup plugin. nsenter, unshare and sh all exec: the PID is the daemon's.
    """
    namespace = next(ns for ns in cluster.namespaces if ns.endswith(f"-{name}"))
    enter = ["nsenter", f"--net=/run/netns/{namespace}", "unshare", "--mount", "--uts"]
    script = (
        f"mount --bind {cluster.root / 'hosts'} /etc/hosts && hostname {name} && "
        f"exec {' '.join(command)}"
    )
    with open(cluster.root / f"{name}.stdout.log", "wb") as out:
        cluster.daemons.append(
            subprocess.Popen(
                [*enter, "sh", "-c", script],
                env=cluster.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )


def _wait_ready(cluster: Cluster, timeout: float) -> None:
    from distributed.utils_test import poll_for  # here: the workers preload this module

    states = ""

    def idle() -> bool:
        nonlocal states
        if any(d.poll() is not None for d in cluster.daemons):
            raise ClusterUnavailableError(f"a Slurm daemon exited at start-up:\n{cluster.logs()}")
        info = cluster.run("sinfo", "-h", "-N", "-o", "%N %T", timeout=STARTUP)
        states = info.stdout.strip()
        idle = [line.split()[0] for line in states.splitlines() if line.endswith(" idle")]
        return info.returncode == 0 and sorted(idle) == sorted(cluster.nodes)

    def not_idle() -> None:
        raise ClusterUnavailableError(
            f"the nodes were not idle after {timeout:g} s ({states!r}):\n{cluster.logs()}"
        )

    poll_for(idle, timeout, not_idle, period=0.5)


# -- in the job's Dask workers (preload) ----------------------------------------------------------


def read_key_log(directory: Path) -> list[dict[str, Any]]:
    """Every record of the workers' key logs under ``directory``."""
    records = []
    for path in sorted(directory.glob("keys-*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line]
    return records


def _jsonable_key(key: Any) -> Any:
    return [_jsonable_key(k) for k in key] if isinstance(key, tuple) else str(key)


def dask_setup(worker: Any) -> None:
    """Preload hook: log each key entering this worker's memory (``start`` is ``"flight"``
    for a fetch from another worker) with the worker's incoming-transfer counter."""
    import numpy as np
    from distributed.diagnostics.plugin import WorkerPlugin

    from deisa_simulation.heat import block_checksum

    directory = os.environ.get(TRANSFER_LOG_DIR)
    if not directory:
        return
    path = Path(directory) / f"keys-{socket.gethostname()}-{os.getpid()}.jsonl"

    class KeyLog(WorkerPlugin):
        def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
            if finish != "memory":
                return
            record = {
                "worker": worker.address,
                "host": socket.gethostname(),
                "key": _jsonable_key(key),
                "start": start,
                "incoming_total": int(worker.state.transfer_incoming_count_total),
            }
            value = worker.data.get(key) if key in worker.data else None
            if isinstance(value, np.ndarray):
                record["checksum"] = block_checksum(value)
            with open(path, "a") as out:
                out.write(json.dumps(record) + "\n")

    worker.plugins["deisa-test-key-log"] = KeyLog()
