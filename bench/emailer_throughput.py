"""Measurement 5: emailer throughput with the delivery ledger, and its memory against batch size.

Three sides send the same 10,000-participant batch to one loopback aiosmtpd server (in this,
the driver, process; the senders run in a child process of their own), in the same run, in
alternating order, round after round:

- **plain**: a loop of Django's ``send_mail`` over one reused connection, subject and bodies
  formatted with f-strings: the floor any Django sender stands on;
- **messages only**: the emailer's own messages (compiled Django templates, ``Message-ID``,
  signed ``List-Unsubscribe`` link) over one connection, without the ledger;
- **emailer run**: ``run_send_email_task`` as a worker runs it: claim a chunk (one INSERT),
  send it, record it (one UPDATE), live counts every two seconds.

The ledger's cost is *emailer run* against *messages only*; the whole cost of the product
against Django's floor is *emailer run* against *plain*. Target: ≥ 300 messages/s, and the
bookkeeping under 20 % of the plain loop.

Memory: the same run for 10,000 and for 100,000 participants, each in a fresh child, with
Django's dummy mail backend (the SMTP side would only make the large run slow), reporting the
child's peak RSS and tracemalloc's peak: both stay flat because participants are streamed a
chunk at a time and never loaded into a list.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import common

DB = common.db_name("emailer")
DOCS = common.ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- emailer_throughput: begin -->", "<!-- emailer_throughput: end -->"

SUBJECT = "{{ participant.name }}, five minutes for {{ project.name }}?"
BODY = (
    "Hello {{ participant.name }},\n\nwe would value your answers to a short survey about "
    "{{ project.name }}. It takes five minutes.\n\nNot interested? {{ unsubscribe_url }}\n"
)
HTML = (
    "<p>Hello {{ participant.name }},</p><p>we would value your answers to a short survey "
    "about {{ project.name }}. It takes five minutes.</p>"
    '<p><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>'
)


# --- the SMTP server (driver process) ---------------------------------------------------------


class Sink:
    """Accepts everything and counts it; keeps nothing."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.lock:
            self.count += len(envelope.rcpt_tos)
        return "250 OK"


def start_server() -> tuple[Any, Sink, int]:
    from aiosmtpd.controller import Controller

    sink = Sink()
    port = common_free_port()
    controller = Controller(sink, hostname="127.0.0.1", port=port, server_hostname="localhost")
    controller.start()
    return controller, sink, port


def common_free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- children ---------------------------------------------------------------------------------


def load(n: int, name: str) -> Any:
    """A project with ``n`` participants, inserted set-based (nothing loaded into Python)."""
    from django.db import connection

    from emailer.models import Participant, Project, SendEmailTask

    project = Project.objects.create(name=name, state="active")
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {Participant._meta.db_table} (project_id, email, name, status,"
            " created_at) SELECT %s, 'p' || g || '@example.com', 'Person ' || g, 'invited',"
            " now() FROM generate_series(1, %s) g",
            [project.pk, n],
        )
    return SendEmailTask.objects.create(
        project=project,
        name=name,
        from_email="survey@example.org",
        subject=SUBJECT,
        body=BODY,
        html_body=HTML,
        batch_size=n,
        once_per_participant=False,  # every round mails everyone again, as a new occurrence
    )


def side_plain(task: Any) -> int:
    from django.core.mail import get_connection, send_mail

    from emailer.models import Participant

    sent = 0
    people = Participant.objects.filter(project_id=task.project_id).order_by("id")
    with get_connection() as connection:
        for email, name in people.values_list("email", "name").iterator(chunk_size=2000):
            sent += send_mail(
                f"{name}, five minutes for {task.project.name}?",
                f"Hello {name},\n\nwe would value your answers to a short survey about "
                f"{task.project.name}. It takes five minutes.\n\nNot interested? "
                "https://example.com/unsubscribe\n",
                "survey@example.org",
                [email],
                connection=connection,
                html_message=f"<p>Hello {name},</p><p>we would value your answers.</p>",
            )
    return sent


