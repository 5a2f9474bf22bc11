"""A worker counts the broker messages it acknowledged without running them, by kind."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0021_job_change_actions"),
    ]

    operations = [
        migrations.CreateModel(
            name="MessageDrops",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "worker",
                    models.CharField(help_text="The worker's name (name@host).", max_length=255),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("content_type", "Content Type"),
                            ("undecodable", "Undecodable"),
                            ("malformed", "Malformed"),
                            ("too_deep", "Too Deep"),
                            ("too_large", "Too Large"),
                            ("arguments", "Arguments"),
                            ("rejected", "Rejected"),
                        ],
                        max_length=16,
                    ),
                ),
                ("dropped_total", models.PositiveBigIntegerField(default=0)),
                ("last_dropped_at", models.DateTimeField()),
                (
                    "last_reason",
                    models.TextField(blank=True, help_text="Why the latest one was dropped."),
                ),
            ],
            options={
                "verbose_name_plural": "message drops",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("worker", "kind"), name="message_drops_one_per_kind"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            (
                                "kind__in",
                                [
                                    "content_type",
                                    "undecodable",
                                    "malformed",
                                    "too_deep",
                                    "too_large",
                                    "arguments",
                                    "rejected",
                                ],
                            )
                        ),
                        name="message_drops_kind_valid",
                    ),
                ],
            },
        ),
    ]
