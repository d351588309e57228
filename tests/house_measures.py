"""The measures of the house (issue 55, item 5), computed the same way before and after a change:

    PYTHONPATH=$PWD python3 tests/house_measures.py            # the static measures
    PYTHONPATH=$PWD python3 tests/house_measures.py --block     # and a block's way (real processes)

- **rooms, floors and arrows of deisa/bridge/**: its modules (sub-packages' included; and how
  many sit flat in deisa/bridge/, how many sub-packages, "wings", it has), the
  imports from one to another (an arrow, each import statement's target module counted once per
  module, at module level or inside a function alike), and the longest chain of arrows plus one
  (floors: a module that imports no other bridge module is on floor 1);
- **names defined twice**: the top-level classes, functions and constants (``UPPER_CASE``) of
  deisa/ defined (not imported) in more than one module;
- **docs paths that do not exist**: every ``path/with.ext`` or ``deisa.dotted.name`` that
  README.md, docs/*.md, plugin/pdi/README.md, bench/README.md or tests/README.md cite in backquotes,
  that names no file, module or name of the tree (a name: defined by its module, or taken from
  the module that defines it by an import or a lazy table; ``tests/test_layout.py`` holds it
  to 0);
  and the names cited with their file (```path.py`, `function```: every hop of the block's way
  in docs/architecture.md) that the file does not define (held to 0 too);
- **a block's way** (``--block``): a scheduler, one worker (preloading ``deisa.worker``), one
  rank under mpirun (``mode="async"``, shared memory: the defaults) and an analytics process,
  each traced with a profile hook that records, at every call into a file of the tree, the chain
  of the tree's files on the call's stack (``a > b > c``: who called whom, the frames of dask,
  distributed and asyncio left out; a resumed coroutine's stack holds the coroutines awaiting
  it). The rank publishes a step every 0.5 s until the analytics has read step 0, then waits
  (marks files) until the analytics has read every step published (one rank: rank 0 registers a
  step once its block is stored, without waiting for the next ``publish``); 1 s later, both
  idle, the measured window opens, the rank publishes step M, and the window closes when the
  analytics has summed step M: one step's way, nothing else running but the processes' own
  timers (distributed's heartbeats; their deisa calls, if any, are listed like the rest).
  Measured in it: the files called,
  and the returns: a call chain that re-enters a file it had left (``a > b > a``), each
  distinct ``(process, file left, file re-entered)`` counted once, whatever the timing (tasks
  that interleave on one event loop are not a chain; a poll that repeats is the same return);
  the same by folder (a sub-package, or deisa/wire/, is one room there). The chains with a
  return are listed (``block_return_chains``): where to cut. ``block_visit_returns`` counts
  wider, as each thread's calls come one after another (``a, b, a``: a file that calls two
  others in turn, hand-offs between tasks of one event loop), in the same quiet window.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "deisa"
DOCS = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "plugin" / "pdi" / "README.md",
    REPO / "bench" / "README.md",
    REPO / "tests" / "README.md",
]


def module_of(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The deisa modules and names ``path`` imports, resolved to dotted names (a package by its
    name: ``from .x import y`` in ``deisa/wire/__init__.py`` is ``deisa.wire.x``); every import
    statement, inside functions and under ``TYPE_CHECKING`` too. The one reading of imports for
    these measures and for tests/test_layout.py."""
    module = module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("deisa"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.startswith("deisa"):
                found.add(target)
                found.update(f"{target}.{a.name}" for a in node.names)
    return found


def bridge_graph() -> dict[str, set[str]]:
    paths = sorted((PACKAGE / "bridge").rglob("*.py"))
    modules = {module_of(p) for p in paths}
    return {
        module_of(p): {
            name if name in modules else name.rpartition(".")[0]
            for name in imports_of(p)
            if name in modules or name.rpartition(".")[0] in modules
        }
        - {module_of(p)}
        for p in paths
    }


def floors(graph: dict[str, set[str]]) -> int:
    depth: dict[str, int] = {}

    def visit(module: str, seen: frozenset[str]) -> int:
        if module not in depth:
            below = [visit(m, seen | {module}) for m in graph[module] if m not in seen]
            depth[module] = 1 + max(below, default=0)
        return depth[module]

    return max(visit(m, frozenset()) for m in graph)


def defined_twice() -> dict[str, list[str]]:
    """Top-level names (classes, functions, UPPER_CASE constants) defined in two modules or more."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        names = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper())
        for name in names - {"main", "__all__", "__getattr__", "__dir__", "TYPE_CHECKING"}:
            where[name].append(module_of(path))
    return {name: mods for name, mods in sorted(where.items()) if len(mods) > 1}


# what the docs cite in backquotes that is not a path or a module of this tree: a logger, a
# configuration namespace, files of other projects (deisa-core's tests, PDI's decl_hdf5)
NOT_OURS = {
    "deisa.adios2",  # the ADIOS2 engine's logger
    "deisa.slurm", "deisa.run",  # the launch configuration's namespaces
    "deisa.core", "deisa.dask", "deisa.dask.deisa", "deisa.dask.handshake", "deisa.dask.utils",
    "deisa.ray",  # deisa-core's packages and its backends' (docs/ecosystem.md)
    "test/test_api.py", "test_deisa.py", "test_fakecomm.py", "test_handshake.py", "test_mpi.py",
    "test_per_array_communicator.py",  # deisa-core's and deisa-dask's tests
    "attribute_op.cxx", "dataset_op.cxx", "file_op.cxx",  # PDI's decl_hdf5 plugin
    "example/simulation.yml",  # pdidev/deisa's
    "queues.py",
    "variable.py",  # distributed's, models of deisa/scheduler/
    "results/fragmentation.json",  # what a benchmark writes
}  # fmt: skip
CITED = re.compile(r"`([^`\s]+)`")
PATHLIKE = re.compile(r"^[\w./-]+/[\w.-]*\.(py|md|cxx|h|c|f90|yml|yaml|json|txt|toml|sh|in)$")
FILELIKE = re.compile(r"^[\w-]+\.(py|cxx|h)$")


def _module_file(dotted: str) -> Path | None:
    base = REPO.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _where_imported(path: Path, name: str) -> str | None:
    """The module ``path`` takes ``name`` from: an import (``from .x import name``), or its
    package's lazy table (``_LAZY = {"name": "x"}``, :mod:`deisa._lazy`); ``None``: neither."""
    module = module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(
            (a.asname or a.name) == name for a in node.names
        ):
            if not node.level:
                return node.module
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            return ".".join([*base, node.module] if node.module else base)
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_LAZY":
            lazy = eval(compile(ast.Expression(node.value), str(path), "eval"), {"dict": dict})
            if name in lazy:
                return f"{package}.{lazy[name]}"
    return None


def _name_exists(dotted: str) -> bool:
    """``deisa.x.y``: a module, or a name a module defines (``deisa.x.Class``, and
    ``deisa.x.Class.method``: a method or attribute its file defines), or takes from another
    module that defines it (an import, a package's lazy table: ``deisa.Bridge``)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = _module_file(".".join(parts[:cut]))
        if path is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        if defines(path, rest[0], top_level=True):
            return len(rest) == 1 or defines(path, rest[-1])
        source = _where_imported(path, rest[0])
        if source is None or not source.startswith("deisa") or source == ".".join(parts[:cut]):
            return False
        return _name_exists(".".join([source, *rest]))
    return False


def _file_exists(name: str, doc: Path) -> bool:
    for root in (REPO, doc.parent, REPO / "deisa", REPO / "plugin", REPO / "bench", REPO / "tests"):
        if (root / name).exists():
            return True
    return any(REPO.glob(f"**/{name}"))


def cited(doc: Path) -> list[str]:
    """What ``doc`` cites in backquotes that looks like a path or a deisa module or name."""
    found = []
    for text in CITED.findall(doc.read_text()):
        text = text.rstrip(".,:;)").split("::")[0].split(":")[0]
        text = re.sub(r"\(\)$", "", text)
        dotted = text.startswith("deisa.") and re.fullmatch(r"[\w.]+", text)
        if dotted or PATHLIKE.match(text) or FILELIKE.match(text):
            found.append(text)
    return found


def missing_in_docs(docs: list[Path] = DOCS) -> list[str]:
    """``doc: citation`` for each citation of ``docs`` that names nothing of this tree."""
    missing = []
    for doc in docs:
        for text in cited(doc):
            if text in NOT_OURS:
                continue
            is_file = PATHLIKE.match(text) or FILELIKE.match(text)
            if not (_file_exists(text, doc) if is_file else _name_exists(text)):
                missing.append(f"{doc.relative_to(REPO)}: {text}")
    return sorted(set(missing))


# a path cited with a name of it: "`path.py`, `name`", "`path.py`'s `Class`", "`path.py`
# (`name`)", or "`Class.method` (`path/to.py`": the block's way in docs/architecture.md is
# written so, each hop its file and its function
_PY = r"([\w./-]+\.py)"
_NAME = r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)(?:\(\))?"
PATH_AND_NAME = (
    re.compile(rf"`{_PY}`,\s+`{_NAME}`"),
    re.compile(rf"`{_PY}`'s\s+`{_NAME}`"),
    re.compile(rf"`{_PY}`\s+\(`{_NAME}`"),
)
NAME_AND_PATH = re.compile(r"`([A-Z]\w*\.\w+|[A-Z]\w*)(?:\(\))?`\s+\(`([\w.-]+/[\w./-]+\.py)`")


def cited_with_names(text: str) -> list[tuple[str, str]]:
    """The ``(path, name)`` pairs ``text`` cites (see :data:`PATH_AND_NAME`)."""
    pairs = [m.groups() for pattern in PATH_AND_NAME for m in pattern.finditer(text)]
    pairs += [(m.group(2), m.group(1)) for m in NAME_AND_PATH.finditer(text)]
    return [(path, name) for path, name in pairs if not re.search(r"\.(py|md|cxx|h)$", name)]


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """A module's statements, those under a top-level ``if``, ``try`` or ``with`` included."""
    found = []
    for node in body:
        found.append(node)
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(inner, list) and not isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            ):
                found += _top_level([n for n in inner if isinstance(n, ast.stmt)])
    return found


