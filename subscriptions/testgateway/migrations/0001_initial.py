# Takes over the test gateway's tables from the subscriptions app (its 0010 dropped them from
# its state and kept them), creating a table only where none exists: a database that had
# scripted declines keeps them. subscriptions/testgateway/operations.py says how.

import django.utils.timezone
import subscriptions.models.validation
from django.db import migrations, models

from subscriptions.testgateway.operations import (
    NEW_LABEL,
    OLD_LABEL,
    CreateModelUnlessTableExists,
    move_content_types,
)


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('subscriptions', '0010_test_gateway_app'),
    ]

    operations = [
        CreateModelUnlessTableExists(
            name='GatewayCharge',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('reference', models.CharField(max_length=64, unique=True)),
                ('idempotency_key', models.CharField(max_length=255, unique=True)),
                ('customer', models.CharField(max_length=100)),
                ('amount', models.DecimalField(decimal_places=5, max_digits=20)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'db_table': 'subscriptions_gatewaycharge',
            },
        ),
        CreateModelUnlessTableExists(
            name='GatewayDecline',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('idempotency_key', models.CharField(max_length=255)),
                ('customer', models.CharField(max_length=100)),
                ('amount', models.DecimalField(decimal_places=5, max_digits=20)),
                ('reason', models.CharField(max_length=255)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'db_table': 'subscriptions_gatewaydecline',
                'indexes': [models.Index(fields=['idempotency_key', '-created_at'], name='gatewaydecline_key')],
            },
        ),
        CreateModelUnlessTableExists(
            name='GatewayScript',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('customer', models.CharField(max_length=100, unique=True, validators=[subscriptions.models.validation.validate_plain_text])),
                ('declines_left', models.IntegerField(default=0)),
                ('errors_left', models.IntegerField(default=0)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'db_table': 'subscriptions_gatewayscript',
                'constraints': [models.CheckConstraint(condition=models.Q(('declines_left__gte', 0), ('errors_left__gte', 0)), name='gatewayscript_counts_not_negative')],
            },
        ),
        migrations.RunPython(
            move_content_types(OLD_LABEL, NEW_LABEL),
            move_content_types(NEW_LABEL, OLD_LABEL),
            elidable=True,
        ),
    ]
