"""The template language a mail is written in, and the budget every render of one runs under.

A task's subject and bodies are typed by staff in the admin (or written to the row by anyone
with the database) and rendered for every participant by a worker, and for every view of the
task's admin page. Django's full template language can make that cost anything: three nested
``{% for %}`` over a 200-character name are eight million rounds and 8 MB of output on each
page view; a chain of ``force_escape`` filters, or ``{% with %}`` blocks that each double a
value, grows exponentially without any loop; ``center``, ``ljust`` or ``{% lorem %}`` produce
as much as their argument says; and ``{% include %}``, ``{% load %}`` or ``{% debug %}``
reach past the mail into the project. So mail templates are compiled by an engine of the
emailer's own, a Django engine with a short list of tags and filters, and rendered under a
budget (``render``).

What a template may say, refused when it is compiled (so when the task is saved, beside the
field):

- Only the tags in ``TAGS`` and the filters in ``FILTERS``. Left out: whatever reads files,
  other templates or the project (``include``, ``extends``, ``load``, ``url``, ``debug``,
  ``csrf_token``, ``querystring``, ``partial``), output whose size an argument decides
  (``lorem``, ``center``, ``ljust``, ``rjust``, ``stringformat``, ``floatformat``, ``join``,
  ``widthratio``), whatever would let a participant's name into the HTML part unescaped
  (``safe``, ``safeseq``, ``autoescape``), the HTML parsers of user text that Django has had
  to fix for denial of service (``urlize``, ``striptags``, ``truncatewords_html``, ...), and
  what a mail has no values for (dates, ``random``, ``pprint``, ``dictsort``, ...).
- At most ``EMAILER_TEMPLATE_MAX_LENGTH`` characters; tags nested at most ``NESTING_LIMIT``
  deep (deeper, Django's parser would run out of stack); ``{% for %}`` nested at most
  ``EMAILER_TEMPLATE_MAX_LOOP_DEPTH`` deep, whatever the data.

What rendering one part of one message may cost, counted while it renders, in the worker and
in the admin alike:

- ``EMAILER_RENDER_MAX_CHARS``: every piece of text the template produces counts: each value
  shown, each filter's result, and literal text inside loops, each time round (literal text
  outside loops is the template's own, bounded by its length). That bounds the memory a
  render holds, intermediate values (``{% with %}``, filter chains) included, not only what
  it returns.
- ``EMAILER_RENDER_MAX_LOOPS``: each time round any ``{% for %}``, even one that shows nothing.
- ``EMAILER_RENDER_TIMEOUT`` seconds, read at each of those counts.

Between two counts a render does at most one filter on a value the budget already bounds, and
every allowed filter's work and result are linear in its input, so a render stops within one
such step of its limit, with ``RenderLimitExceeded`` naming the limit and its setting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sized
from contextvars import ContextVar
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django.template import (
    Context,
    Engine,
    Library,
    Node,
    NodeList,
    Template,
    TemplateSyntaxError,
    defaultfilters,
    defaulttags,
)
from django.template.base import Lexer, TextNode, TokenType
from django.template.defaulttags import ForNode, IfNode

from emailer import conf

#: The tags a mail template may use, each with the words that continue or close it.
TAGS: dict[str, tuple[str, ...]] = {
    "if": ("elif", "else", "endif"),
    "for": ("empty", "endfor"),
    "with": ("endwith",),
    "filter": ("endfilter",),
    "spaceless": ("endspaceless",),
    "ifchanged": ("else", "endifchanged"),
    "comment": ("endcomment",),
    "verbatim": ("endverbatim",),
    "cycle": (),
    "firstof": (),
    "now": (),
    "templatetag": (),
}

#: The filters a mail template may use: each one's work and result are linear in its input.
FILTERS: tuple[str, ...] = (
    "add",
    "capfirst",
    "cut",
    "default",
    "default_if_none",
    "escape",
    "first",
    "force_escape",
    "iriencode",
    "last",
    "length",
    "linebreaks",
    "linebreaksbr",
    "lower",
    "pluralize",
    "slice",
    "slugify",
    "title",
    "truncatechars",
    "truncatewords",
    "upper",
    "urlencode",
    "wordcount",
    "yesno",
)

#: How deep tags may nest. Django's parser and renderer recurse once per level (a few frames
#: each); this keeps a template far from Python's recursion limit. Not a setting: no mail
#: needs more.
NESTING_LIMIT = 20

_OPENERS = {name for name, words in TAGS.items() if words}
_CLOSERS = {f"end{name}" for name in _OPENERS}
_WORDS = set(TAGS) | {word for words in TAGS.values() for word in words}


@dataclass(frozen=True)
class Limits:
    """The bounds of one template and of one render of it (``EMAILER_TEMPLATE_*`` and
    ``EMAILER_RENDER_*``)."""

    max_length: int
    max_loop_depth: int
    max_chars: int
    max_loops: int
    timeout: float

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(
            max_length=int(conf.get("TEMPLATE_MAX_LENGTH")),
            max_loop_depth=int(conf.get("TEMPLATE_MAX_LOOP_DEPTH")),
            max_chars=int(conf.get("RENDER_MAX_CHARS")),
            max_loops=int(conf.get("RENDER_MAX_LOOPS")),
            timeout=float(conf.get("RENDER_TIMEOUT")),
        )


class RenderLimitExceeded(Exception):
    """A render stopped at one of its limits; the message names the limit and its setting."""


class Budget:
    """What one render may still spend; the metered nodes and filters draw on it."""

    def __init__(self, limits: Limits, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self.deadline = clock() + limits.timeout
        self.chars = 0
        self.loops = 0

    def spend(self, chars: int) -> None:
        """Count ``chars`` characters produced."""
        self.chars += chars
        if self.chars > self.limits.max_chars:
            raise RenderLimitExceeded(
                f"stopped at {self.limits.max_chars:,} characters produced "
                "(EMAILER_RENDER_MAX_CHARS)"
            )
        self._in_time()

    def loop(self) -> None:
        """Count one time round a loop."""
        self.loops += 1
        if self.loops > self.limits.max_loops:
            raise RenderLimitExceeded(
                f"stopped after {self.limits.max_loops:,} times round its loops "
                "(EMAILER_RENDER_MAX_LOOPS)"
            )
        self._in_time()

    def _in_time(self) -> None:
        if self.clock() > self.deadline:
            raise RenderLimitExceeded(
                f"stopped after {self.limits.timeout:g} s (EMAILER_RENDER_TIMEOUT)"
            )


#: The budget of the render running in this thread (``render`` sets it).
_ACTIVE: ContextVar[Budget | None] = ContextVar("emailer_render_budget", default=None)


def _budget() -> Budget:
    budget = _ACTIVE.get()
    if budget is None:  # a mail template rendered around ``render``: a bug, never unmetered
        raise RuntimeError("a mail template renders only through emailer.sandbox.render")
    return budget


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    return len(value) if isinstance(value, Sized) else 1


def _metered(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` (a Django filter) with its result counted. ``wraps`` keeps the flags Django
    reads (``is_safe``, ``needs_autoescape``) and the signature it checks arguments against."""

    @wraps(func)
    def metered(*args: Any, **kwargs: Any) -> Any:
        result = func(*args, **kwargs)
        _budget().spend(_size(result))
        return result

    return metered