def side_messages(task: Any, when: Any) -> int:
    from django.core.mail import get_connection

    from emailer.messages import build_message
    from emailer.models import Participant
    from emailer.rendering import compile_task

    compiled = compile_task(subject=task.subject, body=task.body, html_body=task.html_body)
    people = Participant.objects.filter(project_id=task.project_id).order_by("id")
    sent = 0
    with get_connection() as connection:
        for pid, email, name, status in people.values_list(
            "id", "email", "name", "status"
        ).iterator(chunk_size=2000):
            message = build_message(
                compiled=compiled,
                task_id=task.pk,
                occurrence=when,
                from_email=task.from_email,
                project_name=task.project.name,
                participant={"id": pid, "email": email, "name": name, "status": status},
            )
            sent += connection.send_messages([message])
    return sent


def side_emailer(task: Any, when: Any, execution_id: int) -> int:
    from emailer.sending import run_send_email_task
    from scheduling.api import RunContext

    result = run_send_email_task(
        task, RunContext(execution_id=execution_id, job_id=None, scheduled_for=when, attempt=1)
    )
    return int(result.get("sent", 0))


SIDES = ["plain", "messages only", "emailer run"]


def child_throughput(p: dict[str, Any]) -> dict[str, Any]:
    common.setup_django()
    from datetime import UTC, datetime, timedelta

    task = load(p["n"], "throughput")
    base = datetime(2030, 1, 7, 10, 0, tzinfo=UTC)
    rows = []
    for r in range(p["rounds"]):
        order = SIDES[r % 3 :] + SIDES[: r % 3]
        for side in order:
            when = base + timedelta(hours=2 * (r * 3 + SIDES.index(side)))
            started = time.perf_counter()
            if side == "plain":
                sent = side_plain(task)
            elif side == "messages only":
                sent = side_messages(task, when)
            else:
                sent = side_emailer(task, when, execution_id=task.pk * 1_000_000 + r)
            seconds = time.perf_counter() - started
            rows.append({"side": side, "round": r + 1, "sent": sent, "seconds": seconds})
            common.progress(rows=rows)
    return {"rows": rows}


def child_memory(p: dict[str, Any]) -> dict[str, Any]:
    import tracemalloc

    common.setup_django()
    from datetime import UTC, datetime

    task = load(p["n"], f"memory-{p['n']}")
    before = current_rss_mb()
    tracemalloc.start()
    started = time.perf_counter()
    sent = side_emailer(
        task, datetime(2030, 1, 7, 10, 0, tzinfo=UTC), execution_id=task.pk * 1_000_000
    )
    seconds = time.perf_counter() - started
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "n": p["n"],
        "sent": sent,
        "seconds": seconds,
        "rss_before_mb": before,
        "peak_rss_mb": common.peak_rss_mb(),
        "traced_peak_mb": traced_peak / 2**20,
    }


def child_profile(p: dict[str, Any]) -> dict[str, Any]:
    """cProfile of one side, to see where a message's time goes (``--profile SIDE``)."""
    import cProfile
    import io
    import pstats
    from datetime import UTC, datetime

    common.setup_django()
    task = load(p["n"], f"profile-{p['side']}")
    when = datetime(2030, 1, 7, 10, 0, tzinfo=UTC)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    if p["side"] == "plain":
        sent = side_plain(task)
    elif p["side"] == "messages":
        sent = side_messages(task, when)
    else:
        sent = side_emailer(task, when, execution_id=task.pk * 1_000_000)
    profiler.disable()
    seconds = time.perf_counter() - started
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(25)
    return {"side": p["side"], "sent": sent, "seconds": seconds, "profile": out.getvalue()}


def current_rss_mb() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# --- driver -----------------------------------------------------------------------------------


def best_and_median(rows: list[dict[str, Any]], side: str) -> tuple[float, float]:
    rates = [r["sent"] / r["seconds"] for r in rows if r["side"] == side and r["seconds"]]
    return (max(rates) if rates else float("nan")), common.median(rates)


