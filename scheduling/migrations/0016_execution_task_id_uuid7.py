"""New executions take time-ordered task ids (UUIDv7); a change of the model's default only,
no SQL: the rows already written keep their ids, and the broker sees a UUID either way.
"""

from django.db import migrations, models

import scheduling.ids


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0015_task_unknown"),
    ]

    operations = [
        migrations.AlterField(
            model_name="execution",
            name="task_id",
            field=models.UUIDField(default=scheduling.ids.uuid7, editable=False, unique=True),
        ),
    ]
