"""Schedules declared in code, with real schedulers and a real worker.

Each scheduler and worker runs ``tests.settings_declared``: its ``CELERY_BEAT_SCHEDULE`` and
``SCHEDULING_JOBS`` come from ``DUECOURSE_TEST_DECLARATIONS``, so two processes can carry two
releases' declarations. The entries run ``tests.code.tick``, a plain Celery task (not
``@schedulable_task``), which writes one line per body run to ``DUECOURSE_TEST_BODY_LOG``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from scheduling.models import Execution, ExecutionStatus, Job, JobChange, JobStatus
from tests.conftest import Processes, celery_worker_command, scheduler_command, wait_for
from tests.scheduling.code_tasks import PLAIN_TASK

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def beat_command() -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "config",
        "beat",
        "-S",
        "scheduling.beat:DatabaseScheduler",
        "--loglevel",
        "INFO",
    ]


def declared(beat: dict[str, Any], jobs: dict[str, Any] | None = None) -> str:
    return json.dumps({"beat": beat, "jobs": jobs or {}})


def ticks(path: Path) -> Counter[str]:
    return Counter(path.read_text().splitlines() if path.exists() else [])


def started(processes: Processes, command: list[str], env: dict[str, str], name: str) -> Any:
    child = processes.start(command, env=env, name=name)
    return child


def stop(processes: Processes, child: subprocess.Popen[bytes]) -> None:
    processes.kill(child, signal.SIGTERM)
    child.wait(timeout=30)


def each_run_once(body_log: Path) -> None:
    """Every body line is one completed execution: no occurrence ran twice."""
    done = Execution.objects.filter(status=ExecutionStatus.COMPLETED).count()
    assert (
        sum(ticks(body_log).values())
        <= done + Execution.objects.filter(status=ExecutionStatus.RUNNING).count()
    )
    assert not Execution.objects.filter(status=ExecutionStatus.FAILED).exists()


@pytest.fixture
def env(process_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return {
        **process_env,
        "DJANGO_SETTINGS_MODULE": "tests.settings_declared",
        "DUECOURSE_TEST_BODY_LOG": str(tmp_path / "bodies.log"),
        "SCHEDULING_QUEUE_IDLE_WARN": "0",
    }


def test_beat_entries_fire_and_a_deploy_takes_effect_at_the_next_start(
    processes: Processes, env: dict[str, str]
) -> None:
    """``celery beat -S`` alone runs a ``beat_schedule``; a second start changes nothing; a
    release that changes one entry, removes one and adds one takes effect at its start,
    the removed entry's job paused with its history and no further runs."""
    body_log = Path(env["DUECOURSE_TEST_BODY_LOG"])
    first = {
        **env,
        "DUECOURSE_TEST_DECLARATIONS": declared(
            {
                "kept": {"task": PLAIN_TASK, "every": 1, "args": ["kept"]},
                "gone": {"task": PLAIN_TASK, "every": 1, "args": ["gone"]},
            }
        ),
    }
    started(processes, celery_worker_command(name="w"), first, "worker")
    beat = started(processes, beat_command(), first, "beat")
    wait_for(
        lambda: ticks(body_log)["tick kept"] >= 2 and ticks(body_log)["tick gone"] >= 2,
        timeout=30,
        message="both beat_schedule entries fire, every second",
    )
    assert set(Job.objects.values_list("declared_in", "declared_key")) == {
        ("beat_schedule", "kept"),
        ("beat_schedule", "gone"),
    }
    stop(processes, beat)
    trail = JobChange.objects.count()

    # A second start of the same code changes nothing.
    again = started(processes, scheduler_command(), first, "scheduler-again")
    before = ticks(body_log)["tick kept"]
    wait_for(lambda: ticks(body_log)["tick kept"] > before, timeout=20, message="runs go on")
    assert JobChange.objects.count() == trail
    stop(processes, again)

    # The next release: "kept" changed, "gone" removed, "added" new.
    second = {
        **first,
        "DUECOURSE_TEST_DECLARATIONS": declared(
            {"kept": {"task": PLAIN_TASK, "every": 1, "args": ["kept-2"]}},
            {"added": {"task": PLAIN_TASK, "every": "PT1S", "args": ["added"], "timeout": 20}},
        ),
    }
    started(processes, scheduler_command(), second, "scheduler-new")
    wait_for(
        lambda: ticks(body_log)["tick kept-2"] >= 2 and ticks(body_log)["tick added"] >= 2,
        timeout=20,
        message="the changed and the added entries fire",
    )
    gone = Job.objects.get(name="gone")
    assert gone.status == JobStatus.PAUSED
    assert gone.pause_reason.startswith("removed from beat_schedule")
    runs = Execution.objects.filter(job=gone).count()
    assert runs >= 2  # its history is kept
    kept = Job.objects.get(name="kept")
    changed = JobChange.objects.get(job=kept, action="changed")
    assert changed.changes["args"] == {"from": ["kept"], "to": ["kept-2"]}
    assert changed.source == "code"
    wait_for(
        lambda: ticks(body_log)["tick added"] >= 4, timeout=20, message="the scheduler goes on"
    )
    assert Execution.objects.filter(job=gone).count() == runs  # no further runs
    each_run_once(body_log)


def test_two_schedulers_with_different_declarations_side_by_side_change_a_job_once(
    processes: Processes, env: dict[str, str]
) -> None:
    """A rolling deploy: the old release's scheduler and the new one's start at once, then
    the old one restarts; the job changes once (old to new) and every occurrence runs once."""
    body_log = Path(env["DUECOURSE_TEST_BODY_LOG"])
    old = {
        **env,
        "DUECOURSE_TEST_DECLARATIONS": declared(
            {}, {"tick": {"task": PLAIN_TASK, "every": "PT1S", "args": ["old"], "timeout": 20}}
        ),
    }
    new = {
        **env,
        "DUECOURSE_TEST_DECLARATIONS": declared(
            {}, {"tick": {"task": PLAIN_TASK, "every": "PT1S", "args": ["new"], "timeout": 20}}
        ),
    }
    started(processes, celery_worker_command(name="w"), old, "worker")
    old_scheduler = started(processes, scheduler_command(), old, "old-scheduler")
    wait_for(lambda: ticks(body_log)["tick old"] >= 1, timeout=30, message="the old set runs")
    started(processes, scheduler_command(), new, "new-scheduler")
    started(processes, beat_command(), new, "new-beat")  # two of the new release at once
    wait_for(lambda: ticks(body_log)["tick new"] >= 2, timeout=20, message="the new set runs")
    stop(processes, old_scheduler)
    restarted = started(processes, scheduler_command(), old, "old-scheduler-again")
    wait_for(
        lambda: "declarations.skipped" in processes.log_of(restarted),
        timeout=20,
        message="the old release's scheduler leaves the newer declarations alone",
    )
    count = ticks(body_log)["tick new"]
    wait_for(lambda: ticks(body_log)["tick new"] >= count + 2, timeout=20, message="runs go on")
    job = Job.objects.get(name="tick")
    assert job.args == ["new"]
    assert JobChange.objects.filter(job=job, action="changed").count() == 1
    assert Job.objects.count() == 1
    each_run_once(body_log)
