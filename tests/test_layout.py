"""The package's layout holds: three sides that import one way, small modules.

``deisa.bridge`` (simulation side), ``deisa.worker`` (what runs inside Dask workers),
``deisa.scheduler`` and ``deisa.analysis`` share only ``deisa.wire`` (the message formats and
socket names two sides share), ``deisa.contract``, ``deisa._dask_internals`` and ``deisa._lazy``
(the Bridge and the workers may install the scheduler extension; the Bridge and the Adapter
install the workers' plugin through the ``deisa.worker`` package's functions, nothing deeper;
``deisa.bridge.worker`` is the older name of that preload); ``deisa.launcher`` imports anything
and nothing imports it; ``deisa.pca_app`` (the built-in PCA that ``deisa-run`` runs) imports the
analysis side only; ``deisa.doctor`` (``python -m deisa doctor``) imports only the launcher's
lookups. No import circle anywhere in deisa/.
Each check imports in a fresh interpreter, so what one test loaded does not hide another's.
A rank's Bridge path is probed under mpirun: what a non-root rank loads, and that no rank's
first publish waits for distributed's import (docs/benchmarks.md, "Start-up of a rank").
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import STARTUP, DaskProcesses, modules_loaded, mpirun, test_env
from house_measures import (
    DOCS,
    REPO,
    block_measures,
    cited_with_names,
    defined_twice,
    imports_of,
    missing_in_docs,
    module_of,
    names_missing_in_docs,
)

PACKAGE = Path(__file__).resolve().parents[1] / "deisa"
SIDES = ("bridge", "worker", "scheduler", "analysis", "launcher", "doctor", "insitu", "pca_app")
SHARED = {"wire", "contract", "_dask_internals", "_lazy"}
# who may import whom, besides the shared modules
ALLOWED = {
    "bridge": {"bridge", "scheduler"},
    # inside Dask workers: the plugin installs the scheduler extension for rank 0's relay
    "worker": {"worker", "scheduler"},
    "scheduler": {"scheduler"},
    "analysis": {"analysis", "scheduler"},
    "launcher": {"bridge", "worker", "scheduler", "analysis", "launcher", "pca_app"},
    # the built-in PCA app that deisa-run runs: an application of the analysis side
    "pca_app": {"pca_app", "analysis"},
    "doctor": {"doctor", "launcher"},
    # deisa-core's backend (deisa.insitu) names the Bridge and the Deisa of one module, as
    # deisa.dask does; its two halves (insitu/bridge.py, insitu/analytics.py) each import one side
    "insitu": {"insitu", "bridge", "analysis"},
    "": set(),  # deisa/wire/, contract.py, _dask_internals.py, _lazy.py
}
# what a side may import of another besides: the workers' package, never its modules. The
# Adapter installs the workers' plugin when the analytics connects before the simulation
# (issue 46); rank 0 installs it where no worker relays its calls; deisa.bridge.worker is the
# older name of the workers' preload (dask worker --preload deisa.bridge.worker)
WORKER_PACKAGE = {"deisa.worker", "deisa.worker.install"}
ALLOWED_MODULES = {
    "analysis": WORKER_PACKAGE,
    "bridge": WORKER_PACKAGE | {"deisa.worker.install_on_scheduler", "deisa.worker.dask_setup"},
}


def _heavy(loaded: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in loaded if m.startswith(prefixes)]


def test_bridge_loads_no_analytics_stack() -> None:
    loaded = modules_loaded(
        "from deisa import Bridge, BridgeGroup, BridgeOptions, ArraySpec\n"
        "import deisa.bridge.bridge"
    )
    assert "deisa.bridge.bridge" in loaded
    assert _heavy(loaded, ("deisa.analysis", "deisa.launcher", "scipy", "sklearn")) == []
    assert "dask.array" not in loaded


# Each rank holds the import of distributed (whatever the thread) until its first publish has
# returned. It records whether its main thread waited for that import (itself, or behind the
# held thread: then the hold times out), and what it had loaded by then and after close.
RANK_PROBE = """
import importlib.abc, json, sys, threading
release, waited = threading.Event(), []

