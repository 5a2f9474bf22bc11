"""Task ids and delivery tags drawn in bulk are ordinary, unique UUIDs: delivery tags random
(version 4), task ids time-ordered (version 7), rising within a process."""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest

from scheduling import ids


def test_ids_are_version_4_uuids_in_canonical_text() -> None:
    drawn = [ids.uuid4_text() for _ in range(5000)]
    for text in drawn:
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
    assert len(set(drawn)) == len(drawn)


def test_task_ids_are_version_7_uuids_in_canonical_text_carrying_the_time() -> None:
    before = time.time_ns() // 1_000_000
    drawn = [ids.uuid7_text() for _ in range(5000)]
    after = time.time_ns() // 1_000_000
    for text in drawn:
        parsed = uuid.UUID(text)
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
        assert before <= parsed.int >> 80 <= after + 1  # unix_ts_ms, 48 bits
    assert isinstance(ids.uuid7(), uuid.UUID)


def test_task_ids_strictly_increase_even_within_one_millisecond() -> None:
    drawn = [ids.uuid7_text() for _ in range(20_000)]  # hundreds per millisecond
    per_millisecond = Counter(uuid.UUID(text).int >> 80 for text in drawn)
    assert max(per_millisecond.values()) > 1  # some millisecond holds several of them
    assert drawn == sorted(drawn)
    assert len(set(drawn)) == len(drawn)


def test_task_ids_keep_increasing_when_the_clock_steps_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = ids.uuid7_text()
    an_hour_ago = time.time_ns() - 3600 * 10**9
    monkeypatch.setattr(ids.time, "time_ns", lambda: an_hour_ago)
    later = [ids.uuid7_text() for _ in range(100)]
    assert [first, *later] == sorted({first, *later})


def _in_a_child(draw: Callable[[], str], count: int) -> list[str]:
    """``count`` ids drawn by a forked child of this process."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.write(write, ",".join(draw() for _ in range(count)).encode())
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.waitpid(pid, 0)
    os.close(read)
    return b"".join(chunks).decode().split(",")


def test_a_forked_child_does_not_reuse_its_parents_pool() -> None:
    ids.uuid4_text()  # the parent now holds a pool of unused ids
    child = _in_a_child(ids.uuid4_text, 1)[0]
    parent_rest = {ids.uuid4_text() for _ in range(ids._POOL_SIZE)}
    assert child not in parent_rest


def test_a_forked_child_does_not_reuse_its_parents_task_id_randomness() -> None:
    ids.uuid7_text()  # the parent now holds a pool of random parts and its last time
    child = _in_a_child(ids.uuid7_text, 10)
    parent_rest = [ids.uuid7_text() for _ in range(ids._POOL_SIZE)]
    # The last 62 bits are the random part: the child drew its own.
    assert not {text[19:] for text in child} & {text[19:] for text in parent_rest}
    assert child == sorted(child)
    assert all(uuid.UUID(text).version == 7 for text in child)