def defines(path: Path, name: str, top_level: bool = False) -> bool:
    """``path`` defines ``name`` (``Class.method``: the method, anywhere in the file): a class,
    a function or method, or a name assigned (``X = ...``, ``self.x = ...``); ``top_level``:
    at the module's top level only."""
    last = name.rpartition(".")[2]
    tree = ast.parse(path.read_text())
    for node in _top_level(tree.body) if top_level else ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == last:
                return True
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if getattr(target, "id", getattr(target, "attr", None)) == last:
                    return True
    return False


def _cited_file(name: str, doc: Path) -> Path | None:
    for root in (REPO, doc.parent, REPO / "deisa", REPO / "bench", REPO / "tests"):
        if (root / name).is_file():
            return root / name
    found = list(REPO.glob(f"**/{name}")) if "/" not in name else []
    return found[0] if len(found) == 1 else None


def names_missing_in_docs(docs: list[Path] = DOCS) -> list[str]:
    """``doc: path, name`` for each name a doc cites with a file that does not define it (or
    a file that is not there)."""
    missing = []
    for doc in docs:
        for path, name in cited_with_names(doc.read_text()):
            if path in NOT_OURS:
                continue
            file = _cited_file(path, doc)
            if file is None or not defines(file, name):
                missing.append(f"{doc.relative_to(REPO)}: {path}, {name}")
    return sorted(set(missing))