class HoldDistributed(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "distributed" and not release.is_set():
            waited.append(threading.current_thread() is threading.main_thread())
            waited.append(not release.wait({startup}))
        return None

sys.meta_path.insert(0, HoldDistributed())
import numpy as np
from mpi4py import MPI
from deisa import ArraySpec, Bridge

rank = MPI.COMM_WORLD.Get_rank()
spec = ArraySpec("float64", (4, 4), (2 * rank, 0), (2, 4))
with Bridge(sys.argv[1], {{"probed": spec}}, connect_timeout={startup}) as bridge:
    bridge.publish("probed", np.full((2, 4), float(rank)), 0)
    first = sorted(sys.modules)
    release.set()
    bridge.publish("probed", np.full((2, 4), float(rank)), 1)
with open(f"{{sys.argv[2]}}.{{rank}}.json", "w") as f:
    json.dump({{"main_waited": any(waited), "first": first, "end": sorted(sys.modules)}}, f)
"""
# what only rank 0 uses (the scheduler extension it installs), or no rank
ROOT_ONLY = ("deisa.scheduler",)
NO_RANK = ("deisa.analysis", "deisa.launcher", "dask.array", "scipy", "sklearn", "pandas")


@pytest.mark.parametrize("relay", [True, False], ids=["relay", "no-relay"])
def test_no_rank_waits_for_distributed_and_only_rank_0_loads_the_scheduler_side(
    tmp_path: Path, relay: bool
) -> None:
    """``relay``: the workers preload ``deisa.bridge.worker``, as ``deisa-run``'s do, and rank
    0 calls the scheduler through one of them; else rank 0 connects with distributed."""
    (tmp_path / "dask").mkdir()
    cluster = DaskProcesses.started(
        tmp_path / "dask", 2, STARTUP, env=test_env(), bridge_preload=relay
    )
    try:
        _probe_the_ranks(tmp_path, cluster, relay)
    finally:
        cluster.stop()


def _probe_the_ranks(tmp_path: Path, dask_processes: DaskProcesses, relay: bool) -> None:
    probe, out = tmp_path / "probe.py", tmp_path / "loaded"
    probe.write_text(RANK_PROBE.format(startup=STARTUP))
    cmd = mpirun(2, sys.executable, str(probe), str(dask_processes.scheduler_file), str(out))
    proc = subprocess.run(cmd, env=test_env(), capture_output=True, text=True, timeout=4 * STARTUP)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    root, other = (json.loads(Path(f"{out}.{rank}.json").read_text()) for rank in (0, 1))
    for rank in (root, other):
        assert not rank["main_waited"], (
            "a Bridge's construction or first publish imported distributed"
        )
        assert "distributed" not in rank["first"] and "deisa.bridge.bridge" in rank["first"]
        assert _heavy(rank["end"], NO_RANK) == []
    if relay:  # rank 0 called the scheduler through a worker of its node
        assert _heavy(root["end"], ("distributed", "dask")) == []
    else:
        assert "distributed" in root["end"]  # rank 0 connected with it, on the loop thread
        assert _heavy(root["end"], ROOT_ONLY) != []  # rank 0 installed the extension
    # rank 1 sends through shared memory, and its notices to rank 0 (with rank 0's TLS files
    # under TLS) need neither distributed nor dask
    assert _heavy(other["end"], ("distributed", "dask")) == []
    assert _heavy(other["end"], ROOT_ONLY) == []
    with dask_processes.client() as client:
        from deisa import Adapter

        steps = [
            float(block.sum()) for _, block in Adapter(client, timeout=STARTUP)["probed"].items()
        ]
    assert steps == [8.0, 8.0]


def test_adapter_loads_no_bridge_module() -> None:
    loaded = modules_loaded("from deisa import Adapter, Replay, IncrementalPCA, split")
    assert "deisa.analysis.adapter" in loaded
    assert _heavy(loaded, ("deisa.bridge", "deisa.launcher", "mpi4py")) == []


def _side(module: str) -> str | None:
    """The side (``bridge``...) a deisa module belongs to, ``""`` for a shared module."""
    parts = module.split(".")
    if len(parts) < 2:
        return None  # the top package itself
    if parts[1] in SIDES:
        return parts[1]
    return "" if parts[1] in SHARED else None


@pytest.mark.parametrize(
    "path",
    sorted(p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE or p.stem in SHARED),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_imports_run_one_way(path: Path) -> None:
    side = _side(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
    assert side is not None
    wrong = sorted(
        target
        for target in imports_of(path)
        if (other := _side(target)) not in (None, "")
        and other not in ALLOWED[side]
        and target not in ALLOWED_MODULES.get(side, set())
    )
    assert wrong == [], f"{path.relative_to(PACKAGE)} ({side or 'shared'}) imports {wrong}"


def _import_graph() -> dict[str, set[str]]:
    """Each module of deisa/ and the modules of deisa/ it imports: every import statement, at
    module level, inside a function or under ``TYPE_CHECKING`` alike (an import inside a function
    is a loop at run time all the same, and one for the types is a loop in the design)."""
    modules = {module_of(path) for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = module_of(path)
        # "from .x import y": y may be a module or a name of x; keep what is a module
        # and the module's own packages do not count: Python runs them before the module
        ancestors = {module.rsplit(".", n)[0] for n in range(1, module.count(".") + 1)}
        graph[module] = (
            {
                name if name in modules else name.rpartition(".")[0]
                for name in imports_of(path)
                if name in modules or name.rpartition(".")[0] in modules
            }
            - {module}
            - ancestors
        )
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_rooms_table_says_what_the_imports_check_allows() -> None:
    """docs/architecture.md's rooms (its "Map" table): each side's "may import" cell names the
    sides this test file lets it import (:data:`ALLOWED`, :data:`ALLOWED_MODULES`), no more, no
    less; the launcher's says "anything"."""
    text = (REPO / "docs" / "architecture.md").read_text()
    rows = {
        cells[0].strip(): cells[-1]
        for line in text.splitlines()
        if line.startswith("| `deisa/") and len(cells := line.strip(" |").split(" | ")) == 4
    }
    said = {}
    for room, may_import in rows.items():
        side = re.match(r"`deisa/(\w+)/`", room)
        if side and side.group(1) in SIDES:
            said[side.group(1)] = (
                {"anything"}
                if may_import.strip().startswith("anything")
                else {m.split(".")[1] for m in re.findall(r"`(deisa\.\w+)", may_import)}
            )
    allowed = {
        side: {"anything"}
        if side == "launcher"
        else (ALLOWED[side] | {m.split(".")[1] for m in ALLOWED_MODULES.get(side, set())}) - {side}
        for side in SIDES
    }
    assert said == allowed


def test_circles_are_found_through_imports_inside_functions() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle() -> None:
    """No module of deisa/ reaches itself through its imports (docs/architecture.md, "Map")."""
    graph = _import_graph()
    assert "deisa.bridge._losses" in graph["deisa.bridge.bridge"]  # from ._losses import Losses
    assert "deisa.worker" in graph["deisa.bridge.link.connect"]  # inside a function
    circles = [
        "; ".join(f"{m} -> {', '.join(sorted(graph[m] & set(group)))}" for m in group)
        for group in _circles(graph)
    ]
    assert circles == [], "import circles:\n" + "\n".join(circles)


def _code_lines(function: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    """Lines of code of ``function``: its docstring, blank lines and comments aside."""
    body = function.body
    doc: range = range(0)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        doc = range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1)
    return sum(
        1
        for number in range(function.lineno, (function.end_lineno or function.lineno) + 1)
        if number not in doc and (line := lines[number - 1].strip()) and not line.startswith("#")
    )


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_small_modules_functions_and_signatures(path: Path) -> None:
    """Every module of deisa/ (issue 47): at most 500 lines, functions of at most 60 lines of
    code, at most 8 parameters besides ``self`` and the keyword-only settings."""
    text = path.read_text()
    lines = text.splitlines()
    assert len(lines) <= 500, f"{path.relative_to(PACKAGE)} has {len(lines)} lines"
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        where = f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}"
        assert _code_lines(node, lines) <= 60, f"{where}: over 60 lines of code"
        positional = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
        positional = [a for a in positional if a not in ("self", "cls")]
        assert len(positional) <= 8, f"{where}: {len(positional)} positional parameters"


