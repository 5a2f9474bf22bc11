"""Console lines for people: name the job in each structured log line that carries only ids.

``manage.py runstack`` passes its children's output through ``JobNames.annotate``, so
``execution.completed execution=12 job=4`` reads ``execution.completed name=quick execution=12
job=4``. Names are looked up once per id and kept; a line without an id is left alone.
"""

from __future__ import annotations

import re
import threading

from django.db import connection

from scheduling.models import Execution, Job

_EVENT = re.compile(r"\b((?:execution|job)\.[a-z_]+)\b")
_JOB = re.compile(r"\bjob=(\d+)\b")
_EXECUTION = re.compile(r"\bexecution=(\d+)\b")


class JobNames:
    """A cache of job names by job id and by execution id, safe to share between threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[int, str | None] = {}
        self._executions: dict[int, str | None] = {}

    def _job(self, job_id: int) -> str | None:
        with self._lock:
            if job_id in self._jobs:
                return self._jobs[job_id]
        name = Job.objects.filter(pk=job_id).values_list("name", flat=True).first()
        with self._lock:
            self._jobs[job_id] = name
        return name

    def _execution(self, execution_id: int) -> str | None:
        with self._lock:
            if execution_id in self._executions:
                return self._executions[execution_id]
        row = Execution.objects.filter(pk=execution_id).values("job__name", "task").first()
        name = (row["job__name"] or row["task"]) if row else None
        with self._lock:
            self._executions[execution_id] = name
        return name

    def annotate(self, line: str) -> str:
        """``line`` with ``name=<job>`` after its event name, when it names a job or execution."""
        event = _EVENT.search(line)
        if event is None or " name=" in line:
            return line
        try:
            by_job = _JOB.search(line)
            name = self._job(int(by_job.group(1))) if by_job else None
            if name is None and (by_execution := _EXECUTION.search(line)):
                name = self._execution(int(by_execution.group(1)))
        except Exception:  # the console must never stop for a lookup; reconnect next time
            connection.close()
            return line
        if not name:
            return line
        return f"{line[: event.end()]} name={name}{line[event.end() :]}"


#: Celery's own lines about each task, which repeat the engine's ``execution.started`` and
#: ``execution.completed`` lines: said once is enough.
_CELERY_TASK_LINE = re.compile(r"\bTask [\w.]+\[[0-9a-f-]+\] (received|succeeded in)\b")
#: The prefix Celery puts on whatever a worker process writes to stderr (the project's own log
#: lines, which already carry their time and level): ``[2030-… 09:00:00,123: WARNING/Fork…] ``.
_REDIRECTED = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+: WARNING/[\w-]+\] ")


class Quieter:
    """What ``runstack`` drops from its children's output so each execution is printed once:
    Celery's received/succeeded lines, its re-tagging of the project's own log lines as
    WARNING (with a second timestamp), and the SecurityWarning block it prints when started
    as root. One per child (the SecurityWarning block spans lines)."""

    def __init__(self) -> None:
        self._in_warning = False

    def keep(self, line: str) -> str | None:
        """``line`` as it should be printed, or None to drop it."""
        if self._in_warning:
            if not line.strip():
                self._in_warning = False
            return None
        if "SecurityWarning" in line:
            self._in_warning = True
            return None
        if _CELERY_TASK_LINE.search(line):
            return None
        return _REDIRECTED.sub("", line)
