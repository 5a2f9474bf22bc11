"""The emailer's admin: projects and participants (with CSV import), tasks (with a preview),
and the read-only run history and delivery ledger.

Every write goes through ``emailer.services`` or the model's ``clean``, so the admin refuses
what the command line refuses, with the same reason beside the same field. One module per
model's pages (``projects``, ``tasks``, ``history``), on what ``common`` holds. Django's admin
autodiscovery imports this package alone, so it imports each module here: importing one
registers its pages.
"""

from __future__ import annotations

from emailer.admin import history, projects, tasks
from emailer.admin.history import DeliveryAdmin, SendEmailHistoryAdmin
from emailer.admin.projects import ParticipantAdmin, ProjectAdmin
from emailer.admin.tasks import SendEmailTaskAdmin

__all__ = [
    "DeliveryAdmin",
    "ParticipantAdmin",
    "ProjectAdmin",
    "SendEmailHistoryAdmin",
    "SendEmailTaskAdmin",
    "history",
    "projects",
    "tasks",
]
