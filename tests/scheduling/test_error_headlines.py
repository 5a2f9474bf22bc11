"""An error reads as its type and message wherever there is room for one line.

The history keeps an error with the innermost frames of its traceback
(``scheduling.messages.errors.format_error``); a list, a dashboard panel, a job's recent
executions, a pause reason and a command's line show its headline
(``scheduling.messages.errors.headline``): the exception's type and message, never a
``File "..."`` line, cut at a word where the cell is short. The execution's own page keeps
the whole error.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from scheduling.messages.errors import format_error, headline
from scheduling.models import Execution, Job
from scheduling.stages import attempts, controls, failures

MESSAGE = "ValueError: the amount is negative"


def charge(amount: int) -> None:
    if amount < 0:
        raise ValueError("the amount is negative")


def raised(call: Callable[[], None]) -> BaseException:
    try:
        call()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing was raised")


def history_form() -> str:
    """The error as a worker writes it into the history: the exception, then its frames."""
    return format_error(raised(lambda: charge(-1)))


def python_form() -> str:
    """The error as Python prints it: the frames first, the exception last."""
    exc = raised(lambda: charge(-1))
    return "".join(traceback.format_exception(exc))


def test_the_history_form_keeps_frames_that_the_headline_leaves_out() -> None:
    written = history_form()
    assert written.startswith(MESSAGE) and 'File "' in written
    assert headline(written) == MESSAGE


def test_a_traceback_in_pythons_form_reads_as_its_last_line() -> None:
    written = python_form()
    assert written.startswith("Traceback (most recent call last):")
    assert headline(written) == MESSAGE


def test_a_chained_traceback_reads_as_the_exception_the_run_ended_with() -> None:
    def convert() -> None:
        try:
            {}["amount"]
        except KeyError as exc:
            raise RuntimeError("the order has no amount") from exc

    written = "".join(traceback.format_exception(raised(convert)))
    assert "KeyError" in written
    assert headline(written) == "RuntimeError: the order has no amount"


def test_a_message_of_several_lines_reads_as_its_first() -> None:
    exc = ValueError("duplicate key value violates unique constraint\nDETAIL: id=(1)")
    assert headline(format_error(exc)) == (
        "ValueError: duplicate key value violates unique constraint"
    )


def test_what_the_worker_says_around_an_error_stays_with_it() -> None:
    written = f"timeout: {history_form()}"
    assert headline(written) == f"timeout: {MESSAGE}"


def test_an_error_without_frames_reads_as_it_is() -> None:
    error = "schedule is invalid: every 0 seconds"
    assert headline(error) == error
    assert headline("") == headline(None) == ""


def test_a_long_headline_is_cut_at_a_word_and_says_so() -> None:
    error = "ConnectionRefusedError: the payment provider refused the connection on port 443"
    cut = headline(error, limit=50)
    assert len(cut) <= 50 and cut.endswith("…")
    assert cut == "ConnectionRefusedError: the payment provider…"
    assert headline(MESSAGE, limit=len(MESSAGE)) == MESSAGE


def test_a_pause_reason_quotes_the_error_not_a_frame() -> None:
    reason = failures.reason_for(3, python_form())
    assert reason == f"paused after 3 failed occurrences in a row; last error: {MESSAGE}"


# --- where an operator reads it --------------------------------------------------------------


@pytest.fixture
def failed(admin_user: Any, make_job: Callable[..., Job]) -> Execution:
    """A run of ``invoices`` that failed with a traceback in the history's form."""
    job = make_job(name="invoices", owner=admin_user)
    now = timezone.now()
    execution = controls.run_job_now(job=job, now=now)
    attempts.start_execution(execution_id=execution.pk, worker="w1", pid=1, now=now)
    attempts.fail_attempt(
        execution_id=execution.pk, now=now, error=history_form(), outcome="failed", permanent=True
    )
    return Execution.objects.get(pk=execution.pk)


@pytest.mark.django_db
def test_pages_show_the_errors_headline_and_its_own_page_the_whole_error(
    client: Client, admin_user: Any, failed: Execution
) -> None:
    client.force_login(admin_user)
    dashboard = client.get("/dashboard/").content.decode()
    job_page = client.get(f"/admin/scheduling/job/{failed.job_id}/change/").content.decode()
    listed = client.get("/admin/scheduling/execution/").content.decode()
    for page in (dashboard, job_page, listed):
        assert MESSAGE in page
        assert "File &quot;" not in page and 'File "' not in page
    own = client.get(f"/admin/scheduling/execution/{failed.pk}/change/").content.decode()
    assert "File &quot;" in own  # the whole error, frames and all


@pytest.mark.django_db
def test_commands_print_the_errors_headline(failed: Execution) -> None:
    out = StringIO()
    call_command("executions", "--job", "invoices", stdout=out)
    assert MESSAGE in out.getvalue() and 'File "' not in out.getvalue()
    out = StringIO()
    call_command("jobs", "show", "invoices", stdout=out)
    assert MESSAGE in out.getvalue() and 'File "' not in out.getvalue()