def report(data: dict[str, Any], *, markdown: bool) -> str:
    rows = data["rows"]
    n = data["n"]
    out = []
    table = [
        [r["side"], n, r["round"], r["sent"], r["seconds"], r["sent"] / r["seconds"]]
        for r in sorted(rows, key=lambda r: (SIDES.index(r["side"]), r["round"]))
    ]
    out.append(
        common.render_table(
            ["side", "participants", "round", "sent", "seconds", "messages/s"],
            table,
            markdown=markdown,
        )
    )
    plain_best, plain_median = best_and_median(rows, "plain")
    msg_best, msg_median = best_and_median(rows, "messages only")
    run_best, run_median = best_and_median(rows, "emailer run")
    summary = [
        ["plain send_mail loop", plain_best, plain_median, "1.00"],
        ["messages only (no ledger)", msg_best, msg_median, f"{msg_best / plain_best:.2f}"],
        ["emailer run (ledger on)", run_best, run_median, f"{run_best / plain_best:.2f}"],
    ]
    out.append("")
    out.append(
        common.render_table(
            ["side", "best msg/s", "median msg/s", "best / plain best"], summary, markdown=markdown
        )
    )
    out.append("")
    out.append(
        f"Best rounds: the emailer run reaches {run_best / msg_best:.0%} of *messages only* "
        f"(the ledger's share) and {run_best / plain_best:.0%} of *plain* (everything the "
        f"product adds). Medians: {run_median / msg_median:.0%} and "
        f"{run_median / plain_median:.0%}."
    )
    memory = data.get("memory") or []
    if memory:
        out.append("")
        out.append(
            common.render_table(
                [
                    "participants",
                    "sent (dummy backend)",
                    "seconds",
                    "RSS before run MB",
                    "peak RSS MB",
                    "tracemalloc peak MB",
                ],
                [
                    [
                        m["n"],
                        m["sent"],
                        m["seconds"],
                        m["rss_before_mb"],
                        m["peak_rss_mb"],
                        m["traced_peak_mb"],
                    ]
                    for m in memory
                ],
                markdown=markdown,
            )
        )
    return "\n".join(out)


def targets(data: dict[str, Any]) -> list[str]:
    rows = data["rows"]
    plain_best, _ = best_and_median(rows, "plain")
    msg_best, _ = best_and_median(rows, "messages only")
    run_best, _ = best_and_median(rows, "emailer run")
    lines = [
        f"- ≥ 300 messages/s with the ledger on: {run_best:,.0f}/s (the plain loop: "
        f"{plain_best:,.0f}/s in the same run) — {'met' if run_best >= 300 else 'NOT met'}",
        f"- bookkeeping < 20 % of the plain loop: the emailer run (ledger on) reaches "
        f"{run_best / plain_best:.0%} of the plain loop's best round, and "
        f"{run_best / msg_best:.0%} of the same messages sent without the ledger — "
        f"{'met' if run_best >= 0.8 * plain_best else 'NOT met'}",
    ]
    memory = data.get("memory") or []
    if len(memory) >= 2:
        small, large = memory[0], memory[-1]
        growth = large["peak_rss_mb"] - small["peak_rss_mb"]
        lines.append(
            f"- memory flat: peak RSS {small['peak_rss_mb']:.0f} MB at {small['n']:,} and "
            f"{large['peak_rss_mb']:.0f} MB at {large['n']:,} participants "
            f"({growth:+.0f} MB); tracemalloc peak {small['traced_peak_mb']:.1f} → "
            f"{large['traced_peak_mb']:.1f} MB — {'met' if growth < 10 else 'NOT met'}"
        )
    return lines


def write_docs(data: dict[str, Any], notes: str) -> None:
    section = "\n".join(
        [
            BEGIN,
            "## 6. Emailer throughput with the delivery ledger",
            "",
            "Written by `bench/emailer_throughput.py` (this section only). Target: ≥ 300 "
            "messages/s to a loopback SMTP server for a 10,000-participant batch with the ledger "
            "on, and the bookkeeping under 20 % of a plain `send_mail` loop over one reused "
            "connection; memory flat in the number of participants.",
            "",
            *targets(data),
            "",
            report(data, markdown=True),
            "",
            notes.strip(),
            "",
            f"Command: `{data['command']}`. Finished {data['finished_at']}; load average "
            f"after: {', '.join(f'{x:.2f}' for x in data['load_after'])}.",
            END,
        ]
    )
    text = DOCS.read_text()
    if BEGIN in text and END in text:
        text = re.sub(
            re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: section, text, flags=re.S
        )
    elif "## Notes on the setup" in text:
        text = text.replace("## Notes on the setup", section + "\n\n## Notes on the setup", 1)
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    DOCS.write_text(text)


