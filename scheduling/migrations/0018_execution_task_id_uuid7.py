"""New executions take time-ordered task ids (UUIDv7); a change of the model's default only,
no SQL: the rows already written keep their ids, and the broker sees a UUID either way.
"""

import scheduling.ids
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0017_partitioned_history'),
    ]

    operations = [
        migrations.AlterField(
            model_name='execution',
            name='task_id',
            field=models.UUIDField(db_index=True, default=scheduling.ids.uuid7, editable=False),
        ),
    ]
