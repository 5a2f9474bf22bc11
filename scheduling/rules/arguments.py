"""A job's arguments: how deep and how large they may be, and whether they fit the task's
parameters, checked at every door.

Arguments travel from a row to a Celery message and into a worker, and a worker's main
process pickles them to hand them to a pool process. Nested deeply enough, that pickling
raises ``RecursionError`` in the main process itself, which dies, restores the message and
dies again on the next start: one user's job would stop every worker. So every value a user
stores as ``args`` or ``kwargs`` has a nesting depth and an encoded size limit
(``SCHEDULING_ARGS_MAX_DEPTH``, ``SCHEDULING_ARGS_MAX_BYTES``): the model, the admin, the
command line, the API and Django's ``enqueue`` refuse more, the claim fails an occurrence of a
row written behind their back with the same reason, and a worker refuses such a message
alone (``scheduling.worker.guard``).

Nothing here recurses: a value nested thousands of levels deep is measured, not walked by the
call stack, and text nested deeper than Python's JSON reader can follow is reported as such.
"""

from __future__ import annotations

import inspect
import json
import reprlib
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db import models

from scheduling import conf

#: What a stored value that Python's JSON reader cannot follow reads as (see ``decode``).
TOO_DEEP_TO_READ = "nested deeper than Python's JSON reader can follow"


class Unreadable(ValueError):
    """JSON text nested deeper than Python's reader can follow (it raises RecursionError)."""


def decode(text: str | bytes) -> Any:
    """JSON text as Python values; ``Unreadable`` where the nesting defeats Python's reader."""
    try:
        return json.loads(text)
    except RecursionError:
        raise Unreadable(TOO_DEEP_TO_READ) from None


def nesting_depth(value: Any) -> int:
    """How many lists and objects are nested at the deepest point (a scalar is 0, ``[]`` 1)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def encoded_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (UTF-8): what its share of a message costs.

    Measured only on values within the depth limit, which the encoder follows safely.
    """
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    # A lone surrogate is measured, not refused here: validation names it as unstorable.
    return len(text.encode("utf-8", "surrogatepass"))


def limits() -> tuple[int, int]:
    """(the deepest nesting, the most bytes) a job's ``args`` or ``kwargs`` may have."""
    return int(conf.get("ARGS_MAX_DEPTH")), int(conf.get("ARGS_MAX_BYTES"))


def problem(value: Any, within: tuple[int, int] | None = None) -> str | None:
    """Why ``value`` may not be a job's ``args`` or ``kwargs`` (its depth or size), or None.

    ``within``: ``limits()``, when the caller checks many values against the same settings.
    """
    max_depth, max_bytes = within or limits()
    depth = nesting_depth(value)
    if depth > max_depth:
        return (
            f"is nested {depth:,} levels deep; the limit is {max_depth} (SCHEDULING_ARGS_MAX_DEPTH)"
        )
    try:
        size = encoded_size(value)
    except ValueError as exc:  # Python's limit on the digits of a number it writes
        return f"holds a number too long to write as JSON ({exc})"
    if size > max_bytes:
        return f"is {size:,} bytes as JSON; the limit is {max_bytes:,} (SCHEDULING_ARGS_MAX_BYTES)"
    return None


class ArgumentsFormField(forms.JSONField):
    """The admin's ``args``/``kwargs`` box: text nested past what Python reads is a form error
    (Django's own field lets the reader's ``RecursionError`` through: an HTTP 500)."""

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except RecursionError:
            raise forms.ValidationError(
                f"is {TOO_DEEP_TO_READ}; the limit is {limits()[0]} levels"
            ) from None
        except ValueError as exc:  # Python's limit on a number's digits
            raise forms.ValidationError(f"holds a number Python will not read ({exc})") from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except (RecursionError, ValueError):
            return forms.fields.InvalidJSONInput(data)

    def prepare_value(self, value: Any) -> Any:
        try:
            return super().prepare_value(value)
        except RecursionError:
            return f'"{TOO_DEEP_TO_READ}"'

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return bool(super().has_changed(initial, data))
        except (RecursionError, ValueError):
            return True


class ArgumentsField(models.JSONField):
    """A job's ``args`` or ``kwargs``: a stored value nested past what Python reads (a row
    written behind the model's back) reads as a sentence saying so, not as an error that
    would stop every page and command listing it; saving it again is refused by the rules."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        try:
            return super().from_db_value(value, expression, connection)
        except RecursionError:
            return TOO_DEEP_TO_READ

    def validate(self, value: Any, model_instance: Any) -> None:
        """Django's check that the value encodes, with what it lets through said as a reason:
        a number past Python's limit on digits, or nesting past the encoder's."""
        try:
            super().validate(value, model_instance)
        except RecursionError:
            raise ValidationError(f"is {TOO_DEEP_TO_READ}", code="invalid") from None
        except ValueError as exc:
            raise ValidationError(
                f"holds a number too long to write as JSON ({exc})", code="invalid"
            ) from None

    def formfield(self, **kwargs: Any) -> Any:
        return super().formfield(**{"form_class": ArgumentsFormField, **kwargs})


# --- whether the arguments fit the task ------------------------------------------------------
#
# A job's arguments are typed once and sent at every occurrence: a call its task cannot take
# (a parameter it does not have, one too many, one missing) would fail every run with a
# ``TypeError`` and be retried each time. So the arguments are bound to the task's parameters
# where they are typed (``scheduling.rules.validation.call_errors``, which every door reaches
# through ``Job.clean``; Django's ``enqueue``), and again by the worker before the body runs,
# for a job whose task changed its parameters after the job was saved.


def non_text_key(value: Any) -> Any:
    """The first key anywhere in ``value`` that is not text, or ``None`` where all are.

    JSON's object keys are text: ``{1: "a"}`` would be stored, and reach the task, as
    ``{"1": "a"}``. Walked without recursion, as a value may be nested past the call stack.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in item:
                if not isinstance(key, str):
                    return key
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None