NOTES_FILE = common.BENCH / "emailer_throughput_notes.md"


def main() -> None:
    handlers = {"throughput": child_throughput, "memory": child_memory, "profile": child_profile}
    if common.child_main(handlers):
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--participants", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=50, help="EMAILER_CHUNK_SIZE (50)")
    parser.add_argument("--memory-sizes", default="10000,100000")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check it works")
    parser.add_argument("--keep", action="store_true", help="keep the database")
    parser.add_argument("--no-docs", action="store_true", help="print only")
    parser.add_argument(
        "--render", action="store_true", help="only rewrite the docs from the saved results"
    )
    parser.add_argument(
        "--profile",
        choices=["plain", "messages", "emailer"],
        help="instead: cProfile one side's run (with --participants) and print it",
    )
    args = parser.parse_args()
    if args.render:
        saved = common.load_result("emailer_throughput")
        if saved is None:
            raise SystemExit("no saved results: run the benchmark first")
        write_docs(saved, NOTES_FILE.read_text() if NOTES_FILE.exists() else "")
        print(report(saved, markdown=False))
        return
    if args.quick:
        args.participants, args.rounds, args.memory_sizes = 300, 1, "300,3000"
    controller, sink, port = start_server()
    extra = {
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(port),
        "EMAIL_TIMEOUT": "30",
        "EMAILER_CHUNK_SIZE": str(args.chunk),
        "SITE_URL": "https://mail.example.org",
    }
    try:
        if args.profile:
            with common.bench_db(DB, keep=args.keep):
                prof = common.run_child(
                    common.child_argv(
                        "emailer_throughput.py",
                        "profile",
                        {"n": args.participants, "side": args.profile},
                    ),
                    common.child_env(DB, extra=extra),
                    timeout=1800,
                    label="emailer-profile",
                )
            if not prof.ok:
                raise SystemExit(prof.error)
            print(prof.data["profile"])
            rate = prof.data["sent"] / prof.data["seconds"]
            print(
                f"{args.profile}: {prof.data['sent']} in {prof.data['seconds']:.1f} s "
                f"under cProfile ({rate:.0f}/s)"
            )
            return
        with common.bench_db(DB, keep=args.keep):
            result = common.run_child(
                common.child_argv(
                    "emailer_throughput.py",
                    "throughput",
                    {"n": args.participants, "rounds": args.rounds},
                ),
                common.child_env(DB, extra=extra),
                timeout=3600,
                label="emailer-throughput",
            )
            if not result.ok:
                raise SystemExit(result.error)
            data: dict[str, Any] = {"n": args.participants, "rows": result.data["rows"]}
            memory = []
            for size in [int(s) for s in args.memory_sizes.split(",") if s]:
                mem = common.run_child(
                    common.child_argv("emailer_throughput.py", "memory", {"n": size}),
                    common.child_env(
                        DB,
                        extra={
                            **extra,
                            "EMAIL_BACKEND": "django.core.mail.backends.dummy.EmailBackend",
                        },
                    ),
                    timeout=1800,
                    label=f"emailer-memory-{size}",
                )
                if not mem.ok:
                    raise SystemExit(mem.error)
                memory.append(mem.data)
            data["memory"] = memory
            data["server_received"] = sink.count
    finally:
        controller.stop()
    path = common.save_result("emailer_throughput", data)
    saved = common.load_result("emailer_throughput") or data
    print(report(saved, markdown=False))
    print("\n".join(targets(saved)))
    print(f"results: {path}")
    if not args.no_docs and not args.quick:
        notes = NOTES_FILE.read_text() if NOTES_FILE.exists() else ""
        write_docs(saved, notes)
        print(f"updated {DOCS.relative_to(common.ROOT)}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.chdir(common.ROOT)
    main()
