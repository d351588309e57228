"""The Dask processes deisa starts (:mod:`deisa.launcher.dask_processes`): distributed's
histories shortened in them (issue 56 item 7: a long run's memory is level after its first
steps), the user's own setting kept; a real ``dask scheduler`` and worker read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import STARTUP, DaskProcesses, test_env

from deisa.launcher.dask_processes import (
    HISTORY_LENGTH,
    MONITOR_SAMPLES,
    config_env,
    history_env,
)
from deisa.launcher.processes import child_env

LOG = "DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH"
MONITOR = "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__LOG_LENGTH"


def test_histories_are_shortened_and_the_monitor_only_without_the_dashboard() -> None:
    assert history_env(False) == {LOG: str(HISTORY_LENGTH), MONITOR: str(MONITOR_SAMPLES)}
    assert history_env(True) == {LOG: str(HISTORY_LENGTH)}  # its history is the dashboard's
    assert config_env({"distributed.a.b-c": [1]}) == {"DASK_DISTRIBUTED__A__B_C": "[1]"}


def test_a_users_own_history_length_wins(monkeypatch: Any) -> None:
    """deisa-run passes them as ``keep`` (local) or ``${VAR:-N}`` (a job): the user's wins."""
    monkeypatch.setenv(LOG, "5000")
    env = child_env({}, keep=history_env(False))
    assert env[LOG] == "5000" and env[MONITOR] == str(MONITOR_SAMPLES)


def test_a_job_exports_them_unless_the_user_set_them(tmp_path: Path) -> None:
    from deisa.launcher import parse, slurm
    from deisa.launcher.plan import make_plan

    argv = ["--solver", "python", "-o", str(tmp_path / "o")]
    script = slurm.job_script(make_plan(parse.run_settings("slurm", argv)))
    assert f'export {LOG}="${{{LOG}:-{HISTORY_LENGTH}}}"' in script
    assert f'export {MONITOR}="${{{MONITOR}:-{MONITOR_SAMPLES}}}"' in script


def test_a_scheduler_started_with_them_keeps_no_more(tmp_path: Path) -> None:
    """A real ``dask scheduler`` as deisa-run starts it (its environment): its transition log,
    its events per topic and its system monitor hold no more than deisa's lengths."""
    env = {**test_env(), **history_env(False)}

    def lengths_made(dask_scheduler: Any) -> dict[str, Any]:  # by value: runs there
        return {
            "transitions": dask_scheduler.transition_log.maxlen,
            "monitor": dask_scheduler.monitor.quantities["cpu"].maxlen,
        }

    cluster = DaskProcesses.started(tmp_path, 1, STARTUP, env=env)
    try:
        with cluster.client() as client:
            lengths = client.run_on_scheduler(lengths_made)
            for i in range(3 * HISTORY_LENGTH):  # more events than a topic keeps
                client.log_event("deisa-test", i)
            events = client.get_events("deisa-test")
            worker = client.run(lambda dask_worker: dask_worker.monitor.quantities["cpu"].maxlen)
    finally:
        cluster.stop()
    assert lengths["transitions"] == HISTORY_LENGTH
    assert lengths["monitor"] == MONITOR_SAMPLES
    assert len(events) == HISTORY_LENGTH
    assert list(worker.values()) == [MONITOR_SAMPLES]