def _library() -> Library:
    library = Library()
    for name in TAGS:
        library.tag(name, defaulttags.register.tags[name])
    for name in FILTERS:
        library.filter(name, _metered(defaultfilters.register.filters[name]))
    return library


class _MailEngine(Engine):
    """A Django engine with none of Django's built-in tags and filters: only ``_library``'s
    (assigned after construction), no loaders' reach, no ``{% load %}``able libraries."""

    default_builtins: list[str] = []


def _engine(*, autoescape: bool) -> Engine:
    engine = _MailEngine(autoescape=autoescape, debug=False, string_if_invalid="")
    engine.template_builtins = [_LIBRARY]
    return engine


_LIBRARY = _library()
_TEXT = _engine(autoescape=False)
_HTML = _engine(autoescape=True)


class _Metered(Node):
    """A node whose output is counted against the render's budget."""

    child_nodelists = ()

    def __init__(self, inner: Node) -> None:
        self.inner = inner
        self.token = getattr(inner, "token", None)
        self.origin = getattr(inner, "origin", None)

    def render(self, context: Context) -> str:
        text = self.inner.render_annotated(context)
        _budget().spend(len(text))
        return text


class _Round(Node):
    """The first node of a loop's body: counts one time round."""

    child_nodelists = ()

    def __init__(self, loop: ForNode) -> None:
        self.token = getattr(loop, "token", None)
        self.origin = getattr(loop, "origin", None)

    def render(self, context: Context) -> str:
        _budget().loop()
        return ""


