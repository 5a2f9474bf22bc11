"""UUIDs as text, their randomness drawn from the operating system in bulk.

``uuid.uuid4()`` reads 16 bytes from the kernel per call. The scheduler needs two per
occurrence (the Celery task id and kombu's delivery tag), and at thousands of occurrences a
second those system calls were a tenth of its time. Reading a few kilobytes at once gives the
same randomness for one call per thousand ids.

Task ids are time-ordered (version 7, RFC 9562): a unique index on random ids puts each new
row at a random leaf, which on a long history is a page read per insert; ids that grow with
time all land on the index's right edge. Delivery tags are never indexed and stay random
(version 4).
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_POOL_SIZE = 1024

_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}

_lock = threading.Lock()
_pool: list[str] = []

#: Random parts of version-7 ids, formatted ahead: the variant and ``rand_b``
#: (``-8xxx-xxxxxxxxxxxx``).
_v7_pool: list[str] = []
#: The last version-7 time used, in 1/4096 ms (``unix_ts_ms`` and ``rand_a`` together).
_v7_ticks = 0


def _refill() -> None:
    """Format a pool of ids: the random hex with the version nibble set to 4 and the variant
    bits to 10 (RFC 4122), exactly as ``uuid.UUID(bytes=..., version=4)`` sets them."""
    raw = os.urandom(16 * _POOL_SIZE).hex()
    for start in range(0, len(raw), 32):
        h = raw[start : start + 32]
        variant = _VARIANT[h[16]]
        _pool.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{variant}{h[17:20]}-{h[20:]}")


def uuid4_text() -> str:
    """A new random UUID, formatted as ``str(uuid.uuid4())`` would format it."""
    with _lock:
        if not _pool:
            _refill()
        return _pool.pop()


def _refill_v7() -> None:
    """Format a pool of version-7 random parts: ``rand_b`` with the variant bits set to 10."""
    raw = os.urandom(8 * _POOL_SIZE).hex()
    for start in range(0, len(raw), 16):
        h = raw[start : start + 16]
        _v7_pool.append(f"-{_VARIANT[h[0]]}{h[1:4]}-{h[4:]}")


def uuid7_text() -> str:
    """A new time-ordered UUID (version 7), formatted as ``str(uuid.UUID(...))`` would.

    48 bits of Unix time in milliseconds, the version, the fraction of the millisecond in
    1/4096 (``rand_a``: RFC 9562, section 6.2, method 3), the variant and 62 random bits.
    The ids of one process strictly increase: an id that would not come after the previous
    one (two in one 1/4096 ms, or a clock stepped back) takes the previous time plus one
    step. The claim's statement in SQL (``lock_due``, in
    ``ledger/engines/sql/postgresql/claim.sql``) reads the clock the same way.
    """
    global _v7_ticks
    with _lock:
        if not _v7_pool:
            _refill_v7()
        rest = _v7_pool.pop()
        _v7_ticks = max(time.time_ns() * 4096 // 1_000_000, _v7_ticks + 1)
        h = f"{_v7_ticks:015x}"
    return f"{h[:8]}-{h[8:12]}-7{h[12:]}{rest}"


def uuid7() -> uuid.UUID:
    """A new time-ordered UUID (``uuid7_text``) as a ``uuid.UUID``: the models' default."""
    return uuid.UUID(uuid7_text())


def _forget_after_fork() -> None:
    """A forked child must not hand out the ids (or the random parts) its parent still holds."""
    global _lock, _v7_ticks
    _lock = threading.Lock()
    _pool.clear()
    _v7_pool.clear()
    _v7_ticks = 0


os.register_at_fork(after_in_child=_forget_after_fork)
