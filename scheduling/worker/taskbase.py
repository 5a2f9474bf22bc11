"""Schedulable Celery tasks: the ``ScheduledTask`` base and ``@schedulable_task``.

A task becomes schedulable by being declared with ``@schedulable_task``, which gives it the
``ScheduledTask`` base class. That base makes the worker side of the protocol impossible to
forget: before the body runs it claims the execution row (a duplicate doorbell is acknowledged
and does nothing), it hands the body its ``RunContext`` with the last checkpoint, and
``self.retry()`` becomes a row update instead of an ETA message in the broker.

A body may not end its worker process: ``SystemExit`` and ``KeyboardInterrupt`` raised by a
body (``sys.exit()`` included) leave it as ``BodyExit``, an ordinary failure of the attempt
(recorded with the original's class path and traceback, retried as configured), so a prefork
child or a ``solo`` worker goes on serving. The worker's own shutdown is let through
(``worker_is_exiting``).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from typing import Any

from billiard import common as billiard_common
from billiard.exceptions import SoftTimeLimitExceeded
from celery import Task, shared_task
from celery.exceptions import Ignore, Retry, WorkerShutdown, WorkerTerminate
from django.db import DatabaseError

from scheduling.messages.errors import Fenced, RunCancelled
from scheduling.rules.registry import PermanentError
from scheduling.rules.validation import check_run_arguments
from scheduling.stages import selectors
from scheduling.worker import runtime
from scheduling.worker.run_context import RunContext

logger = logging.getLogger("scheduling")


class BodyExit(Exception):
    """A task body raised ``SystemExit`` or ``KeyboardInterrupt``: its attempt fails with it.

    ``exited`` is what the body raised; the failure is recorded under its class path and with
    its traceback, and the worker process that ran the body lives on.
    """

    def __init__(self, exited: BaseException) -> None:
        super().__init__(exited)  # the argument, so that it pickles
        self.exited = exited

    def __str__(self) -> str:
        return f"the task body raised {type(self.exited).__name__}({self.exited})"


def worker_is_exiting(exc: BaseException) -> bool:
    """Whether ``exc`` is the worker's own shutdown unwinding through a body, not the body's.

    Celery raises ``WorkerShutdown``/``WorkerTerminate`` in a ``solo`` worker told to stop at
    once; billiard's handler of SIGTERM (and the like) in a pool process raises ``SystemExit``
    after noting that it fired; and where Python's own Ctrl+C handler is in place (a worker
    embedded in a process that did not install Celery's), a ``KeyboardInterrupt`` may be the
    operator's. ``celery worker`` ignores SIGINT in its pool processes and handles it in its
    main process, so there a ``KeyboardInterrupt`` comes from the body.
    """
    if isinstance(exc, WorkerShutdown | WorkerTerminate):
        return True
    if isinstance(exc, SystemExit) and _terminate_handler_fired():
        return True
    return isinstance(exc, KeyboardInterrupt) and (
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )


def _terminate_handler_fired() -> bool:
    """Whether billiard's terminate-signal handler ran in this process (the flag it sets before
    it raises ``SystemExit``, read directly on a billiard without the accessor)."""
    fired = getattr(billiard_common, "terminate_handler_fired", None)
    if fired is not None:
        return bool(fired())
    return bool(getattr(billiard_common, "_should_have_exited", [False])[0])


class ScheduledTask(Task):
    """Base class of schedulable tasks; see the module docstring."""

    #: Jobs may target it (a Django task's runner says so only when the task opts in).
    schedulable = True
    #: Its runs are kept in the ledger: claimed at start, their ends recorded by the receivers.
    ledger = True
    #: Exception classes that fail an execution at once, without retries.
    permanent_errors: tuple[type[BaseException], ...] = (PermanentError,)
    #: Celery's expected exceptions, logged at INFO without a traceback: a cancelled run's stop.
    throws: tuple[type[BaseException], ...] = (RunCancelled,)
    #: Only superusers may point a job at this task (the engine's maintenance tasks).
    superuser_only: bool = False
    #: The permission (``app_label.codename``) a user needs to point a job at this task.
    permission: str | None = None
    #: Celery's strategy with a check in front: a message whose arguments break the limits is
    #: refused alone instead of killing the worker's main process (``scheduling.worker.guard``).
    Strategy = "scheduling.worker.guard:guarded_strategy"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the body; a ``SystemExit`` or ``KeyboardInterrupt`` it raises becomes ``BodyExit``.

        Celery's trace lets any ``BaseException`` that is not an ``Exception`` through: the
        pool process (or a ``solo`` worker) would end under it, and the attempt would be
        recorded as interrupted and published again, without end. Inside the trace the body
        is called as ``self.run`` (Celery's own ``__call__`` would push a request without the
        attempt's); a direct call (``task(...)`` in code) behaves as Celery's does.
        """
        if self.request.called_directly:
            return super().__call__(*args, **kwargs)
        try:
            return self.run(*args, **kwargs)
        except (SystemExit, KeyboardInterrupt) as exc:
            if worker_is_exiting(exc):
                raise
            raise BodyExit(exc) from exc
        except SoftTimeLimitExceeded as exc:
            # A fence (``Fenced``) is the worker losing its lease, recorded as such.
            reason = None if isinstance(exc, Fenced) else self._cancel_reason()
            if reason is None:
                raise
            logger.info(
                "execution.body_stopped execution=%s reason=%s", self.execution_id, reason
            )
            raise RunCancelled(reason) from None

    def _cancel_reason(self) -> str | None:
        """Why this attempt's run was cancelled, when the ledger says it was (so the stop that
        reached the body was the cancel's); None otherwise, or when the ledger cannot say."""
        if self.execution_id is None:
            return None
        try:
            return selectors.cancel_reason(self.execution_id)
        except DatabaseError:
            return None

    def before_start(self, task_id: str, args: Any, kwargs: Any) -> None:
        """Claim the execution row; a message that may not run is acknowledged and ignored.

        Arguments the task cannot take fail the attempt as a permanent error
        (``ArgumentsDoNotFit``), naming the argument. Runs inside Celery's trace, after
        ``task_prerun`` and before the body, with the real request in ``self.request``. A
        signal receiver could not veto the run: Celery logs and swallows exceptions raised by
        receivers.
        """
        if not runtime.begin(self):
            raise Ignore()
        if self.execution_id is not None:
            # A job saved before its task's parameters changed: fail once, not at every retry.
            check_run_arguments(self, args, kwargs)

    @property
    def execution_id(self) -> int | None:
        """The Execution row this attempt runs for, or None for an unrecorded call."""
        return getattr(self.request, "duecourse_execution_id", None)

    @property
    def run_context(self) -> RunContext | None:
        """This attempt's ``RunContext`` (None for an unrecorded call)."""
        return getattr(self.request, "duecourse_run", None)

    @property
    def checkpoint(self) -> Any:
        """The progress saved by the last attempt of this execution (None at first)."""
        return getattr(self.request, "duecourse_checkpoint", None)

    def save_checkpoint(self, value: Any) -> None:
        """Persist progress now, so a retried attempt can resume after the last step done."""
        run = self.run_context
        if run is not None:
            run.save_checkpoint(value)
        self.request.duecourse_checkpoint = value

    def retry(  # type: ignore[override]
        self,
        args: Any = None,
        kwargs: Any = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: Any = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Retry:
        """Ask for another attempt of this execution.

        Unlike Celery's ``retry``, no message is published: the ``task_retry`` receiver moves
        the row to RETRY with its ``retry_at`` and the scheduler publishes it when it is due,
        so a long delay never sits in the broker. Retry limits are the job's.
        """
        if self.execution_id is None:
            return super().retry(
                args=args,
                kwargs=kwargs,
                exc=exc,
                throw=throw,
                eta=eta,
                countdown=countdown,
                max_retries=max_retries,
                **options,
            )
        when: Any = eta if eta is not None else countdown
        signal = Retry(exc=exc, when=when)
        if throw:
            raise signal
        return signal


def schedulable_task(*args: Any, **options: Any) -> Any:
    """Declare a Celery task that jobs may target (``@schedulable_task`` or with options).

    Besides Celery's options, ``superuser_only=True`` keeps the task for superusers and
    ``permission="app_label.codename"`` names the permission a user needs to make a job that
    calls it (``scheduling.rules.permissions``); without either, anyone who may make jobs may.
    """
    needed = options.get("permission")
    if needed is not None and (not isinstance(needed, str) or needed.count(".") != 1):
        raise ValueError(f"permission={needed!r}: give it as 'app_label.codename'")
    options.setdefault("base", ScheduledTask)
    options.setdefault("acks_late", True)
    if len(args) == 1 and callable(args[0]) and not options.keys() - {"base", "acks_late"}:
        return shared_task(**options)(args[0])
    decorator: Callable[[Callable[..., Any]], Any] = shared_task(*args, **options)
    return decorator
