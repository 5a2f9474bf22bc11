"""On PostgreSQL, executions and attempts move into tables partitioned by ``scheduled_for``
(``scheduling.ledger.partitions``): retention drops a period's partitions whole.

The move copies every row under a lock of both tables (and the jobs'): workers and schedulers
wait for it and lose nothing; runs that were running get a fresh heartbeat at its end. Back
is the same move into plain tables, keys and indexes as the models declare. SQLite keeps plain
tables: nothing happens there.
"""

from django.conf import settings
from django.db import migrations

from scheduling.ledger import partitions

DEFAULT_DAYS = 7


def days() -> int:
    return int(getattr(settings, "SCHEDULING_HISTORY_PARTITION_DAYS", DEFAULT_DAYS))


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    partitions.partition(
        schema_editor,
        apps.get_model("scheduling", "Execution"),
        apps.get_model("scheduling", "Attempt"),
        apps.get_model("scheduling", "Job"),
        days=days(),
    )


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    partitions.unpartition(
        schema_editor,
        apps.get_model("scheduling", "Execution"),
        apps.get_model("scheduling", "Attempt"),
        apps.get_model("scheduling", "Job"),
    )


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0016_attempt_scheduled_for'),
    ]

    operations = [
        migrations.RunPython(forward, backward, elidable=False),
    ]
