"""A gateway for crash tests: the test gateway, but a renewal stops at a named step.

Worker processes get it through ``SUBSCRIPTIONS_GATEWAY`` and the step through
``DUECOURSE_TEST_PAUSE_AFTER_STEP`` (``pausing_env``); the renewal then logs
``renewal.paused`` and waits there until the test kills the worker:

- ``create_order``: the orders are committed and nothing is charged (the charge waits);
- ``charge``: the charges are committed and nothing is confirmed (``renewal_step_done``).
"""

from __future__ import annotations

import logging
import os
import threading
from decimal import Decimal

from subscriptions.models import JobStep
from subscriptions.payments import ChargeResult, TestGateway
from subscriptions.signals import renewal_step_done

STEP = "DUECOURSE_TEST_PAUSE_AFTER_STEP"
logger = logging.getLogger("subscriptions")


def pausing_env(env: dict[str, str], step: str) -> dict[str, str]:
    """``env`` for a worker whose renewals stop after ``step`` until it is killed."""
    return {**env, "SUBSCRIPTIONS_GATEWAY": f"{__name__}.PausingGateway", STEP: step}


def _wait_to_be_killed(step: str, jobs: str) -> None:
    logger.warning("renewal.paused jobs=%s after=%s", jobs, step)
    threading.Event().wait()


class PausingGateway(TestGateway):
    """Charges as the test gateway does, after waiting for ever when asked to stop before."""

    def charge(self, *, customer: str, amount: Decimal, idempotency_key: str) -> ChargeResult:
        if os.environ.get(STEP) == JobStep.CREATE_ORDER:
            _wait_to_be_killed(JobStep.CREATE_ORDER, idempotency_key)
        return super().charge(customer=customer, amount=amount, idempotency_key=idempotency_key)


def _stop_after_charge(*, jobs: list[object], step: str, **_: object) -> None:
    if step == JobStep.CHARGE and os.environ.get(STEP) == JobStep.CHARGE:
        _wait_to_be_killed(step, ",".join(str(getattr(job, "pk", job)) for job in jobs))


renewal_step_done.connect(_stop_after_charge, dispatch_uid="tests.subscriptions.pausing")
