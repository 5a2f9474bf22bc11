"""The two partial unique constraints, on MySQL and MariaDB, which have no partial indexes.

Django does not make a ``UniqueConstraint`` with a condition there (models.W036). Each is
made instead as a unique index over the constrained columns and a generated column that is 1
where the condition holds and NULL elsewhere: NULLs never collide in a unique index, so only
rows under the condition are held to be unique, as the partial index does on PostgreSQL and
SQLite. On other databases this migration does nothing.
"""

from django.db import migrations

#: (table, generated column, its expression, index name, the index's columns)
UNIQUES = (
    (
        "subscriptions_duebatch",
        "open_key",
        "IF(closed_at IS NULL, 1, NULL)",
        "duebatch_one_open_mysql",
        "due_at, block, open_key",
    ),
    (
        "subscriptions_order",
        "parent_key",
        "IF(parent_id IS NULL, 1, NULL)",
        "order_one_parent_mysql",
        "subscription_id, parent_key",
    ),
)


def make(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    for table, column, expression, index, columns in UNIQUES:
        schema_editor.execute(
            f"ALTER TABLE {table} ADD COLUMN {column} TINYINT AS ({expression}) STORED, "
            f"ADD UNIQUE INDEX {index} ({columns})"
        )


def unmake(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    for table, column, _, index, _ in UNIQUES:
        schema_editor.execute(f"ALTER TABLE {table} DROP INDEX {index}, DROP COLUMN {column}")


class Migration(migrations.Migration):
    # MySQL commits each ALTER TABLE by itself; Django refuses DDL inside its transaction.
    atomic = False
    dependencies = [("subscriptions", "0008_orders_by_time_placed")]
    operations = [migrations.RunPython(make, unmake)]
