"""The audit trail records what people and code do to a job's executions too (run now, cancel,
retry, backfill) and a re-plan after its schedule was edited; ``who`` says how the command
line names its user."""

from django.db import migrations, models

ACTIONS = [
    "created",
    "changed",
    "paused",
    "resumed",
    "removed",
    "replanned",
    "run_now",
    "cancelled",
    "retried",
    "backfilled",
]


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0020_settled_hours"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="jobchange",
            name="job_change_action_valid",
        ),
        migrations.AlterField(
            model_name="jobchange",
            name="action",
            field=models.CharField(
                choices=[
                    ("created", "Created"),
                    ("changed", "Changed"),
                    ("paused", "Paused"),
                    ("resumed", "Resumed"),
                    ("removed", "Removed"),
                    ("replanned", "Replanned"),
                    ("run_now", "Ran Now"),
                    ("cancelled", "Cancelled"),
                    ("retried", "Retried"),
                    ("backfilled", "Backfilled"),
                ],
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="jobchange",
            name="who",
            field=models.CharField(
                help_text="A username; on the command line the process's OS account, or "
                '"USER (os: ACCOUNT)" with --by; or system.',
                max_length=150,
            ),
        ),
        migrations.AddConstraint(
            model_name="jobchange",
            constraint=models.CheckConstraint(
                condition=models.Q(("action__in", ACTIONS)),
                name="job_change_action_valid",
            ),
        ),
    ]
