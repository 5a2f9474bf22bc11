# The test gateway's models leave this app for subscriptions.testgateway (its own migration
# 0001 takes them over). Only the state changes: the tables, their rows, indexes and
# constraints stay where they are, for that app to use, or for the host to drop
# (docs/install.md, "Upgrading").

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('subscriptions', '0009_mysql_partial_uniques'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='GatewayCharge'),
                migrations.DeleteModel(name='GatewayDecline'),
                migrations.DeleteModel(name='GatewayScript'),
            ],
            database_operations=[],
        ),
    ]
