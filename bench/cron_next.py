"""Measurement 5: the cost of one next-occurrence call of a cron schedule.

The claim asks each due cron job for its next occurrence, so this call is on the hot path.
The script times ``CronExpression.next_after`` as it is now (cronsim underneath) against the
hand-written parser and iterator it replaced, loaded from git at ``--baseline``. For each
expression and zone both sides answer the same 500 instants (spread over a year); rounds
alternate between the sides, and the table reports the best and the median round in
microseconds per call. It needs no database and no broker.

    .venv/bin/python bench/cron_next.py            # full: 15 rounds
    .venv/bin/python bench/cron_next.py --quick    # 3 rounds, docs untouched
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduling.timing.cron import CronExpression  # noqa: E402

# The last commit whose scheduling/timing/cron.py is the hand-written parser.
BASELINE = "5fffa26"
EXPRESSIONS = [
    "* * * * *",
    "*/5 * * * *",
    "30 * * * *",
    "0 9 * * 1-5",
    "30 2 * * *",
    "*/20 8-17 * * MON-FRI",
    "15 */3 1,15 * *",
    "0 0 1 1 *",
    "0 0 29 2 *",
]
ZONES = ["UTC", "Europe/Berlin"]
SECTION = "## 5. Next occurrence of a cron expression"
DOCS = ROOT / "docs" / "benchmarks.md"


def load_baseline(rev: str) -> ModuleType:
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:scheduling/timing/cron.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "cron_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("cron_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["cron_baseline"] = module
    spec.loader.exec_module(module)
    return module


def per_call_us(expression: Any, zone: ZoneInfo, instants: list[datetime]) -> float:
    """CPU microseconds per call of ``next_after`` over ``instants``."""
    started = time.process_time()
    for instant in instants:
        expression.next_after(instant, zone)
    return (time.process_time() - started) / len(instants) * 1e6


def measure(rounds: int, rev: str) -> list[dict[str, Any]]:
    baseline = load_baseline(rev)
    start = datetime(2024, 1, 3, 10, 7, 13, tzinfo=UTC)
    instants = [start + timedelta(minutes=1051 * i) for i in range(500)]
    rows = []
    for text in EXPRESSIONS:
        for zone_name in ZONES:
            zone = ZoneInfo(zone_name)
            sides = {
                "cronsim": CronExpression.parse(text),
                "hand-written": baseline.CronExpression.parse(text),
            }
            for side in sides.values():  # the same answers, and warm caches on both sides
                side.next_after(instants[0], zone)
            times: dict[str, list[float]] = {name: [] for name in sides}
            for _ in range(rounds):
                for name, expression in sides.items():
                    times[name].append(per_call_us(expression, zone, instants))
            row: dict[str, Any] = {"expression": text, "zone": zone_name}
            for name, found in times.items():
                row[f"{name} best"] = min(found)
                row[f"{name} median"] = statistics.median(found)
            row["ratio"] = row["cronsim median"] / row["hand-written median"]
            rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| expression | zone | cronsim best / median (µs) | hand-written best / median (µs) "
        "| median ratio |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| `{row['expression']}` | {row['zone']} "
            f"| {row['cronsim best']:.1f} / {row['cronsim median']:.1f} "
            f"| {row['hand-written best']:.1f} / {row['hand-written median']:.1f} "
            f"| {row['ratio']:.2f} |"
        )
    return "\n".join(lines)


def write_section(rows: list[dict[str, Any]], rounds: int, rev: str) -> None:
    body = (
        f"{SECTION}\n\n"
        "`bench/cron_next.py`: CPU microseconds (process time, steadier than wall time on a "
        "shared machine) per `CronExpression.next_after` call, 500 instants per expression "
        f"and zone, {rounds} rounds alternating between cronsim (with the module's parsed-once "
        f"search) and the hand-written iterator of `{rev}`. A ratio below 1 means cronsim is "
        "faster. `run_all.py` keeps this section when it rewrites the page.\n\n"
        + table(rows)
        + "\n"
    )
    text = DOCS.read_text()
    kept = saved_section(text)
    text = text.replace(kept, "").rstrip("\n") + "\n\n" + body
    DOCS.write_text(text)


def saved_section(text: str) -> str:
    """This script's section of ``text`` (up to the next section), or ""."""
    if SECTION not in text:
        return ""
    start = text.index(SECTION)
    following = text.find("\n## ", start + len(SECTION))
    return text[start : following + 1 if following >= 0 else len(text)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds; docs untouched.")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--baseline", default=BASELINE, help="git revision of the old parser")
    args = parser.parse_args()
    rounds = 3 if args.quick else args.rounds
    rows = measure(rounds, args.baseline)
    print(table(rows))
    if not args.quick:
        write_section(rows, rounds, args.baseline)


if __name__ == "__main__":
    main()
