"""ADIOS2's own loader, from a sticky plugin directory (issue 53, item 3): ADIOS2 tries
``deisa_adios2_engine`` before ``libdeisa_adios2_engine.so``, the name deisa checked.

The positive control runs a real ADIOS2 code with ``ADIOS2_PLUGIN_PATH`` naming root's 1777
directory that holds the real engine and its guard, where a real second account
(:func:`attack.stranger`) added ``deisa_adios2_engine``: ADIOS2 loads the stranger's library
in the ranks, as root. ``deisa-run`` refuses that directory (exit 2, naming it) before it starts
anything. The same refusal without ADIOS2: tests/launcher/test_planted_libraries.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from attack import stranger
from conftest import mpirun, test_env
from test_adios2 import adios2_build, engine_xml, ragged  # noqa: F401 - a fixture

from deisa.launcher.adios2_engine import ENGINE_FILE, GUARD_FILE


def test_positive_control_adios2_loads_the_first_name_from_a_sticky_plugin_dir(
    adios2_build: Path,  # noqa: F811 - the fixture of test_adios2
    tmp_path: Path,
) -> None:
    account = stranger()
    shared = Path(tempfile.mkdtemp(prefix="deisa-shared-", dir="/tmp"))
    shared.chmod(0o1777)  # as /tmp
    try:
        plugins = shared / "plugins"
        plugins.mkdir(mode=0o755)
        for name in (ENGINE_FILE, GUARD_FILE):
            shutil.copy(adios2_build / "plugin" / "adios2" / name, plugins / name)
        plugins.chmod(0o1777)
        marker = shared / "marker"
        account.plant_library(plugins / "deisa_adios2_engine", marker)
        xml = engine_xml(tmp_path / "deisa.xml", Mode="sync", Transport="tcp")
        code = [ragged(adios2_build), str(xml), "ignored.bp", "1"]
        env = {**test_env(), "ADIOS2_PLUGIN_PATH": str(plugins),
               "LD_PRELOAD": str(plugins / GUARD_FILE),
               "DEISA_SCHEDULER_FILE": str(tmp_path / "none.json")}  # fmt: skip
        subprocess.run(mpirun(2, *code), env=env, cwd=tmp_path, capture_output=True, timeout=300)
        assert marker.read_text() == "0"  # ADIOS2 loaded the stranger's library, as root
        marker.unlink()

        done = subprocess.run(
            [sys.executable, "-P", "-m", "deisa.launcher", "--ranks", "2", "--output",
             str(tmp_path / "out"), "--analytics", "ana.py", "--", *code],
            env={**test_env(), "ADIOS2_PLUGIN_PATH": str(plugins)}, cwd=tmp_path,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert f"ADIOS2_PLUGIN_PATH entry {plugins}: {plugins} is writable by other" in done.stderr
        assert not marker.exists() and not (tmp_path / "out").exists()
    finally:
        shutil.rmtree(shared, ignore_errors=True)
