"""The emailer's admin in a real browser (Debian's chromium driven by Playwright).

A template typo is shown beside its field when the task is saved, not found by the 3 a.m. run;
the saved task shows its message rendered for a participant; and the HTML part's preview
fetches nothing remote (a local server records what a browser asks for).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from emailer.models import SendEmailTask
from tests.conftest import free_port, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_template_error_is_shown_beside_its_field_and_the_saved_task_is_previewed(
    page: Any,
    make_project: Any,
) -> None:
    project = make_project("spring-survey", participants=2)
    page.goto(f"{page.base}/admin/emailer/sendemailtask/add/")
    page.select_option("#id_project", str(project.pk))
    page.fill("#id_name", "spring-invite")
    page.fill("#id_subject", "{{ participant.name }}, five minutes?")
    page.fill("#id_body", "Hello {% if participant.name %}{{ participant.name }}")
    page.check("input[name=statuses][value=invited]")
    page.click("input[name=_continue]")

    error = page.locator(".field-body .errorlist")
    assert "template error: Unclosed tag on line 1: 'if'" in error.inner_text()
    assert page.locator(".field-subject .errorlist").count() == 0
    assert not SendEmailTask.objects.exists()

    page.fill("#id_body", "Hello {{ participant.name }},\nplease answer.")
    page.click("input[name=_continue]")
    preview = page.locator(".field-preview .readonly")
    preview.wait_for()
    assert "Person 0, five minutes?" in preview.inner_text()
    assert "Hello Person 0," in preview.inner_text()
    assert SendEmailTask.objects.get().statuses == ["invited"]


class Recorder(ThreadingHTTPServer):
    """A local HTTP server that records the path of every request it gets."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorder.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/gif")
                self.end_headers()
                self.wfile.write(b"GIF89a")

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", free_port()), Handler)


@pytest.fixture
def remote() -> Iterator[Recorder]:
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


#: Every way an HTML mail can make a mail client fetch something on its own.
FETCHES = """
<img src="{base}/img"><img srcset="{base}/srcset 1x"><input type="image" src="{base}/input">
<div style="background:url({base}/style-attribute)">x</div>
<style>@import url({base}/import.css); p {{ background: url({base}/style-element) }}</style>
<link rel="stylesheet" href="{base}/sheet.css"><link rel="prefetch" href="{base}/prefetch">
<link rel="icon" href="{base}/icon">
<script src="{base}/script.js"></script><iframe src="{base}/frame"></iframe>
<object data="{base}/object"></object><embed src="{base}/embed">
<video poster="{base}/poster" src="{base}/video"></video><audio src="{base}/audio"></audio>
<svg><image href="{base}/svg-image" width="10" height="10"/></svg>
<table background="{base}/table-background"><tr><td>x</td></tr></table>
<meta http-equiv="refresh" content="0;url={base}/refresh">
"""


def test_the_html_preview_fetches_nothing_remote(
    page: Any, make_project: Any, make_task: Any, remote: Recorder
) -> None:
    base = f"http://127.0.0.1:{remote.server_address[1]}"
    body = '<p id="marker">Hello {{ participant.name }}</p>' + FETCHES.format(base=base)
    task = make_task(make_project(participants=1), html_body=body)

    # The control: the same markup in a page of its own, without the preview's protection,
    # fetches; the recorder sees it. Its refresh comes last and on its own (after the page has
    # loaded), so the control is closed only once that too has come, else it could land among
    # the preview's requests.
    control = page.context.browser.new_page()
    control.set_content(FETCHES.format(base=base))
    wait_for(
        lambda: {"/img", "/refresh"} <= set(remote.paths), timeout=20,
        message="the control fetches, and follows its refresh",
    )  # fmt: skip
    control.close()
    remote.paths.clear()

    page.goto(f"{page.base}/admin/emailer/sendemailtask/{task.pk}/change/")
    marker = page.frame_locator("iframe.emailer-html-preview").locator("#marker")
    marker.wait_for()
    assert marker.inner_text() == "Hello Person 0"
    page.wait_for_load_state("networkidle")  # nothing on the wire for half a second
    # The control's refresh made a top-level page on the recorder's origin, and chromium asks
    # that origin for /favicon.ico when it pleases; a framed document never asks for one (the
    # markup's own <link rel="icon"> is /icon, still checked).
    assert [path for path in remote.paths if path != "/favicon.ico"] == []