def static() -> dict[str, object]:
    graph = bridge_graph()
    twice = defined_twice()
    missing = missing_in_docs()
    return {
        "bridge_rooms": len(graph),
        "bridge_arrows": sum(len(v) for v in graph.values()),
        "bridge_floors": floors(graph),
        "bridge_flat_modules": len([p for p in (PACKAGE / "bridge").glob("*.py")]) - 1,
        "bridge_wings": len(list((PACKAGE / "bridge").glob("*/__init__.py"))),
        "names_defined_twice": len(twice),
        "names_defined_twice_list": {k: v for k, v in twice.items()},
        "docs_paths_missing": len(missing),
        "docs_paths_missing_list": missing,
        "docs_names_missing": len(names := names_missing_in_docs()),
        "docs_names_missing_list": names,
    }


# -- a block's way ------------------------------------------------------------------------------

TRACER = """
import os, sys, threading, time
_root = os.environ["HOUSE_TRACE_ROOT"]
_out = open(os.path.join(os.environ["HOUSE_TRACE_DIR"], f"{os.getpid()}.trace"), "a", buffering=1)
_argv = open("/proc/self/cmdline").read().split("\\0")
_name = next((a for a in _argv if a in ("scheduler", "worker")), None) or os.path.basename(
    next((a for a in _argv[1:] if a.endswith(".py")), "python"))

def _ours(f):
    return f.startswith(_root) and "/tests/" not in f

def _hook(frame, event, arg):
    if event == "call" and _ours(frame.f_code.co_filename):
        chain = []  # the tree's files on the stack, innermost first, one entry per run
        while frame is not None:
            f = frame.f_code.co_filename
            if _ours(f) and (not chain or chain[-1] != f[len(_root):]):
                chain.append(f[len(_root):])
            frame = frame.f_back
        thread = threading.current_thread().name.replace(" ", "_").replace("|", "_")
        _out.write(f"{time.time():.6f} {_name} {thread} {'>'.join(reversed(chain))}\\n")

if not os.environ.get("HOUSE_TRACE_OFF"):
    sys.setprofile(_hook)
    threading.setprofile(_hook)
"""

