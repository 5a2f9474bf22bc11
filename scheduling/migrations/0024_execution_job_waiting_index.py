"""Waiting executions by job: the claim counts them to keep each job's waiting occurrences
within ``SCHEDULING_MAX_WAITING_PER_JOB``. Partial, so it holds only waiting rows."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0023_declared_jobs"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(
                condition=models.Q(("status", "waiting")),
                fields=["job"],
                name="execution_job_waiting_idx",
            ),
        ),
    ]
