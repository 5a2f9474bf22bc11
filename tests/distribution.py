"""How the suite's tests are shared out among pytest-xdist's processes.

``make test`` and the nox sessions run ``--dist loadgroup --no-loadscope-reorder``, with this
module's scheduler (``ModuleScheduling``, made by ``pytest_xdist_make_scheduler`` in
tests/conftest.py): a unit of work is what one process runs from start to end, and the units
are handed out in the order of the collected items, to whichever process is free.

- A module's tests are one unit, as ``--dist loadfile`` made them: they run in one process,
  one after the other, so a module's shared processes (``shared_processes`` in
  tests/conftest.py) and module-scoped fixtures are made once. A module marked ``spread`` is
  the exception: each of its tests is a unit of its own. Those are the modules of long,
  independent real-process tests that share nothing module-wide (test_exactly_once.py's four
  scenarios take 20 s to two minutes each): as one unit, such a module kept one process busy
  long after the others had run out of work.
- The long units are handed out first (``longest_first``): the fault campaign's run, the
  tests of ``spread`` modules, then the modules that start real processes (``slow``, those
  with the most such tests first), then the in-process rest, which fills the processes up at
  the end. xdist's own order (the most tests first) did the opposite: the
  modules of one to four long tests came last, and the run waited for the last of them.

Why a scheduler of its own rather than ``xdist_group`` marks: xdist groups by a suffix it
appends to each test's node id, and from pytest 9 a node's id can no longer be changed that
way, so the marks were silently ignored and every test was a unit of its own (a module's
shared worker started again in each process that drew one of its tests, its module-scoped
fixtures made again whenever a process came back to it). The scheduler needs nothing from
the items: it reads the unit from the node id and, for ``spread``, the module's source.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def spread(item: pytest.Item) -> bool:
    """Whether ``item``'s module lets its tests run in different processes."""
    return item.get_closest_marker("spread") is not None


#: A module is ``spread`` when its source marks it so (its ``pytestmark``): the controller,
#: which schedules, collects nothing and sees node ids alone.
SPREAD_MARK = re.compile(r"\bpytest\.mark\.spread\b")


class ModuleScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with a module as the scope, or each test of a ``spread``
    module (see the module docstring)."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self._root = Path(config.rootpath)
        self._spread: dict[str, bool] = {}

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return nodeid if self._module_is_spread(module) else module

    def _module_is_spread(self, module: str) -> bool:
        if module not in self._spread:
            try:
                source = (self._root / module).read_text(encoding="utf-8")
            except OSError:
                source = ""
            self._spread[module] = SPREAD_MARK.search(source) is not None
        return self._spread[module]


def longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with the fault campaign's run first (one test of three to four minutes: begun
    late, the whole run waits for it), then the tests of ``spread`` modules, then the modules
    with a ``slow`` test, those with the most such tests first (a module is one unit: its real-
    process tests are what make it long), then the rest; each module's tests keep their order.
    """
    slow_tests = Counter(_module(item) for item in items if item.get_closest_marker("slow"))

    def rank(item: pytest.Item) -> tuple[int, int]:
        if item.get_closest_marker("campaign"):
            return (0, 0)
        if spread(item):
            return (1, 0)
        module = _module(item)
        if module in slow_tests:
            return (2, -slow_tests[module])
        return (3, 0)

    return sorted(items, key=rank)
