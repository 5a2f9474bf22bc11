"""Where Django's admin autodiscovery looks: the admin itself is ``scheduling.web.admin``.

Importing it registers the model admins; the names are here for code that reaches them by the
app's ``admin`` module.
"""

from scheduling.web.admin import AttemptInline, ExecutionAdmin, JobAdmin, ScheduleAdmin

__all__ = ["AttemptInline", "ExecutionAdmin", "JobAdmin", "ScheduleAdmin"]