def _scan(source: str) -> None:
    """Refuse a tag that is not in ``TAGS``, and tags nested deeper than ``NESTING_LIMIT``,
    before Django's parser (which recurses per level) reads the template."""
    depth = 0
    in_comment = False
    for token in Lexer(source).tokenize():
        if token.token_type != TokenType.BLOCK or not token.contents.split():
            continue
        word = token.contents.split()[0]
        if in_comment:  # Django skips a comment's contents unread; so does this
            in_comment = word != "endcomment"
            continue
        if word not in _WORDS:
            raise TemplateSyntaxError(
                f"line {token.lineno}: the tag {{% {word} %}} is not available in mail "
                f"templates; they may use {', '.join(TAGS)}"
            )
        if word == "comment":
            in_comment = True
        elif word in _OPENERS:
            depth += 1
            if depth > NESTING_LIMIT:
                raise TemplateSyntaxError(
                    f"line {token.lineno}: tags nested more than {NESTING_LIMIT} deep"
                )
        elif word in _CLOSERS:
            depth -= 1


def _children(node: Node) -> list[NodeList]:
    if isinstance(node, IfNode):
        return [nodelist for _, nodelist in node.conditions_nodelists]
    return [
        child
        for name in node.child_nodelists
        if isinstance(child := getattr(node, name, None), NodeList)
    ]


def _meter(nodelist: NodeList, *, loops: int, limits: Limits) -> None:
    """Count every leaf node's output (but literal text outside loops) and every time round a
    loop; refuse loops nested deeper than the limit."""
    for i, node in enumerate(nodelist):
        if isinstance(node, ForNode):
            if loops + 1 > limits.max_loop_depth:
                line = node.token.lineno if getattr(node, "token", None) else "?"
                raise TemplateSyntaxError(
                    f"line {line}: {{% for %}} loops nested {loops + 1} deep; at most "
                    f"{limits.max_loop_depth} (EMAILER_TEMPLATE_MAX_LOOP_DEPTH)"
                )
            _meter(node.nodelist_loop, loops=loops + 1, limits=limits)
            node.nodelist_loop.insert(0, _Round(node))
            _meter(node.nodelist_empty, loops=loops, limits=limits)
            continue
        children = _children(node)
        if not children and (loops or not isinstance(node, TextNode)):
            # Literal text outside loops is the template's own, already bounded in length.
            nodelist[i] = _Metered(node)
        for child in children:
            _meter(child, loops=loops, limits=limits)


def compile_template(source: str, *, html: bool, limits: Limits) -> Template:
    """``source`` compiled in the mail template language, every node metered.

    Raises ``TemplateSyntaxError`` for a template that is broken or goes beyond what a mail
    template may say (see the module docstring).
    """
    if len(source) > limits.max_length:
        raise TemplateSyntaxError(
            f"{len(source):,} characters; at most {limits.max_length:,} "
            "(EMAILER_TEMPLATE_MAX_LENGTH)"
        )
    _scan(source)
    try:
        template = (_HTML if html else _TEXT).from_string(source)
    except RecursionError:
        raise TemplateSyntaxError("nested too deeply to be read") from None
    except TemplateSyntaxError as exc:
        if str(exc).startswith("Invalid filter:"):
            raise TemplateSyntaxError(
                f"{exc}; mail templates may use {', '.join(FILTERS)}"
            ) from None
        raise
    _meter(template.nodelist, loops=0, limits=limits)
    return template


def render(template: Template, context: Context, *, limits: Limits) -> str:
    """``template`` (from ``compile_template``) rendered with ``context`` under a fresh budget;
    ``RenderLimitExceeded`` when it reaches a limit."""
    token = _ACTIVE.set(Budget(limits))
    try:
        return template.render(context)
    except RecursionError:
        raise RenderLimitExceeded("nested too deeply to be rendered") from None
    finally:
        _ACTIVE.reset(token)
