"""Two reads of /metrics and the dashboard that read the table read an index alone.

``execution_item_failures_idx`` adds ``item_failures`` to its key, so the 24-hour sum of
failed items no longer visits a row per run that reported some (a thousand random heap pages
a day at a million executions a day, over 100 ms cold); ``execution_task_runs_idx`` holds the
runs enqueued through Django's Tasks framework, so counting the last hour's by status no
longer filters every execution of the hour on the table. Both are partial: an execution of a
job with no failed items enters neither, so the claim writes no more than before.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0018_execution_task_id_uuid7"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="execution",
            name="execution_item_failures_idx",
        ),
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(
                condition=models.Q(("item_failures__gt", 0)),
                fields=["scheduled_for", "item_failures"],
                name="execution_item_failures_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(
                condition=models.Q(("call__isnull", False)),
                fields=["scheduled_for", "status"],
                name="execution_task_runs_idx",
            ),
        ),
    ]
