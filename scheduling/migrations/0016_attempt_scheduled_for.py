"""Each attempt carries its execution's ``scheduled_for``: the key the history is partitioned
by (0017), so an attempt lies in the same period as its execution. ``task_id`` becomes a plain
index: a unique constraint on a partitioned table must hold the partition key, and the id is
unique by its making.

The column is filled from the executions, then made required: the previous release's workers
do not write it, so apply this with the new release's processes (docs/operations.md,
*Partitions*).
"""

import uuid

from django.db import migrations, models

FILL = """
UPDATE scheduling_attempt SET scheduled_for = (
    SELECT e.scheduled_for FROM scheduling_execution e WHERE e.id = scheduling_attempt.execution_id
)
"""


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0015_task_unknown'),
    ]

    operations = [
        migrations.AddField(
            model_name='attempt',
            name='scheduled_for',
            field=models.DateTimeField(null=True),
        ),
        migrations.RunSQL(FILL, migrations.RunSQL.noop),
        migrations.AlterField(
            model_name='attempt',
            name='scheduled_for',
            field=models.DateTimeField(help_text="The execution's, copied: the key both tables are partitioned by, so an attempt sits in the same period as its execution."),
        ),
        migrations.AlterField(
            model_name='execution',
            name='task_id',
            field=models.UUIDField(db_index=True, default=uuid.uuid4, editable=False),
        ),
    ]