def test_no_deprecated_module() -> None:
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        assert "DeprecationWarning" not in text and "deprecated" not in text.lower(), path


def _private_reads(path: Path) -> list[str]:
    """``x._name`` in ``path`` where ``x`` is not ``self``/``cls``, nor an object this module's
    own code just built (``x = C(...)`` in the same function, ``C`` a class of the module, or
    ``cls``): what reaches into another object's private state."""
    tree = ast.parse(path.read_text())
    classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)} | {"cls"}
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            continue
        built = {"self", "cls"}
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id in classes
            ):
                built.update(t.id for t in node.targets if isinstance(t, ast.Name))
        for node in ast.walk(function):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                continue
            if node.attr.startswith("__") or (
                isinstance(node.value, ast.Name) and node.value.id in built
            ):
                continue
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    return sorted(set(found))


@pytest.mark.parametrize(
    "path", sorted((PACKAGE / "bridge").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_bridge_modules_read_no_private_state_of_another_object(path: Path) -> None:
    """The Bridge's parts hold the same parts and a scheduler link through public names
    (deisa/bridge/_parts.py, link/scheduler.py), not through each other's private attributes."""
    assert _private_reads(path) == []


# the loggers a module may use besides its own: the ADIOS2 engine's, which its C++ half
# (plugin/adios2/deisa_engine.cxx) logs to through Python and docs/adios2.md names
OTHER_LOGGERS = {"bridge/engine/parameters.py": "deisa.adios2"}


def _imported_loggers(path: Path) -> list[str]:
    """The loggers ``path`` imports from another module of deisa/ (``from ._state import
    logger``): its lines would carry that module's name."""
    return [
        f"line {node.lineno}: imports {alias.name} from {node.module or '.'}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        and (node.level or (node.module or "").startswith("deisa"))
        for alias in node.names
        if alias.name in ("logger", "_logger", "log", "LOGGER")
    ]


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_each_module_logs_under_its_own_name(path: Path) -> None:
    """A module's log lines carry its own name (``logging.getLogger(__name__)``), so that a
    line leads to the file that wrote it and a user sets one module's level by its name."""
    wrong = []
    for statement in ast.parse(path.read_text()).body:  # the module's own logger: at module level
        node = statement.value if isinstance(statement, ast.Assign) else None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "getLogger"
            and node.args
        ):
            name = node.args[0]
            if isinstance(name, ast.Name) and name.id == "__name__":
                continue
            allowed = OTHER_LOGGERS.get(str(path.relative_to(PACKAGE)))
            if not (isinstance(name, ast.Constant) and name.value == allowed):
                wrong.append(f"line {node.lineno}: getLogger({ast.unparse(name)})")
    wrong += _imported_loggers(path)
    assert wrong == [], f"{path.relative_to(PACKAGE)} logs under another name: {wrong}"


def test_logger_check_finds_a_borrowed_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above fails on a module that logs under another module's name."""
    fake = tmp_path / "deisa" / "analysis" / "_cut_out.py"
    fake.parent.mkdir(parents=True)
    fake.write_text('import logging\nlogger = logging.getLogger("deisa.analysis.adapter")\n')
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "deisa")
    with pytest.raises(AssertionError, match="logs under another name"):
        test_each_module_logs_under_its_own_name(fake)
    fake.write_text("from ._reading import StepArray, logger\n")
    with pytest.raises(AssertionError, match="imports logger from _reading"):
        test_each_module_logs_under_its_own_name(fake)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_docs_cite_only_what_exists(doc: Path) -> None:
    """Every path, module and name a doc cites in backquotes (``deisa/bridge/bridge.py``,
    ``deisa.bridge.shm.channel``, ``deisa.worker.services.WorkerServices``, a file name such as
    ``channel.py``) names a file, a module or a name of this tree: the map cannot drift
    (tests/house_measures.py, ``docs_paths_missing``; what is not ours: ``NOT_OURS`` there)."""
    assert missing_in_docs([doc]) == []


