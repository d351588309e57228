"""deisa.bridge._preload (the PDI plugin's background imports), the light import of deisa.bridge."""

from __future__ import annotations

import importlib.abc
import sys
import threading
from typing import Any

import pytest
from conftest import STARTUP, modules_loaded

from deisa.bridge import _preload


def test_stages_are_imported_in_order_and_timed() -> None:
    preload = _preload.start([("first", ["json"]), ("second", ["colorsys", "json"])])
    preload.wait("second")  # implies the first
    preload.wait("first")
    preload.join()
    assert list(preload.seconds) == ["first", "second"]
    assert set(preload.modules) == {"json", "colorsys"}
    assert set(preload.waited) == {"first", "second"}
    assert "first" in preload.summary() and "waited" in preload.summary()
    assert "colorsys" in sys.modules


def test_summary_names_a_stage_still_importing() -> None:
    """The plugin logs the summary at the first publication, which waits for no import of
    distributed: a stage still running is named as such, not as a time."""
    entered, release = threading.Event(), threading.Event()

    class Hold(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any, target: Any = None) -> None:
            if name == "deisa_held_module":
                entered.set()
                release.wait(STARTUP)
            return None

    hold = Hold()
    sys.meta_path.insert(0, hold)
    try:
        preload = _preload.start([("first", ["json"]), ("held", ["deisa_held_module"])])
        assert entered.wait(STARTUP)
        assert "held still importing after" in preload.summary()
        release.set()
        with pytest.raises(ModuleNotFoundError):
            preload.wait("held")
        assert "held still importing" not in preload.summary()
    finally:
        release.set()
        sys.meta_path.remove(hold)


def test_an_import_error_is_raised_by_the_waits_of_its_stage_and_later_ones() -> None:
    preload = _preload.start(
        [("ok", ["json"]), ("bad", ["deisa_no_such_module"]), ("after", ["colorsys"])]
    )
    preload.wait("ok")
    for stage in ("bad", "after"):
        with pytest.raises(ModuleNotFoundError, match="deisa_no_such_module"):
            preload.wait(stage)
    preload.join()
    with pytest.raises(KeyError):
        preload.wait("nosuch")


def test_a_simulation_rank_imports_nothing_of_the_analytics() -> None:
    """What the plugin imports (its preload stages, then the names it uses) leaves out
    dask.array, pandas, scipy, scikit-learn and deisa's analytics modules."""
    loaded = modules_loaded(
        "from deisa.bridge import _preload\n"
        "_preload.start().join()\n"
        "import deisa\n"
        "deisa.Bridge, deisa.BridgeOptions, deisa.BridgeOptionError, deisa.ArraySpec\n"
    )
    heavy = {
        "dask.array",
        "deisa.analysis.adapter",
        "deisa.analysis.pca",
        "deisa.analysis.splitter",
    }
    assert [
        m for m in loaded if m in heavy or m.split(".")[0] in {"pandas", "scipy", "sklearn"}
    ] == []


def test_lazy_names_are_the_public_api() -> None:
    import deisa

    assert sorted(deisa.__all__) == sorted(deisa._LAZY)
    assert deisa.IncrementalPCA.__module__ == "deisa.analysis.pca"
    assert "split" in dir(deisa)
    with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
        deisa.nosuch  # noqa: B018
