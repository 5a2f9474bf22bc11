"""Vacuum the job and execution tables early, as a queue's tables need.

Every claim moves a job's ``next_due_at`` and leaves a dead entry at the head of ``job_due_idx``;
the scheduler's probe and claim read that head on every tick. PostgreSQL's default waits until
20 % of a table has changed, which after a flood of claims means index scans stepping over
thousands of dead entries. On other databases this migration does nothing.
"""

from django.db import migrations

TABLES = ("scheduling_job", "scheduling_execution")


def tune(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(
            f"ALTER TABLE {table} SET (autovacuum_vacuum_scale_factor = 0.01, "
            "autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02)"
        )


def untune(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(
            f"ALTER TABLE {table} RESET (autovacuum_vacuum_scale_factor, "
            "autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor)"
        )


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0001_initial")]
    operations = [migrations.RunPython(tune, untune)]