def test_block_returns_are_call_chains_that_re_enter_a_file() -> None:
    """A block's way counts a return where a call chain re-enters a file it had left, each
    (process, file left, file re-entered) once: not where a file calls two others in turn, not
    twice for a poll that repeats, and the same whatever the order the calls came in."""
    chains = {
        ("rank", ("a/x.py", "a/y.py", "a/x.py")),  # a return: x > y > x
        ("rank", ("a/x.py", "a/y.py", "a/x.py", "a/x.py")),  # the same, once
        ("rank", ("a/x.py", "a/z.py")),  # x calls y, then z: no return
        ("rank", ("a/x.py", "b/w.py", "a/x.py", "a/y.py")),  # y called from x, no re-entry
        ("worker", ("a/x.py", "b/w.py", "a/y.py")),  # folder returns only: a/ > b/ > a/
    }
    measures = block_measures(chains)
    assert measures["block_returns_list"] == ["a/y.py -> a/x.py (rank)"]
    assert measures["block_folder_returns_list"] == ["b/ -> a/ (rank)", "b/ -> a/ (worker)"]
    assert (measures["block_files"], measures["block_folders"]) == (4, 2)
    assert measures == block_measures(set(reversed(sorted(chains))))


def test_docs_check_finds_what_is_gone(tmp_path: Path) -> None:
    doc = REPO / "docs" / "_probe_of_the_docs_check.md"
    cited = "`deisa/bridge/_gone.py`, `deisa.bridge.nowhere`, `deisa.wire.NO_SUCH_NAME`, `_gone.py`"
    try:
        # a word of the module's text is not a name of it; a lazy name leads to its module
        cited += ", `deisa.wire.routes.scheduler`, `deisa.Bridge.no_such_method`"
        there = "`deisa/bridge/bridge.py`, `deisa.wire.EXTENSION_NAME`, `deisa.Bridge.publish`"
        doc.write_text(f"{cited}, {there}, `deisa.bridge.link.connect.Connections`\n")
        missing = missing_in_docs([doc])
    finally:
        doc.unlink()
    assert [m.split(": ")[1] for m in missing] == sorted(
        [
            "_gone.py",
            "deisa.Bridge.no_such_method",
            "deisa.bridge.nowhere",
            "deisa.wire.NO_SUCH_NAME",
            "deisa.wire.routes.scheduler",
            "deisa/bridge/_gone.py",
        ]
    )


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_docs_cite_names_where_they_are(doc: Path) -> None:
    """Every name a doc cites with its file (```deisa/bridge/_async.py`, `publish```,
    ```deisa/worker/shm.py`'s `Listener```, ```register_until_answered`` after its file in
    parentheses) is defined in that file: the block's way cannot name a function that moved."""
    assert names_missing_in_docs([doc]) == []


