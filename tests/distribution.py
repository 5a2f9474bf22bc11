"""How the suite's tests are shared out among pytest-xdist's processes.

``make test`` and the nox sessions run ``--dist loadgroup --no-loadscope-reorder``: a unit of
work is what one process runs from start to end, and the units are handed out in the order of
the collected items, to whichever process is free.

- A module's tests are one unit (``group_by_module``), as ``--dist loadfile`` made them: they
  run in one process, one after the other, so a module's shared processes
  (``shared_processes`` in tests/conftest.py) and module-scoped fixtures are made once.
  A module marked ``spread`` is the exception: each of its tests is a unit of its own. Those
  are the modules of long, independent real-process tests that share nothing module-wide
  (test_exactly_once.py's four scenarios take 20 s to two minutes each): as one unit, such a
  module kept one process busy long after the others had run out of work.
- The long units are handed out first (``longest_first``): the tests of ``spread`` modules,
  then the modules that start real processes (``slow``), then the in-process rest, which fills
  the processes up at the end. xdist's own order (the most tests first) did the opposite: the
  modules of one to four long tests came last, and the run waited for the last of them.
"""

from __future__ import annotations

import pytest


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def spread(item: pytest.Item) -> bool:
    """Whether ``item``'s module lets its tests run in different processes."""
    return item.get_closest_marker("spread") is not None


def group_by_module(items: list[pytest.Item]) -> None:
    """Give every test of a module not marked ``spread`` the module's ``xdist_group``."""
    for item in items:
        if not spread(item) and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(_module(item)))


def longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with the tests of ``spread`` modules first, then the modules with a ``slow``
    test, then the rest; each module's tests keep their order."""
    slow_modules = {_module(item) for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> int:
        if spread(item):
            return 0
        return 1 if _module(item) in slow_modules else 2

    return sorted(items, key=rank)
