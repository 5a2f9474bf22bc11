"""The settled hours of the dashboard's hourly chart, counted once and kept for every web
process (``scheduling.stages.hours``)."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0019_dashboard_reads_from_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="SettledHour",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hour", models.DateTimeField(help_text="The hour's start.", unique=True)),
                (
                    "counts",
                    models.JSONField(
                        help_text='Executions due in the hour by job owner ("none": no owner, or a Django task run) and status: {"7": {"completed": 40, "failed": 1}}.'
                    ),
                ),
                ("counted_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
        ),
    ]