def test_every_hop_of_the_block_way_names_its_function() -> None:
    """docs/architecture.md's block's way cites each module of deisa/ it passes with a name
    that module defines (the check above holds them true)."""
    text = (REPO / "docs" / "architecture.md").read_text()
    way = text[text.index("**One block, from `publish`") : text.index("## Data flow")]
    paths = set(re.findall(r"`(deisa/[\w/]+\.py)`", way))
    named = {path for path, _ in cited_with_names(way)}
    assert len(paths) >= 20 and sorted(paths - named) == []


def test_docs_name_check_finds_a_function_that_moved(tmp_path: Path) -> None:
    doc = REPO / "docs" / "_probe_of_the_names_check.md"
    try:
        doc.write_text(
            "(`deisa/bridge/_async.py`, `publish`), `deisa/bridge/_loop.py`'s `LoopThread`,\n"
            "`deisa/scheduler/taking.py` (`get_step`), `Bridge.publish` (`deisa/bridge/bridge.py`;"
            "\n(`deisa/bridge/_async.py`, `gone_away`), `deisa/wire/shm.py`'s `Nowhere`,\n"
            "`Bridge.nothing` (`deisa/bridge/bridge.py`), (`deisa/bridge/_none.py`, `x`)\n"
        )
        missing = [m.split(": ")[1] for m in names_missing_in_docs([doc])]
    finally:
        doc.unlink()
    assert missing == [
        "deisa/bridge/_async.py, gone_away",
        "deisa/bridge/_none.py, x",
        "deisa/bridge/bridge.py, Bridge.nothing",
        "deisa/wire/shm.py, Nowhere",
    ]


@pytest.mark.parametrize(
    "init", sorted(PACKAGE.rglob("__init__.py")), ids=lambda p: str(p.parent.relative_to(PACKAGE))
)
def test_a_package_that_lists_its_modules_lists_them_all(init: Path) -> None:
    """A package docstring that lists its modules (``:mod:`.x```, ``:mod:`~deisa.pkg.x``` or
    a private one as ````_x````; three or more) names every one of them, sub-packages
    included: a newcomer's index."""
    package = module_of(init)
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    here = {p.stem for p in init.parent.glob("*.py")} | {
        p.parent.name for p in init.parent.glob("*/__init__.py")
    }
    here -= {"__init__", "__main__"}
    cited = {
        name.rpartition(".")[2]
        for name in re.findall(r":mod:`~?([\w.]+)`", doc)
        if name.startswith(".") or name.startswith(package + ".")
    } | (set(re.findall(r"``(\w+)``", doc)) & here)
    if len(cited & here) >= 3:
        assert sorted(here - cited) == [], f"{package}'s docstring leaves out modules"


