"""The production topology of deploy/Procfile, two schedulers and two workers against one
PostgreSQL and one Redis, survives losing a scheduler and a worker: every occurrence still gets
exactly one execution, and every execution completes."""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from deploy.topology import commands
from scheduling.models import Attempt, AttemptOutcome, Execution, Job, Overlap, Schedule
from tests.conftest import Processes, wait_for
from tests.factories import create_job

JOBS = 10
#: The window: the kill comes once both workers ran something (a few seconds in), and the
#: killed worker's run is reaped after the lease (6 s), while occurrences still fall due.
SECONDS = 16
SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class Load:
    """``job_ids``, each due every second from ``first`` to ``last`` inclusive."""

    job_ids: tuple[int, ...]
    first: datetime
    last: datetime

    @property
    def occurrences(self) -> list[datetime]:
        return [self.first + i * SECOND for i in range(int((self.last - self.first) / SECOND) + 1)]

    @property
    def expected(self) -> int:
        return len(self.job_ids) * len(self.occurrences)

    def executions(self) -> Any:
        return Execution.objects.filter(job_id__in=self.job_ids)


def create_load(owner: Any, *, jobs: int, seconds: int, lead: float) -> Load:
    """``jobs`` jobs sharing one PT1S schedule whose window holds ``seconds`` occurrences."""
    now = timezone.now()
    first = (now + lead * SECOND).replace(microsecond=0) + SECOND
    last = first + (seconds - 1) * SECOND
    schedule = Schedule.objects.create(
        owner=owner, interval="PT1S", starts_at=first, ends_at=last
    )
    for i in range(jobs):
        create_job(
            owner=owner,
            name=f"load-{i}",
            task="scheduling.diagnostics.noop",
            schedule=schedule,
            overlap=Overlap.ALLOW.value,
            now=now,
        )
    ids = tuple(Job.objects.filter(schedule=schedule).values_list("pk", flat=True))
    return Load(job_ids=ids, first=first, last=last)


def recovery_env(process_env: dict[str, str]) -> dict[str, str]:
    """Recovery knobs turned down so the test sees it within seconds, not minutes."""
    return {
        **process_env,
        "SCHEDULING_STALE_AFTER": "6",
        "SCHEDULING_REQUEUE_AFTER": "8",
        "SCHEDULING_LIVENESS_INTERVAL": "1",
    }


def executions_of(load: Load) -> list[tuple[int, Any, str]]:
    return list(load.executions().values_list("job_id", "scheduled_for", "status"))


@pytest.mark.slow
@pytest.mark.mariadb_faults
@pytest.mark.django_db(transaction=True)
def test_killing_a_scheduler_and_a_worker_loses_and_doubles_no_occurrence(
    owner: Any, processes: Processes, process_env: dict[str, str]
) -> None:
    env = recovery_env(process_env)
    argvs = commands()
    assert set(argvs) == {"scheduler-a", "scheduler-b", "worker-a", "worker-b"}
    started = {name: processes.start(argv, env=env, name=name) for name, argv in argvs.items()}
    for name in ("worker-a", "worker-b"):
        wait_for(
            lambda name=name: "worker.ready" in processes.log_of(started[name]),
            timeout=90,
            message=f"{name} ready",
        )
    load = create_load(owner, jobs=JOBS, seconds=SECONDS, lead=2)

    # Both workers take a share before anything is killed.
    def ran_on_both() -> bool:
        workers = set(load.executions().exclude(worker="").values_list("worker", flat=True))
        return {w.split("@")[0] for w in workers} >= {"worker-a", "worker-b"}

    wait_for(ran_on_both, timeout=30, message="executions on both workers")
    processes.kill(started["scheduler-a"], signal.SIGKILL)
    processes.kill(started["worker-a"], signal.SIGKILL)  # its whole group: main and pool

    wait_for(
        lambda: (
            len(executions_of(load)) >= load.expected
            and all(status == "completed" for *_, status in executions_of(load))
        ),
        timeout=SECONDS + 60,
        interval=0.5,
        message=f"{load.expected} executions completed; now "
        f"{dict(Counter(s for *_, s in executions_of(load)))}",
    )
    rows = executions_of(load)
    per_occurrence = Counter((job, at) for job, at, _ in rows)
    expected = {(job, at) for job in load.job_ids for at in load.occurrences}
    assert set(per_occurrence) == expected, "an occurrence was lost or is outside the window"
    assert max(per_occurrence.values()) == 1  # and the unique key says so too

    # A second attempt only where the killed worker was running one, first marked abandoned.
    attempts = Counter(
        Attempt.objects.filter(execution__job_id__in=load.job_ids).values_list(
            "execution_id", flat=True
        )
    )
    retried = [execution for execution, n in attempts.items() if n > 1]
    assert len(retried) <= 1, retried  # worker-a ran one execution at a time
    for execution in retried:
        first = Attempt.objects.get(execution_id=execution, number=1)
        assert first.outcome == AttemptOutcome.ABANDONED
        assert first.worker.startswith("worker-a@")
    assert Execution.objects.filter(job_id__in=load.job_ids, duplicates__gt=0).count() <= 2
    assert started["scheduler-b"].poll() is None and started["worker-b"].poll() is None


@pytest.mark.slow
def test_the_launcher_prefixes_output_and_stops_everything(
    processes: Processes, tmp_path: Any
) -> None:
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        "# two long-running processes\n"
        "one: python -c \"import time; print('one up', flush=True); time.sleep(60)\"\n"
        "two: python -c \"import time; print('two up', flush=True); time.sleep(60)\"\n"
    )
    launcher = processes.start(
        [sys.executable, "deploy/topology.py", str(procfile)],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        name="launcher",
    )
    wait_for(
        lambda: (
            "one | one up" in processes.log_of(launcher)
            and "two | two up" in processes.log_of(launcher)
        ),
        timeout=20,
        message="both processes' output, prefixed",
    )
    os.kill(launcher.pid, signal.SIGTERM)
    assert launcher.wait(timeout=40) == 0


def test_a_malformed_procfile_line_is_named(tmp_path: Any) -> None:
    procfile = tmp_path / "Procfile"
    procfile.write_text("worker celery -A config worker\n")
    with pytest.raises(SystemExit, match=r"Procfile:1: expected 'name: command'"):
        commands(procfile)
