"""A job's arguments: how deep and how large they may be, checked at every door.

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

import json
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


def problem(value: Any) -> str | None:
    """Why ``value`` may not be a job's ``args`` or ``kwargs`` (its depth or size), or None."""
    max_depth, max_bytes = limits()
    depth = nesting_depth(value)
    if depth > max_depth:
        return (
            f"is nested {depth:,} levels deep; the limit is {max_depth} "
            "(SCHEDULING_ARGS_MAX_DEPTH)"
        )
    try:
        size = encoded_size(value)
    except ValueError as exc:  # Python's limit on the digits of a number it writes
        return f"holds a number too long to write as JSON ({exc})"
    if size > max_bytes:
        return (
            f"is {size:,} bytes as JSON; the limit is {max_bytes:,} (SCHEDULING_ARGS_MAX_BYTES)"
        )
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
