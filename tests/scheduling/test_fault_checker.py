"""The fault campaign's checker reads the bodies' log as it must (bench/faultcheck.py).

No cluster here: lines as the bodies write them, and what the checker makes of them. A frozen
body is not running while frozen, but a tick it writes after it is thawed is; a skewed host's
clock is put right before anything is compared.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from faultcheck import overlap_at, read_bodies


def _log(folder: Path, name: str, *lines: str) -> None:
    (folder / name).write_text("".join(f"{line}\n" for line in lines))


@pytest.fixture
def bodies_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "bodies"
    folder.mkdir()
    return folder


def test_a_thawed_body_that_ticks_while_another_runs_overlaps_it(bodies_dir: Path) -> None:
    # Attempt 1 on w1 ticks, is frozen after 101, ticks once more at 110 after SIGCONT; attempt
    # 2 on w2 ticked from 108 to 111.
    _log(bodies_dir, "w1-1", "S x7 1 w1 100.000 0", "T x7 1 w1 100.500 0", "T x7 1 w1 101.000 0",
         "T x7 1 w1 110.000 0")  # fmt: skip
    _log(bodies_dir, "w2-1", "S x7 2 w2 108.000 0", "T x7 2 w2 109.000 0", "T x7 2 w2 110.000 0",
         "E x7 2 w2 111.000 0")  # fmt: skip
    bodies = read_bodies(bodies_dir)
    first, second = bodies[("x7", 1, "w1")], bodies[("x7", 2, "w2")]
    assert first.stretches() == [(100.0, 101.0), (110.0, 110.0)]
    assert first.ended is None and second.ended == 111.0
    assert overlap_at(first.stretches(), second.stretches()) == 110.0


def test_a_frozen_body_that_never_ticks_again_does_not_overlap(bodies_dir: Path) -> None:
    _log(bodies_dir, "w1-1", "S x7 1 w1 100.000 0", "T x7 1 w1 101.000 0")
    _log(bodies_dir, "w2-1", "S x7 2 w2 108.000 0", "E x7 2 w2 111.000 0")
    bodies = read_bodies(bodies_dir)
    assert (
        overlap_at(bodies[("x7", 1, "w1")].stretches(), bodies[("x7", 2, "w2")].stretches()) is None
    )


def test_a_skewed_host_s_times_are_put_right(bodies_dir: Path) -> None:
    # w3's clock ran 4.5 s ahead: its body started at 100.5 on the machine's clock.
    _log(bodies_dir, "w3-1", "S x9 1 w3 105.000 4.5", "E x9 1 w3 105.500 4.5")
    body = read_bodies(bodies_dir)[("x9", 1, "w3")]
    assert body.started == pytest.approx(100.5)
    assert body.ended == pytest.approx(101.0)