def key_problem(value: Any) -> str | None:
    """Why ``value`` cannot be stored as JSON for its keys, or None (see ``non_text_key``)."""
    found = non_text_key(value)
    if found is None:
        return None
    return f"has the key {found!r} ({type(found).__name__}); JSON object keys must be text"


def function_signature(func: Any, *, takes_context: bool = False) -> inspect.Signature | None:
    """The parameters a caller gives ``func``, or None where they cannot be read (a builtin).

    Read as Celery's own check of a call reads them (``celery.utils.functional.head_from_fun``):
    a decorator's wrapper is taken as it is, not followed to what it wraps. ``takes_context``
    leaves out the first parameter, which the caller does not give (a Django task's context).
    """
    try:
        signature = inspect.signature(func, follow_wrapped=False)
    except (TypeError, ValueError):
        return None
    if takes_context:
        parameters = list(signature.parameters.values())[1:]
        signature = signature.replace(parameters=parameters)
    return signature


def task_signature(task: Any) -> inspect.Signature | None:
    """The parameters a caller gives the Celery task ``task``, or None: not to be checked.

    ``run`` of a task declared with ``bind=True`` is bound to the task, so Celery's ``self``
    is left out as Celery supplies it. A task that runs something else (a Django task's
    runner) names that function's parameters as ``argument_signature``; a task declared with
    ``typing=False`` asked Celery not to check its calls, and is not checked here either.
    """
    declared = getattr(task, "argument_signature", None)
    if declared is not None:
        return declared  # type: ignore[no-any-return]
    if not getattr(task, "typing", True):
        return None
    return function_signature(task.run)


class _Shown(str):
    """A default value as the signature shows it: already a short ``repr``."""

    def __repr__(self) -> str:
        return str(self)


def described(name: str, signature: inspect.Signature) -> str:
    """``reports.tasks.close_books(period, *, dry_run=False)``: how a caller writes the call."""
    parameters = [
        parameter.replace(
            annotation=parameter.empty,
            default=(
                parameter.empty
                if parameter.default is parameter.empty
                else _Shown(reprlib.repr(parameter.default))
            ),
        )
        for parameter in signature.parameters.values()
    ]
    plain = signature.replace(parameters=parameters, return_annotation=signature.empty)
    return f"{name}{plain}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def binding_error(
    signature: inspect.Signature | None, args: Any, kwargs: Any, *, name: str
) -> tuple[str, str] | None:
    """(``args`` or ``kwargs``, why) when the call cannot bind to ``signature``; None if it can.

    ``inspect.Signature.bind`` decides; the reason is said in the caller's terms, naming the
    argument: ``'nope' is not a parameter of reports.tasks.close_books(period, *,
    dry_run=False)``, ``close_books() takes 1 positional argument but 3 were given``,
    ``missing required argument 'period'``. A signature that cannot be read (None) fits all.
    """
    if signature is None or not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
        return None
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        return _explained(signature, list(args), kwargs, name=name) or (
            "args" if args and not kwargs else "kwargs",
            f"do not fit {described(name, signature)}: {exc}",
        )
    return None


def _explained(
    signature: inspect.Signature, args: list[Any], kwargs: dict[str, Any], *, name: str
) -> tuple[str, str] | None:
    """The first reason ``bind`` refused the call, in the words of ``binding_error``."""
    kind = inspect.Parameter
    parameters = list(signature.parameters.values())
    positional = [
        p for p in parameters if p.kind in (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD)
    ]
    more_positional = any(p.kind == kind.VAR_POSITIONAL for p in parameters)
    more_keywords = any(p.kind == kind.VAR_KEYWORD for p in parameters)
    if not more_positional and len(args) > len(positional):
        required = sum(1 for p in positional if p.default is p.empty)
        takes = (
            _plural(len(positional), "positional argument")
            if required == len(positional)
            else f"from {required} to {len(positional)} positional arguments"
        )
        given = f"{len(args)} {'was' if len(args) == 1 else 'were'} given"
        return "args", f"{name.rsplit('.', 1)[-1]}() takes {takes} but {given}"
    filled = {p.name for p in positional[: len(args)]}
    by_name = {p.name: p for p in parameters}
    for key in kwargs:
        parameter = by_name.get(key)
        if parameter is None or parameter.kind in (kind.VAR_POSITIONAL, kind.VAR_KEYWORD):
            if more_keywords:
                continue
            return "kwargs", f"{key!r} is not a parameter of {described(name, signature)}"
        if parameter.kind == kind.POSITIONAL_ONLY:
            if more_keywords:
                continue
            return "kwargs", (
                f"{key!r} is positional-only in {described(name, signature)}; give it in args"
            )
        if key in filled:
            return "kwargs", f"{key!r} is given twice: by position in args and by name"
    missing = [
        p
        for p in parameters
        if p.default is p.empty
        and p.kind not in (kind.VAR_POSITIONAL, kind.VAR_KEYWORD)
        and p.name not in filled
        and (p.name not in kwargs or p.kind == kind.POSITIONAL_ONLY)
    ]
    if missing:
        field = "args" if all(p.kind == kind.POSITIONAL_ONLY for p in missing) else "kwargs"
        names = ", ".join(repr(p.name) for p in missing)
        word = "argument" if len(missing) == 1 else "arguments"
        return field, f"missing required {word} {names}"
    return None