def _private_across_sides(path: Path) -> list[str]:
    """The private modules (``_x``) of another side that ``path`` imports."""
    side = _side(module_of(path))
    wrong = []
    for target in imports_of(path):
        parts = target.split(".")
        module_parts = (
            parts if (PACKAGE.parent / Path(*parts)).with_suffix(".py").exists() else parts[:-1]
        )
        private = [p for p in module_parts[1:] if p.startswith("_") and not p.startswith("__")]
        if private and module_parts[1] not in SHARED and _side(target) != side:
            wrong.append(target)
    return sorted(wrong)


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_no_module_imports_a_private_module_of_another_side(path: Path) -> None:
    """A private module (``_reading``, ``_collective``) is its side's own: another side imports
    what its package makes public, or the module moves to where it is used (issue 55). The
    shared private modules (``_dask_internals``, ``_lazy``) are for every side."""
    assert _private_across_sides(path) == [], f"{path.relative_to(PACKAGE)} imports them"


def test_private_import_check_finds_one() -> None:
    fake = PACKAGE / "pca_app" / "_probe_of_the_private_check.py"
    try:
        fake.write_text("from ..analysis._reading import StepArray\nfrom .. import _lazy\n")
        assert _private_across_sides(fake) == [
            "deisa.analysis._reading",
            "deisa.analysis._reading.StepArray",
        ]
    finally:
        fake.unlink()


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_each_module_says_which_process_runs_it(path: Path) -> None:
    """Every module's opening docstring, or its package's (``deisa/`` itself aside: each
    top-level module says it), says which process runs it ("Runs in ...") and, in the same
    docstring, what it may import ("Imports ..."): the map, where a newcomer reads first."""
    chain = [path, *(p / "__init__.py" for p in path.parents if PACKAGE in p.parents)]
    docs = [ast.get_docstring(ast.parse(p.read_text())) or "" for p in chain if p.exists()]
    runs = [doc for doc in docs if "Runs in" in doc]
    assert runs, f"{path.relative_to(PACKAGE)} says not"
    assert re.search(r"\b[Ii]mports?\b", runs[0]), (
        f"{path.relative_to(PACKAGE)}: the docstring that says where it runs says not what it "
        "imports"
    )
    if "bridge" in path.relative_to(PACKAGE).parts[:1] and path.name != "__init__.py":
        # a rank runs the Bridge on two threads (its main thread and the loop's): each module
        # says which of them runs what
        assert "thread" in docs[0], f"{path.relative_to(PACKAGE)} says not which thread runs it"


# The three sides whose every module says, in its own opening docstring, where it runs ("Runs in
# <process>", "Runs on <thread>": the house's one wording) and what it imports (issue 55 item 4):
# a newcomer who opens one file of them reads there which process and thread run it.
OWN_DOCSTRING_SIDES = ("bridge", "worker", "scheduler")
# the modules of the publish path that another branch edits at the time of this check, which
# say their threads in other words: each leaves this list once its docstring says it (the list
# only shrinks: a module listed that passes fails the test, as NAMES_DEFINED_TWICE below)
OWN_DOCSTRING_PENDING: set[str] = set()


