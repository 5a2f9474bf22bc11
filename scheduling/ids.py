"""Random (version 4) UUIDs as text, drawn from the operating system in bulk.

``uuid.uuid4()`` reads 16 bytes from the kernel per call. The scheduler needs two per
occurrence (the Celery task id and kombu's delivery tag), and at thousands of occurrences a
second those system calls were a tenth of its time. Reading a few kilobytes at once gives the
same randomness for one call per thousand ids.
"""

from __future__ import annotations

import os
import threading

_POOL_SIZE = 1024

_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}

_lock = threading.Lock()
_pool: list[str] = []


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


def _forget_after_fork() -> None:
    """A forked child must not hand out the ids its parent still holds."""
    global _lock
    _lock = threading.Lock()
    _pool.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
