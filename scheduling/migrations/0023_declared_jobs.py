"""Jobs declared in code: where each was declared, and the declaration sets the ledger has seen."""

import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0022_message_drops'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='DeclarationSet',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('fingerprint', models.CharField(max_length=64, unique=True)),
                ('sequence', models.PositiveBigIntegerField()),
                ('entries', models.PositiveIntegerField(default=0, help_text='How many entries it declares.')),
                ('first_seen_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('applied_at', models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.RemoveConstraint(
            model_name='jobchange',
            name='job_change_source_valid',
        ),
        migrations.AddField(
            model_name='job',
            name='declared_fingerprint',
            field=models.CharField(blank=True, db_default='', default='', max_length=64),
        ),
        migrations.AddField(
            model_name='job',
            name='declared_in',
            field=models.CharField(blank=True, choices=[('', 'not declared'), ('beat_schedule', 'beat_schedule'), ('SCHEDULING_JOBS', 'SCHEDULING_JOBS')], db_default='', default='', max_length=16),
        ),
        migrations.AddField(
            model_name='job',
            name='declared_key',
            field=models.CharField(blank=True, db_default='', default='', max_length=200),
        ),
        migrations.AddField(
            model_name='job',
            name='declared_release',
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='declared_task',
            field=models.CharField(blank=True, db_default='', default='', max_length=200),
        ),
        migrations.AlterField(
            model_name='jobchange',
            name='source',
            field=models.CharField(choices=[('admin', 'Admin'), ('command', 'Command'), ('api', 'Api'), ('system', 'System'), ('code', 'Code')], max_length=16),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('declared_in', ''), _negated=True), fields=['declared_in', 'declared_key'], name='job_declared_idx'),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.CheckConstraint(condition=models.Q(('declared_in__in', ['', 'beat_schedule', 'SCHEDULING_JOBS'])), name='job_declared_in_valid'),
        ),
        migrations.AddConstraint(
            model_name='jobchange',
            constraint=models.CheckConstraint(condition=models.Q(('source__in', ['admin', 'command', 'api', 'system', 'code'])), name='job_change_source_valid'),
        ),
    ]
