"""Schedulable Celery tasks: the ``ScheduledTask`` base and ``@schedulable_task``.

A task becomes schedulable by being declared with ``@schedulable_task``, which gives it the
``ScheduledTask`` base class. That base makes the worker side of the protocol impossible to
forget: before the body runs it claims the execution row (a duplicate doorbell is acknowledged
and does nothing), it hands the body its ``RunContext`` with the last checkpoint, and
``self.retry()`` becomes a row update instead of an ETA message in the broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Task, shared_task
from celery.exceptions import Ignore, Retry

from scheduling.rules.registry import PermanentError
from scheduling.runs import RunContext
from scheduling.worker import runtime


class ScheduledTask(Task):
    """Base class of schedulable tasks; see the module docstring."""

    #: Jobs may target it (a Django task's runner says so only when the task opts in).
    schedulable = True
    #: Its runs are kept in the ledger: claimed at start, their ends recorded by the receivers.
    ledger = True
    #: Exception classes that fail an execution at once, without retries.
    permanent_errors: tuple[type[BaseException], ...] = (PermanentError,)
    #: Only superusers may point a job at this task (the engine's maintenance tasks).
    superuser_only: bool = False
    #: The permission (``app_label.codename``) a user needs to point a job at this task.
    permission: str | None = None
    #: Celery's strategy with a check in front: a message whose arguments break the limits is
    #: refused alone instead of killing the worker's main process (``scheduling.worker.guard``).
    Strategy = "scheduling.worker.guard:guarded_strategy"

    def before_start(self, task_id: str, args: Any, kwargs: Any) -> None:
        """Claim the execution row; a message that may not run is acknowledged and ignored.

        Runs inside Celery's trace, after ``task_prerun`` and before the body, with the real
        request in ``self.request``. A signal receiver could not veto the run: Celery logs and
        swallows exceptions raised by receivers.
        """
        if not runtime.begin(self):
            raise Ignore()

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
