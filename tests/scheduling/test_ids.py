"""Task ids and delivery tags drawn in bulk are ordinary, unique version-4 UUIDs."""

from __future__ import annotations

import os
import uuid

from scheduling import ids


def test_ids_are_version_4_uuids_in_canonical_text() -> None:
    drawn = [ids.uuid4_text() for _ in range(5000)]
    for text in drawn:
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
    assert len(set(drawn)) == len(drawn)


def test_a_forked_child_does_not_reuse_its_parents_pool() -> None:
    ids.uuid4_text()  # the parent now holds a pool of unused ids
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.write(write, ids.uuid4_text().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    os.close(read)
    parent_rest = {ids.uuid4_text() for _ in range(ids._POOL_SIZE)}
    assert child not in parent_rest
