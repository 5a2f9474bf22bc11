"""The pacer: the task's rate limit, and a delay that grows on "try later" and shrinks again."""

from __future__ import annotations

from emailer.pacing import Pacer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 3))
        self.now += seconds


def pacer(clock: Clock, rate: float = 0) -> Pacer:
    return Pacer(rate=rate, backoff_base=1, backoff_max=8, clock=clock.time, sleep=clock.sleep)


def test_without_a_rate_or_pushback_nothing_waits() -> None:
    clock = Clock()
    p = pacer(clock)
    for _ in range(100):
        p.wait()
    assert clock.slept == []


def test_a_rate_spaces_messages_evenly() -> None:
    clock = Clock()
    p = pacer(clock, rate=4)
    for _ in range(5):
        p.wait()
    assert clock.slept == [0.25, 0.25, 0.25, 0.25]
    assert clock.now == 101.0


def test_a_slow_send_uses_up_the_interval_instead_of_adding_to_it() -> None:
    clock = Clock()
    p = pacer(clock, rate=2)
    p.wait()
    clock.now += 2.0  # the message took two seconds
    p.wait()
    assert clock.slept == []


def test_try_later_doubles_the_delay_up_to_the_cap_and_success_halves_it() -> None:
    clock = Clock()
    p = pacer(clock)
    for _ in range(5):
        p.try_later()
    assert p.delay == 8
    p.accepted()
    assert p.delay == 4
    p.wait()
    assert clock.slept == [4]
    p.accepted()
    p.accepted()
    p.accepted()
    assert p.delay == 0
