"""A task's subject and bodies as Django templates: compiled once, rendered per participant.

Compiling is the check made when a task is saved (so a broken template is refused beside its
field) and the first step of a run (so a run renders thousands of messages from one compiled
template). The text parts render without HTML escaping; the HTML part escapes as usual.

A ``Context`` carries its own ``autoescape`` (on by default, whatever the engine says), so each
part is rendered with a context that says which it is. What comes back is plain ``str``, never
Django's "already safe" ``SafeString``: a text body is not HTML, and a page that shows it must
escape it (the admin's preview hands it to ``format_html`` as an argument).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.template import Context, Engine, Template, TemplateSyntaxError

_TEXT = Engine(autoescape=False)
_HTML = Engine(autoescape=True)

#: What a template may use, with the values the preview and the save check render.
SAMPLE_CONTEXT: dict[str, Any] = {
    "participant": {"name": "Ada Lovelace", "email": "ada@example.com", "status": "invited"},
    "project": {"name": "Sample project"},
    "unsubscribe_url": "https://example.com/emailer/unsubscribe/TOKEN/",
}


@dataclass(frozen=True)
class Rendered:
    subject: str
    body: str
    html_body: str


@dataclass(frozen=True)
class CompiledTask:
    """A task's three templates, compiled."""

    subject: Template
    body: Template
    html_body: Template | None

    def render(self, context: dict[str, Any]) -> Rendered:
        text = Context(context, autoescape=False)
        subject = " ".join(_plain(self.subject.render(text)).split())
        return Rendered(
            subject=subject,
            body=_plain(self.body.render(text)),
            html_body=(
                _plain(self.html_body.render(Context(context, autoescape=True)))
                if self.html_body is not None
                else ""
            ),
        )


def _plain(rendered: str) -> str:
    """The text of a rendered template without its ``SafeString`` mark."""
    return str.__str__(rendered)


def compile_task(*, subject: str, body: str, html_body: str) -> CompiledTask:
    """Compile the templates; raises ``TemplateSyntaxError`` for the first broken one."""
    return CompiledTask(
        subject=_TEXT.from_string(subject),
        body=_TEXT.from_string(body),
        html_body=_HTML.from_string(html_body) if html_body.strip() else None,
    )


def template_errors(*, subject: str, body: str, html_body: str) -> dict[str, str]:
    """Each broken template's field and why, rendered once with the sample context."""
    errors: dict[str, str] = {}
    for field, source, engine in (
        ("subject", subject, _TEXT),
        ("body", body, _TEXT),
        ("html_body", html_body, _HTML),
    ):
        if not (source or "").strip():
            continue
        try:
            engine.from_string(source).render(
                Context(SAMPLE_CONTEXT, autoescape=engine.autoescape)
            )
        except TemplateSyntaxError as exc:
            errors[field] = f"template error: {exc}"
        except Exception as exc:  # a filter that raises on real data fails here, not at 3 a.m.
            errors[field] = f"template error while rendering a sample: {exc}"
    if "\n" in (subject or "").strip():
        errors.setdefault("subject", "must be one line")
    return errors