RANK = """
import logging, os, sys, time
if os.environ.get("HOUSE_DEBUG"):
    logging.basicConfig(level=logging.DEBUG)
from pathlib import Path
import numpy as np
from deisa import ArraySpec, Bridge
marks = Path(sys.argv[2])

def wait(name):
    while not (marks / name).exists():
        time.sleep(0.05)

spec = ArraySpec("float64", (256, 256), (0, 0), (256, 256))
with Bridge(sys.argv[1], {"field": spec}, connect_timeout=300) as bridge:
    step = 0
    while not (marks / "read0").exists():  # a step's news reaches the ranks at the next one's
        bridge.publish("field", np.full((256, 256), float(step)), step)
        step += 1
        time.sleep(0.5)
    while max(int(m.name[4:]) for m in marks.glob("read*")) < step - 1:  # all read: both idle
        time.sleep(0.05)
    (marks / "target").write_text(str(step))
    time.sleep(1.0)  # what the last read started settles
    (marks / "start").write_text(repr(time.time()))
    bridge.publish("field", np.full((256, 256), float(step)), step)
    wait(f"read{step}")
"""

ANALYTICS = """
import sys, time
from pathlib import Path
from distributed import Client
from deisa import Adapter
marks = Path(sys.argv[2])
with Client(scheduler_file=sys.argv[1], timeout=300) as client:
    adapter = Adapter(client, timeout=300)
    for step, x in adapter["field"].items():
        float(x.sum().compute())
        (marks / f"read{step}").write_text(repr(time.time()))
        if (marks / "target").exists() and step >= int((marks / "target").read_text()):
            break
"""


