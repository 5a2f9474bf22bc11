"""Occurrences whose task a process does not know wait for one that does (rolling deploys).

Two nullable columns, read by the old release as absent and written by nobody else, so the
migration runs before the new code is deployed; two partial indexes that stay empty outside a
rolling deploy.
"""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0014_overlap_policies'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='execution',
            name='task_unknown_since',
            field=models.DateTimeField(blank=True, help_text='Since when it waits for a worker (or publisher) that knows its task; it fails after SCHEDULING_UNKNOWN_TASK_GRACE.', null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='task_unknown_since',
            field=models.DateTimeField(blank=True, editable=False, help_text='Since when its due occurrence waits for a scheduler that knows its task (a rolling deploy); it fails after SCHEDULING_UNKNOWN_TASK_GRACE.', null=True),
        ),
        migrations.AddIndex(
            model_name='execution',
            index=models.Index(condition=models.Q(('status', 'retry'), ('task_unknown_since__isnull', False)), fields=['task'], name='execution_task_unknown_idx'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('task_unknown_since__isnull', False)), fields=['task'], name='job_task_unknown_idx'),
        ),
    ]
