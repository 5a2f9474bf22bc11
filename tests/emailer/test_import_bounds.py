"""A participants CSV of any shape gets a form error or one line, never a 500 or a traceback.

The admin's upload and ``manage.py emailer participants import`` go through the same service,
so they refuse alike, naming the file and the reason: a file too large or with too many rows
(refused whole, before anything is written), text that is not UTF-8, and rows the csv module
cannot read (a field over 131,072 characters) or that hold a NUL byte (refused by line number,
the other rows still taken).
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from emailer.models import Participant

pytestmark = [pytest.mark.django_db]


def upload(client: Client, project: Any, data: bytes) -> tuple[int, list[str]]:
    """The admin's answer: the status and either the file field's errors or the messages."""
    response = client.post(
        reverse("admin:emailer_project_import", args=[project.pk]),
        {"file": SimpleUploadedFile("people.csv", data)},
    )
    if response.status_code == 200:
        return 200, list(response.context["form"].errors.get("file", []))
    return response.status_code, [str(m) for m in get_messages(response.wsgi_request)]


def command(tmp_path: Path, project: Any, data: bytes) -> str:
    path = tmp_path / "people.csv"
    path.write_bytes(data)
    out = StringIO()
    try:
        call_command("emailer", "participants", "import", project.name, str(path), stdout=out)
    except CommandError as exc:
        assert "\n" not in str(exc)
        return f"{out.getvalue()}ERROR {exc}"
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"email,name\nada@example.com,Ada\n\xe9t\xe9\n", "not UTF-8 text: invalid continuation "
         "byte at byte 31; save the file as CSV in UTF-8"),
        ("email,name\nada@example.com,Ada\n".encode("utf-16"),
         "UTF-16 text; save the file as CSV in UTF-8"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not UTF-8 text: invalid start byte at byte 0; "
         "save the file as CSV in UTF-8"),
    ],
)
def test_a_file_that_is_not_utf8_csv_is_refused_beside_the_field_and_in_one_line(
    admin_client: Client, tmp_path: Path, make_project: Any, data: bytes, reason: str
) -> None:
    project = make_project()
    assert upload(admin_client, project, data) == (200, [reason])
    assert command(tmp_path, project, data) == f"ERROR file: {reason}"
    assert not Participant.objects.exists()


def test_an_empty_file_is_refused(
    admin_client: Client, tmp_path: Path, make_project: Any
) -> None:
    project = make_project()
    assert upload(admin_client, project, b"") == (200, ["The submitted file is empty."])
    assert command(tmp_path, project, b"\n\n") == (
        "ERROR file: has no participant rows; expected the columns email,name[,status]"
    )


def test_a_file_over_the_size_limit_is_refused_whole_without_being_read(
    admin_client: Client, tmp_path: Path, make_project: Any, settings: Any
) -> None:
    settings.EMAILER_IMPORT_MAX_BYTES = 1024
    project = make_project()
    data = b"email,name\n" + b"".join(b"p%04d@example.com,P\n" % i for i in range(100))
    reason = (
        "larger than 1,024 bytes (EMAILER_IMPORT_MAX_BYTES); nothing was imported: split the file"
    )
    assert upload(admin_client, project, data) == (200, [reason])
    assert command(tmp_path, project, data) == f"ERROR file: {reason}"
    assert not Participant.objects.exists()


def test_a_file_with_too_many_rows_is_refused_whole(
    admin_client: Client, tmp_path: Path, make_project: Any, settings: Any
) -> None:
    settings.EMAILER_IMPORT_MAX_ROWS = 3
    project = make_project()
    data = b"email,name\n" + b"".join(b"p%d@example.com,P\n" % i for i in range(4))
    reason = (
        "more than 3 participant rows (EMAILER_IMPORT_MAX_ROWS); nothing was imported: "
        "split the file"
    )
    assert upload(admin_client, project, data) == (200, [reason])
    assert command(tmp_path, project, data) == f"ERROR file: {reason}"
    assert not Participant.objects.exists()
    three = b"email,name\n" + b"".join(b"p%d@example.com,P\n" % i for i in range(3))
    assert upload(admin_client, project, three)[1][0].startswith("3 added")


def test_unreadable_rows_are_refused_by_line_and_the_others_taken(
    admin_client: Client, tmp_path: Path, make_project: Any
) -> None:
    project = make_project()
    data = (
        b"email,name\n"
        b"ada@example.com,Ada\n"
        b"huge@example.com," + b"x" * 140_000 + b"\n"
        b"nul@example.com,N\x00L\n"
        b"long@example.com," + b"y" * 201 + b"\n"
        b"grace@example.com,Grace\n"
    )
    status, said = upload(admin_client, project, data)
    assert status == 302
    assert said == [
        "2 added, 0 updated, 0 unchanged, 3 refused",
        "line 3: cannot be read as CSV: a field longer than 131,072 characters",
        "line 4: name: holds a NUL byte at character 2; only printable text is taken",
        "line 5: name: 201 characters; at most 200",
    ]
    assert sorted(Participant.objects.values_list("email", flat=True)) == [
        "ada@example.com",
        "grace@example.com",
    ]
    printed = command(tmp_path, project, data)
    assert printed.splitlines()[-1] == (
        "ERROR file: 3 of 5 rows not imported (0 duplicate in file, 3 invalid)"
    )
    assert "line 3: cannot be read as CSV: a field longer than 131,072 characters" in printed


def test_a_refused_cell_is_quoted_short_in_the_reason(
    admin_client: Client, make_project: Any
) -> None:
    project = make_project()
    _, said = upload(admin_client, project, b"email,name\n" + b"a" * 100_000 + b",Name\n")
    assert said[1] == f"line 2: email: '{'a' * 60}'… is not an email address"
    _, said = upload(admin_client, project, b"email,name," + b"z" * 100_000 + b"\n")
    assert said == [f"line 1 names unknown column '{'z' * 60}'…; expected the columns "
                    "email,name[,status]"]


@pytest.mark.parametrize("where", ["a directory", "missing", "/dev/zero"])
def test_the_command_refuses_a_path_that_is_not_a_readable_file_in_one_line(
    tmp_path: Path, make_project: Any, where: str
) -> None:
    project = make_project()
    path = {"a directory": str(tmp_path), "missing": str(tmp_path / "nope.csv")}.get(where, where)
    with pytest.raises(CommandError) as refused:
        call_command("emailer", "participants", "import", project.name, path, stdout=StringIO())
    assert str(refused.value) == f"file: {path} is not a readable file"


def test_the_upload_is_still_checked_for_its_csrf_token(admin_user: Any, make_project: Any) -> None:
    """The size limit is set before the body is read, so the view checks CSRF itself."""
    project = make_project()
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    url = reverse("admin:emailer_project_import", args=[project.pk])
    data = {"file": SimpleUploadedFile("people.csv", b"ada@example.com,Ada\n")}
    assert client.post(url, data).status_code == 403
    token = client.get(url).context["csrf_token"]
    data = {"file": SimpleUploadedFile("people.csv", b"ada@example.com,Ada\n")}
    assert client.post(url, {**data, "csrfmiddlewaretoken": token}).status_code == 302
    assert Participant.objects.count() == 1