def block_way() -> dict[str, object]:
    sys.path.insert(0, str(REPO / "tests"))
    from conftest import DaskProcesses, mpirun, test_env

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for name, text in (("sitecustomize.py", TRACER), ("rank.py", RANK), ("ana.py", ANALYTICS)):
            (tmp / name).write_text(text)
        (tmp / "trace").mkdir()
        (tmp / "marks").mkdir()
        (tmp / "dask").mkdir()
        env = test_env()
        env["PYTHONPATH"] = os.pathsep.join([str(tmp), env["PYTHONPATH"]])
        env["HOUSE_TRACE_ROOT"] = str(REPO) + "/"
        env["HOUSE_TRACE_DIR"] = str(tmp / "trace")
        cluster = DaskProcesses.started(tmp / "dask", 1, 300, env=env, bridge_preload=True)
        try:
            sched = str(cluster.scheduler_file)
            ana = subprocess.Popen(
                [sys.executable, str(tmp / "ana.py"), sched, str(tmp / "marks")], env=env
            )
            rank = subprocess.run(
                mpirun(1, sys.executable, str(tmp / "rank.py"), sched, str(tmp / "marks")),
                env=env,
                timeout=int(os.environ.get("HOUSE_TIMEOUT", 600)),
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            assert rank.returncode == 0, rank.stdout
            assert ana.wait(timeout=600) == 0
        finally:
            cluster.stop()
        start = float((tmp / "marks" / "start").read_text())
        target = int((tmp / "marks" / "target").read_text())
        end = float((tmp / "marks" / f"read{target}").read_text())
        chains: set[tuple[str, tuple[str, ...]]] = set()  # (process, chain): timing aside
        calls: dict[str, list[tuple[float, str]]] = defaultdict(list)  # by thread, in order
        for trace in (tmp / "trace").glob("*.trace"):
            for line in trace.read_text().splitlines():
                parts = line.split(" ")
                if len(parts) != 4 or not start <= float(parts[0]) <= end:
                    continue
                when, proc, thread, chain = parts
                chains.add((proc, tuple(chain.split(">"))))
                calls[f"{proc}|{trace.stem}|{thread}"].append((float(when), chain.split(">")[-1]))
    per_thread = {key: _first_visits(sorted(seq)) for key, seq in sorted(calls.items())}
    return (
        block_measures(chains)
        | visit_returns(calls)
        | {
            "block_processes": sorted({proc for proc, _ in chains}),
            "block_threads": per_thread,
        }
    )


def _first_visits(calls: list[tuple[float, str]]) -> list[str]:
    return list(dict.fromkeys(file for _, file in calls))


def visit_returns(calls: dict[str, list[tuple[float, str]]]) -> dict[str, object]:
    """The returns as a thread's calls come, one after the other: a call into a file that the
    thread had left for another (``a, b, a``), each (process, file left, file re-entered) once.
    Wider than a chain (a file that calls two others in turn, a task that hands on to another
    on the same event loop count), so it depends on how the threads' tasks interleave."""
    returns = set()
    for key, seq in calls.items():
        visited: list[str] = []
        for _, file in sorted(seq):
            if visited and visited[-1] != file and file in visited:
                returns.add((key.split("|")[0], visited[-1], file))
            if not visited or visited[-1] != file:
                visited.append(file)
    return {
        "block_visit_returns": len(returns),
        "block_visit_returns_list": sorted(f"{r[1]} -> {r[2]} ({r[0]})" for r in returns),
    }


def _runs(items: list[str]) -> list[str]:
    """``items`` with each run of equal neighbours made one."""
    return [item for i, item in enumerate(items) if i == 0 or items[i - 1] != item]


def _returns(chain: list[str]) -> tuple[str, str] | None:
    """``(file left, file re-entered)`` when the chain's innermost call re-enters a file."""
    chain = _runs(chain)
    return (chain[-2], chain[-1]) if chain[-1] in chain[:-2] else None


def block_measures(chains: set[tuple[str, tuple[str, ...]]]) -> dict[str, object]:
    """The files, folders and returns of a block's way from its call chains (each a process
    and the files on a call's stack, outermost first)."""
    files, returns, folder_returns, return_chains = set(), set(), set(), set()
    for proc, chain in chains:
        files.update(chain)
        if (back := _returns(list(chain))) is not None:
            returns.add((proc, *back))
            return_chains.add(f"{' > '.join(_runs(list(chain)))} ({proc})")
        if (back := _returns([f.rpartition("/")[0] + "/" for f in chain])) is not None:
            folder_returns.add((proc, *back))
    return {
        "block_files": len(files),
        "block_returns": len(returns),
        "block_folders": len({f.rpartition("/")[0] for f in files}),
        "block_folder_returns": len(folder_returns),
        "block_files_list": sorted(files),
        "block_returns_list": sorted(f"{r[1]} -> {r[2]} ({r[0]})" for r in returns),
        "block_folder_returns_list": sorted(f"{r[1]} -> {r[2]} ({r[0]})" for r in folder_returns),
        "block_return_chains": sorted(return_chains),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", action="store_true", help="also trace a block's way")
    parser.add_argument("--json", type=Path, help="write the measures here too")
    args = parser.parse_args()
    measures = static()
    if args.block:
        measures.update(block_way())
    text = json.dumps(measures, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    started = time.time()
    main()
    print(f"({time.time() - started:.0f} s)", file=sys.stderr)