def _says_where_it_runs(path: Path) -> list[str]:
    """What ``path``'s own docstring leaves out of "Runs in/on ..." and "Imports ..."."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return [
        what
        for what, pattern in (
            ("where it runs", r"\b[Rr]uns (in|on)\b"),
            ("what it imports", r"\b[Ii]mports?\b"),
        )
        if not re.search(pattern, doc)
    ]


@pytest.mark.parametrize(
    "path",
    sorted(p for side in OWN_DOCSTRING_SIDES for p in (PACKAGE / side).rglob("*.py")),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_each_module_of_the_three_sides_says_in_its_own_docstring_where_it_runs(
    path: Path,
) -> None:
    """Every module of deisa/bridge/, deisa/worker/ and deisa/scheduler/ (the processes of a
    run, each with several threads or an event loop) says in its own opening docstring which
    process and thread run it and what it imports, not only its package."""
    name = str(path.relative_to(PACKAGE))
    missing = _says_where_it_runs(path)
    if name in OWN_DOCSTRING_PENDING:
        assert missing, f"{name} says it now: remove it from OWN_DOCSTRING_PENDING"
    else:
        assert missing == [], f"{name}'s docstring says not {' nor '.join(missing)}"


def test_own_docstring_check_finds_a_module_that_leans_on_its_package(tmp_path: Path) -> None:
    fake = tmp_path / "quiet.py"
    fake.write_text('"""Something.\n\nImports numpy only.\n"""\n')
    assert _says_where_it_runs(fake) == ["where it runs"]
    fake.write_text('"""Something, on the loop thread."""\n')
    assert _says_where_it_runs(fake) == ["where it runs", "what it imports"]
    fake.write_text('"""Something.\n\nRuns in the scheduler, on its event loop. Imports x."""\n')
    assert _says_where_it_runs(fake) == []


def test_process_check_finds_a_module_that_says_not_what_it_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "deisa" / "analysis"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""The analytics side."""\n')
    fake = package / "_mute.py"
    fake.write_text('"""Something.\n\nRuns in the analytics.\n"""\n')
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "deisa")
    with pytest.raises(AssertionError, match="says not what it imports"):
        test_each_module_says_which_process_runs_it(fake)
    fake.write_text('"""Something.\n\nRuns in the analytics. Imports numpy only.\n"""\n')
    test_each_module_says_which_process_runs_it(fake)


# The names (classes, functions, UPPER_CASE constants) that two modules of deisa/ define, each
# with the modules that do and why (tests/house_measures.py, ``names_defined_twice``; issue 55:
# one name, one meaning). A name defined twice is one concept given one owner that the others
# import, or two concepts, renamed for what each is; what stays is listed here with its reason.
NAMES_DEFINED_TWICE: dict[str, tuple[tuple[str, ...], str]] = {
    # the names users' code imports, fixed by the APIs deisa speaks
    "Bridge": (
        ("deisa.bridge.bridge", "deisa.insitu.bridge"),
        "deisa-core's interface names its backend's class Bridge (deisa.insitu.Bridge replaces "
        "deisa.dask.Bridge), built on deisa.Bridge",
    ),
    "Deisa": (
        (
            "deisa.analysis._compat_main",
            "deisa.analysis._compat_v03",
            "deisa.analysis.compat",
            "deisa.insitu.analytics",
        ),
        "the analytics class of the released DEISA APIs (0.3.x, main) and of deisa-core, which "
        "users' scripts call by that name (deisa.analysis.compat picks the generation)",
    ),
    "DeisaArray": (
        ("deisa.analysis._compat_main", "deisa.analysis._compat_v03"),
        "the released APIs' array class, one per generation",
    ),
    "DeisaArrays": (
        ("deisa.analysis._compat_main", "deisa.analysis._compat_v03"),
        "the released APIs' arrays class, one per generation",
    ),
    "dask_setup": (
        ("deisa.analysis.warm", "deisa.worker"),
        "distributed's preload hook: every module that a worker preloads defines it",
    ),
    # one per module by design
    "T": (
        ("deisa.bridge._collective", "deisa.bridge._loop", "deisa.bridge.link.connect"),
        "a module's own type variable",
    ),
    "_LAZY": (
        ("deisa", "deisa.analysis", "deisa.bridge", "deisa.insitu"),
        "each package's table of lazy names for deisa._lazy.attach, as its own __all__",
    ),
}


def test_one_name_one_meaning() -> None:
    """No name is defined by two modules of deisa/ but those listed, with their reasons, in
    :data:`NAMES_DEFINED_TWICE`, and each listed name is defined by those modules exactly:
    the count only goes down (a name resolved leaves the list)."""
    found = defined_twice()
    listed = {name: sorted(modules) for name, (modules, _) in NAMES_DEFINED_TWICE.items()}
    new = {name: modules for name, modules in found.items() if listed.get(name) != modules}
    assert new == {}, "defined in more modules than NAMES_DEFINED_TWICE lists (give each one owner)"
    resolved = sorted(set(listed) - set(found))
    assert resolved == [], f"defined once now: remove {resolved} from NAMES_DEFINED_TWICE"


def test_no_two_test_files_share_a_name() -> None:
    """pytest imports test files by their name (rootdir import mode, no ``__init__.py``): two
    ``test_x.py`` in different folders stop the whole run with "import file mismatch"."""
    seen: dict[str, list[str]] = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
