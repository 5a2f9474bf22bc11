"""A task's subject and bodies as templates: compiled once, rendered per participant, bounded.

Templates are written in the mail template language of ``emailer.sandbox`` (Django's, with a
short list of tags and filters) and every render runs under its budget, in the worker, the
admin's preview and the check made when a task is saved alike.

Compiling and rendering with samples is the check made when a task is saved (so a broken or
too costly template is refused beside its field) and when a run starts (so a row written
behind the admin's back fails its run with the reason, before anyone is claimed). The samples
are the sample participant and the longest values each field allows (``worst_cases``): a
template that stays within its limits for those stays within them for any participant, short
of a branch that only some particular value takes, and that one fails that participant's
message alone, with the reason.

The text parts render without HTML escaping; the HTML part escapes as usual. A ``Context``
carries its own ``autoescape`` (on by default, whatever the engine says), so each part is
rendered with a context that says which it is. What comes back is plain ``str``, never
Django's "already safe" ``SafeString``: a text body is not HTML, and a page that shows it must
escape it (the admin's preview hands it to ``format_html`` as an argument).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from django.template import Context, Template, TemplateSyntaxError

from emailer import sandbox
from emailer.sandbox import Limits, RenderLimitExceeded

#: What a template may use, with the values the preview shows a viewer who may not see the
#: project's people.
SAMPLE_CONTEXT: dict[str, Any] = {
    "participant": {"name": "Ada Lovelace", "email": "ada@example.com", "status": "invited"},
    "project": {"name": "Sample project"},
    "unsubscribe_url": "https://example.com/emailer/unsubscribe/TOKEN/",
}

#: The shapes the longest samples are filled with, each the worst case for some filters:
#: plain letters; characters HTML escaping multiplies by up to six; a character URL quoting
#: multiplies by twelve; words, for the filters that count or cut them.
WORST_FILLS = ("W", "\"&<>'", "\U0001f600", "Ww ")

_PARTS = (("subject", False), ("body", False), ("html_body", True))


class RenderError(Exception):
    """A part of a message could not be rendered: which part, and why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class Rendered:
    subject: str
    body: str
    html_body: str


@dataclass(frozen=True)
class CompiledTask:
    """A task's three templates, compiled, and the limits every render of them keeps."""

    subject: Template
    body: Template
    html_body: Template | None
    limits: Limits

    def render(self, context: Mapping[str, Any]) -> Rendered:
        """The message for ``context``; ``RenderError`` names the part that failed."""
        values = _read_only(context)
        subject = " ".join(self._part("subject", self.subject, values, html=False).split())
        return Rendered(
            subject=subject,
            body=self._part("body", self.body, values, html=False),
            html_body=(
                self._part("html_body", self.html_body, values, html=True)
                if self.html_body is not None
                else ""
            ),
        )

    def _part(self, field: str, template: Template, values: Any, *, html: bool) -> str:
        try:
            return _plain(sandbox.render(template, Context(values, autoescape=html),
                                         limits=self.limits))
        except Exception as exc:  # one message's failure, never the worker's
            raise RenderError(field, str(exc) or type(exc).__name__) from exc


def _plain(rendered: str) -> str:
    """The text of a rendered template without its ``SafeString`` mark."""
    return str.__str__(rendered)


def _read_only(values: Mapping[str, Any]) -> dict[str, Any]:
    """The context with its values as read-only mappings: a template may call a value's
    methods that take no argument, and ``{{ participant.clear }}`` must not empty the
    participant. The top level stays a dict of its own, for ``{% now ... as year %}``."""
    return {
        k: MappingProxyType(_read_only(v)) if isinstance(v, Mapping) else v
        for k, v in values.items()
    }


def compile_task(
    *, subject: str, body: str, html_body: str, limits: Limits | None = None
) -> CompiledTask:
    """Compile the templates; raises ``TemplateSyntaxError`` naming the first broken part."""
    limits = limits or Limits.from_settings()
    compiled: dict[str, Template | None] = {}
    for field, html in _PARTS:
        source = {"subject": subject, "body": body, "html_body": html_body}[field]
        if field == "html_body" and not (source or "").strip():
            compiled[field] = None
            continue
        try:
            compiled[field] = sandbox.compile_template(source or "", html=html, limits=limits)
        except TemplateSyntaxError as exc:
            raise TemplateSyntaxError(f"{field}: template error: {exc}") from None
    assert compiled["subject"] is not None and compiled["body"] is not None
    return CompiledTask(
        subject=compiled["subject"],
        body=compiled["body"],
        html_body=compiled["html_body"],
        limits=limits,
    )


def worst_cases(
    *,
    name_length: int,
    email_length: int,
    project_length: int,
    statuses: Sequence[str],
    unsubscribe_url: str,
) -> Iterator[dict[str, Any]]:
    """Contexts with the longest values each field allows, in each of ``WORST_FILLS``'s
    shapes, for each status (a template may branch on it)."""
    domain = "@example.com"
    for status in statuses:
        for fill in WORST_FILLS:
            def filled(length: int, fill: str = fill) -> str:
                return (fill * length)[:length]

            yield {
                "participant": {
                    "id": 2**63 - 1,
                    "name": filled(name_length),
                    "email": filled(email_length - len(domain)) + domain,
                    "status": status,
                },
                "project": {"name": filled(project_length)},
                "unsubscribe_url": unsubscribe_url,
            }


def template_errors(
    *,
    subject: str,
    body: str,
    html_body: str,
    samples: Sequence[Mapping[str, Any]] = (SAMPLE_CONTEXT,),
    limits: Limits | None = None,
) -> dict[str, str]:
    """Each broken or too costly template's field and why: compiled, then rendered with each
    of ``samples`` under the render limits; the first failure per field is reported."""
    limits = limits or Limits.from_settings()
    errors: dict[str, str] = {}
    for field, html in _PARTS:
        source = {"subject": subject, "body": body, "html_body": html_body}[field] or ""
        if not source.strip():
            continue
        try:
            template = sandbox.compile_template(source, html=html, limits=limits)
        except TemplateSyntaxError as exc:
            errors[field] = f"template error: {exc}"
            continue
        for sample in samples:
            try:
                sandbox.render(
                    template, Context(_read_only(sample), autoescape=html), limits=limits
                )
            except RenderLimitExceeded as exc:
                errors[field] = (
                    "template too costly to render (checked with the longest name, address "
                    f"and project name allowed): {exc}"
                )
                break
            except Exception as exc:  # a filter that raises on real data fails here, not at 3 a.m.
                errors[field] = f"template error while rendering a sample: {exc}"
                break
    return errors
