"""The admin: jobs and schedules are edited here; the execution history is read-only.

One module per model admin (``jobs``, ``schedules``, ``executions``), beside what they share:
the base class and owner scoping (``base``), who owns a new row and how a superuser names
another owner (``owners``: never by typing an id), the forms (``forms``), the list filters
(``filters``) and how things are shown (``display``). Importing this package registers the
model admins; Django's autodiscovery reaches it through ``scheduling.admin``.

Permissions: the targets a job's form offers, and accepts when saved, are the ones the user may
target (``scheduling.rules.permissions``); every action that changes state needs the change
permission on jobs (executions' cancel and retry too) and is written to the admin log.
"""

from scheduling.web.admin import executions, jobs, schedules
from scheduling.web.admin.executions import AttemptInline, ExecutionAdmin
from scheduling.web.admin.jobs import JobAdmin
from scheduling.web.admin.schedules import ScheduleAdmin

__all__ = [
    "AttemptInline",
    "ExecutionAdmin",
    "JobAdmin",
    "ScheduleAdmin",
    "executions",
    "jobs",
    "schedules",
]
