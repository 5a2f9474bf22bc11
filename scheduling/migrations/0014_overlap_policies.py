"""Three more overlap policies (buffer_one, buffer_all, cancel_other) and the SUPERSEDED state.

``overlap`` grows to 16 characters and its check takes the new names; an execution may be
``superseded`` (a later occurrence ran in its place). ``job_due_idx`` also holds the active
``cancel_other`` jobs whose run is in flight: their next occurrence is due work, since it
cancels that run. Reversible while no row uses a new name.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0013_schedule_rrule"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="execution",
            name="execution_status_valid",
        ),
        migrations.RemoveConstraint(
            model_name="job",
            name="job_overlap_valid",
        ),
        migrations.RemoveIndex(
            model_name="job",
            name="job_due_idx",
        ),
        migrations.AlterField(
            model_name="execution",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("retry", "Retry"),
                    ("completed", "Completed"),
                    ("failed", "Failed"),
                    ("skipped", "Skipped"),
                    ("superseded", "Superseded"),
                    ("cancelled", "Cancelled"),
                    ("waiting", "Waiting"),
                ],
                default="pending",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="current_execution",
            field=models.ForeignKey(
                blank=True,
                help_text="With any overlap but allow, the unfinished execution the next occurrence waits for (or, with cancel_other, cancels).",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="scheduling.execution",
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="overlap",
            field=models.CharField(
                choices=[
                    ("forbid", "Forbid"),
                    ("allow", "Allow"),
                    ("buffer_one", "Buffer One"),
                    ("buffer_all", "Buffer All"),
                    ("cancel_other", "Cancel Other"),
                ],
                default="forbid",
                max_length=16,
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(
                    ("status", "active"),
                    models.Q(
                        ("current_execution__isnull", True),
                        ("overlap", "cancel_other"),
                        _connector="OR",
                    ),
                ),
                fields=["next_due_at"],
                name="job_due_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="execution",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "pending",
                            "queued",
                            "running",
                            "retry",
                            "completed",
                            "failed",
                            "skipped",
                            "superseded",
                            "cancelled",
                            "waiting",
                        ],
                    )
                ),
                name="execution_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("overlap__in", ["forbid", "allow", "buffer_one", "buffer_all", "cancel_other"])
                ),
                name="job_overlap_valid",
            ),
        ),
    ]
