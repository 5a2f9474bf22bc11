"""Schedules get owners, as jobs have.

An existing schedule is given the owner of the jobs that use it when they all belong to one
user, and the inactive system owner (``duecourse-system``, which owns the jobs made from code)
otherwise: a schedule shared between owners, and a schedule no job uses. The column is added
empty, filled, and then made required, so no schedule is left without an owner.
"""

from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.db import migrations, models
from django.db.models import Count, Min, OuterRef, Subquery

SYSTEM_OWNER = "duecourse-system"  # scheduling.stages.jobs.SYSTEM_OWNER, as it was written here


def give_owners(apps, schema_editor):
    Schedule = apps.get_model("scheduling", "Schedule")
    Job = apps.get_model("scheduling", "Job")
    sole_owner = (
        Job.objects.filter(schedule=OuterRef("pk"))
        .values("schedule")
        .annotate(owners=Count("owner", distinct=True), first=Min("owner"))
        .filter(owners=1)
        .values("first")
    )
    Schedule.objects.filter(owner__isnull=True).update(owner=Subquery(sole_owner))
    if not Schedule.objects.filter(owner__isnull=True).exists():
        return
    User = apps.get_model(settings.AUTH_USER_MODEL)
    system, _ = User.objects.get_or_create(
        username=SYSTEM_OWNER, defaults={"is_active": False, "password": make_password(None)}
    )
    Schedule.objects.filter(owner__isnull=True).update(owner=system)


class Migration(migrations.Migration):
    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("scheduling", "0010_running_limits"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="owner",
            field=models.ForeignKey(
                null=True,
                on_delete=models.deletion.CASCADE,
                related_name="owned_schedules",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.RunPython(give_owners, migrations.RunPython.noop, elidable=True),
        migrations.AlterField(
            model_name="schedule",
            name="owner",
            field=models.ForeignKey(
                on_delete=models.deletion.CASCADE,
                related_name="owned_schedules",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
    ]
