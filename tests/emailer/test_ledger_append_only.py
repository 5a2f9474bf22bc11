"""The ledgers are append-only from the admin, for everyone, superusers included.

Deliveries and the send history can be read, never added, changed or deleted there (not by the
delete page, not by the delete_selected action). A run decides who has had a task's mail from
the deliveries, so nothing else deletable may take them along: a participant who has been
mailed, or a history row, cannot be deleted alone anywhere, and a task or project with a
ledger not from the admin; ``emailer project remove`` still removes a project whole, ledger
and all.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.db.models import RestrictedError
from django.test import Client
from django.urls import reverse

from emailer.models import Delivery, Participant, SendEmailHistory
from emailer.sending import run_send_email_task
from tests.emailer.test_runs import context

pytestmark = [pytest.mark.django_db]

LEDGERS = (("delivery", Delivery), ("sendemailhistory", SendEmailHistory))


@pytest.fixture
def mailed(smtp_settings: Any, make_project: Any, make_task: Any) -> Any:
    """A task that has mailed its two participants once: two deliveries, one history row."""
    task = make_task(make_project(participants=2))
    run_send_email_task(task, context())
    assert Delivery.objects.filter(state="sent").count() == 2
    return task


@pytest.fixture
def staff_with_every_permission(django_user_model: Any) -> Client:
    user = django_user_model.objects.create_user("keen", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="emailer"))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("who", ["superuser", "staff with every emailer permission"])
def test_no_one_adds_changes_or_deletes_a_ledger_row_from_the_admin(
    mailed: Any, admin_client: Client, staff_with_every_permission: Client, who: str
) -> None:
    client = admin_client if who == "superuser" else staff_with_every_permission
    for name, model in LEDGERS:
        row = model.objects.first()

        def url(view: str, *args: Any, name: str = name) -> str:
            return reverse(f"admin:emailer_{name}_{view}", args=args)

        assert client.get(url("add")).status_code == 403, name
        assert client.post(url("add"), {}).status_code == 403, name
        assert client.get(url("delete", row.pk)).status_code == 403, name
        assert client.post(url("delete", row.pk), {"post": "yes"}).status_code == 403, name
        listing = client.get(url("changelist")).content.decode()
        assert 'value="delete_selected"' not in listing, name
        client.post(
            url("changelist"),
            {"action": "delete_selected", "_selected_action": [row.pk], "post": "yes"},
        )
        page = client.get(url("change", row.pk))
        assert page.status_code == 200, name  # reading stays
        assert 'name="_save"' not in page.content.decode(), name
        client.post(url("change", row.pk), {"state": "failed", "note": "edited"})
    assert Delivery.objects.filter(state="sent").count() == 2
    assert SendEmailHistory.objects.get().note == ""


def test_a_participant_who_has_been_mailed_cannot_be_deleted_and_is_not_mailed_again(
    mailed: Any, admin_client: Client, smtp_settings: Any
) -> None:
    ada = Participant.objects.order_by("id").first()
    url = reverse("admin:emailer_participant_delete", args=[ada.pk])
    confirming = admin_client.get(url).content.decode()
    assert "<title>Cannot delete participant" in confirming
    assert "<li>delivery</li>" in confirming
    admin_client.post(url, {"post": "yes"})
    admin_client.post(
        reverse("admin:emailer_participant_changelist"),
        {"action": "delete_selected", "_selected_action": [ada.pk], "post": "yes"},
    )
    project_page = reverse("admin:emailer_project_change", args=[mailed.project_id])
    inline = admin_client.get(project_page).context["inline_admin_formsets"][0].formset
    form = {
        "name": mailed.project.name,
        "state": "active",
        "participants-TOTAL_FORMS": "2",
        "participants-INITIAL_FORMS": "2",
        "participants-MIN_NUM_FORMS": "0",
        "participants-MAX_NUM_FORMS": "1000",
    }
    for i, participant_form in enumerate(inline.forms):
        person = participant_form.instance
        form.update(
            {
                f"participants-{i}-id": person.pk,
                f"participants-{i}-project": mailed.project_id,
                f"participants-{i}-email": person.email,
                f"participants-{i}-name": person.name,
                f"participants-{i}-status": person.status,
                f"participants-{i}-DELETE": "on",
            }
        )
    refused = admin_client.post(project_page, form)
    assert refused.status_code == 200, "the project page shows why, beside the rows"
    assert Participant.objects.count() == 2 and Delivery.objects.count() == 2
    with pytest.raises(RestrictedError):  # nor from code or a shell
        ada.delete()
    with pytest.raises(RestrictedError):
        SendEmailHistory.objects.get().delete()

    before = smtp_settings.recorder.count
    later = run_send_email_task(mailed, context(when=mailed.created_at))  # a later occurrence
    assert later.get("sent", 0) == 0 and smtp_settings.recorder.count == before


def test_a_participant_never_mailed_can_be_deleted(
    mailed: Any, admin_client: Client
) -> None:
    newcomer = Participant.objects.create(project=mailed.project, email="new@example.com")
    url = reverse("admin:emailer_participant_delete", args=[newcomer.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 302
    assert not Participant.objects.filter(pk=newcomer.pk).exists()


def test_a_task_or_a_project_with_a_ledger_is_not_deleted_from_the_admin_but_removed_whole(
    mailed: Any, admin_client: Client
) -> None:
    """Deleting them would take their deliveries and history along: the admin says which
    rows stand in the way; ``emailer project remove`` (an operator's act) removes it all."""
    for name, pk in (("sendemailtask", mailed.pk), ("project", mailed.project_id)):
        url = reverse(f"admin:emailer_{name}_delete", args=[pk])
        page = admin_client.get(url).content.decode()
        assert "<li>delivery</li>" in page and "<li>send email history</li>" in page, name
        assert admin_client.post(url, {"post": "yes"}).status_code == 403, name
    assert Delivery.objects.count() == 2 and SendEmailHistory.objects.count() == 1

    call_command("emailer", "project", "remove", mailed.project.name, stdout=StringIO())
    assert not Delivery.objects.exists() and not Participant.objects.exists()
    assert not SendEmailHistory.objects.exists()
