"""The claim's statements: lock the due jobs (the plain ones planned in SQL), write the rest.

``lock_due`` takes up to a batch of due active jobs that wait on no execution (or whose run the
next occurrence cancels: ``cancel_other``), oldest first,
locked against other schedulers. On PostgreSQL the locking statement also plans the jobs whose
claim is the plain one (``planned``: the conditions are the claim's to decide and arrive as
parameters, ``claims.sql_planning``), inserting their executions and moving them in the same
statement; SQLite, which serialises writers anyway, locks with the ORM and plans nothing.
Either way one row per locked job comes back by name: a planned one with its execution
(``execution_id`` None when its occurrence already had one) and what its message needs; any
other whole, times read (``DUE_FIELDS``), for the claim to plan. ``write_claim`` then writes
what the claim planned for those: one statement on PostgreSQL, the ORM's bulk writes on SQLite.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db.models import TextField
from django.db.models.functions import Cast

from scheduling import ledger
from scheduling.models import Execution, ExecutionStatus, Job, JobStatus, Schedule, job_due_index

JOB = Job._meta.db_table
SCHEDULE = Schedule._meta.db_table
EXECUTION = Execution._meta.db_table

#: The fields of a locked job the claim plans from, by name (``schedule__*``: its schedule's).
DUE_FIELDS = (
    "pk",
    "next_occurrence_at",
    "next_due_at",
    "created_at",
    "misfire",
    "overlap",
    "jitter",
    "task",
    "args",
    "kwargs",
    "queue",
    "priority",
    "timeout",
    "task_table",
    "task_row_id",
    "schedule__interval",
    "schedule__cron",
    "schedule__timezone",
    "schedule__run_at",
    "schedule__starts_at",
    "schedule__ends_at",
    "schedule__rrule",
    "task_unknown_since",
)
#: The due fields but the arguments, which the ORM form reads as text.
_ROW_FIELDS = tuple(name for name in DUE_FIELDS if name not in ("args", "kwargs"))
#: The due fields that hold times: text on PostgreSQL, read here (``read_times``).
TIME_FIELDS = (
    "next_occurrence_at",
    "next_due_at",
    "created_at",
    "schedule__run_at",
    "schedule__starts_at",
    "schedule__ends_at",
    "task_unknown_since",
)


# -- lock_due: due active jobs not waiting on an execution, oldest first, locked against other
#    schedulers; the plain ones planned, inserted and moved in the statement itself. Rows meet
#    through one-row JSON lookups, never joins on the CTEs, whose row counts the planner
#    cannot estimate (a nested loop over two of them is quadratic). JSON and times come back
#    as text: decoding them through the driver's Python loaders costs more than the rest of
#    the claim's Python work together.
LOCK_DUE = ledger.Statement(
    postgresql=f"""
    WITH due AS MATERIALIZED (
        SELECT j.id, j.next_occurrence_at, j.next_due_at, j.created_at, j.misfire,
               j.overlap, j.jitter, j.task, j.args, j.kwargs, j.queue, j.priority, j.timeout,
               j.task_table, j.task_row_id, s.interval, s.cron, s.timezone, s.run_at,
               s.starts_at, s.ends_at, s.rrule, c.occurrence, c.following, a.args_text,
               a.kwargs_text, j.task_unknown_since,
               j.overlap = %(forbid)s AS forbid,
               -- As many of the job's executions waiting for a running slot as it may have
               -- (waiting.full_jobs, on execution_job_waiting_idx): its next occurrence is
               -- recorded SKIPPED with the reason instead of waiting too.
               j.overlap = %(waiting_overlap)s AND (
                   SELECT count(*) FROM (
                       SELECT 1 FROM {EXECUTION} AS w
                        WHERE w.job_id = j.id AND w.status = %(waiting)s
                        LIMIT %(max_waiting)s) AS w
                   ) >= %(max_waiting)s AS at_bound,
               COALESCE(
                   j.task = ANY(%(tasks)s::text[]) AND j.task_table = ''
                   AND j.task_row_id IS NULL
                   AND jsonb_typeof(j.args) = 'array' AND jsonb_typeof(j.kwargs) = 'object'
                   -- Arguments well inside their limits (scheduling.rules.arguments); Python
                   -- measures the rest. A text shorter than twice the depth limit cannot nest
                   -- deeper than it, so the path search runs only on longer ones.
                   AND octet_length(a.args_text) <= %(planned_bytes)s
                   AND octet_length(a.kwargs_text) <= %(planned_bytes)s
                   AND (octet_length(a.args_text) < %(shallow_text)s
                        OR NOT jsonb_path_exists(j.args, %(too_deep)s::jsonpath))
                   AND (octet_length(a.kwargs_text) < %(shallow_text)s
                        OR NOT jsonb_path_exists(j.kwargs, %(too_deep)s::jsonpath))
                   -- A queue name the broker takes as it is (validation.queue_error).
                   AND j.queue ~ %(queue_pattern)s
                   AND NOT lower(j.queue) LIKE ANY(%(reserved_queues)s::text[])
                   AND s.cron = '' AND s.run_at IS NULL AND s.timezone IN ('', 'UTC')
                   AND s.rrule = ''
                   AND j.jitter = interval '0'
                   AND j.misfire = ANY(%(misfires)s::text[])
                   AND j.overlap = ANY(%(overlaps)s::text[])
                   AND j.next_due_at BETWEEN %(earliest)s AND %(latest)s
                   AND (j.next_occurrence_at IS NULL
                        OR j.next_occurrence_at BETWEEN %(earliest)s AND %(latest)s)
                   AND j.created_at BETWEEN %(earliest)s AND %(latest)s
                   AND (s.starts_at IS NULL OR s.starts_at BETWEEN %(earliest)s AND %(latest)s)
                   AND (s.ends_at IS NULL OR s.ends_at BETWEEN %(earliest)s AND %(latest)s)
                   AND (s.starts_at IS NULL OR s.ends_at IS NULL OR s.ends_at > s.starts_at)
                   AND c.occurrence <= j.next_due_at
                   AND (c.occurrence >= %(on_time_from)s OR j.misfire = %(catch_up)s)
                   AND c.following <= LEAST(s.ends_at, %(latest)s)
                   AND (j.overlap = %(forbid)s OR c.following > %(now)s),
                   false) AS planned
          FROM {JOB} AS j
          JOIN {SCHEDULE} AS s ON s.id = j.schedule_id
         CROSS JOIN LATERAL (
               -- The arguments as text once: measured here, returned to Python below.
               SELECT j.args::text AS args_text, j.kwargs::text AS kwargs_text
               ) AS a
         CROSS JOIN LATERAL (
               SELECT COALESCE(j.next_occurrence_at, j.next_due_at) AS occurrence,
                      COALESCE(s.starts_at, j.created_at) AS base,
                      (%(steps)s::jsonb ->> s.interval)::bigint AS step
               ) AS t
         CROSS JOIN LATERAL (
               -- The next occurrence of an occurrence on the interval's grid, on rows whose
               -- values are in range (CASE keeps the order that AND does not promise).
               SELECT t.occurrence, CASE
                   WHEN t.step BETWEEN 1 AND %(max_step)s AND t.occurrence >= t.base
                        AND t.occurrence BETWEEN %(earliest)s AND %(latest)s
                        AND t.base BETWEEN %(earliest)s AND %(latest)s
                        AND mod((extract(epoch FROM t.occurrence) - extract(epoch FROM t.base))
                                * 1000000, t.step) = 0
                   THEN t.occurrence + t.step * interval '1 microsecond' END AS following
               ) AS c
         -- job_due_idx's predicate, word for word (models.job_due_index).
         WHERE j.status = %(active)s
           AND (j.current_execution_id IS NULL OR j.overlap = 'cancel_other')
           AND j.next_due_at <= %(now)s
         ORDER BY j.next_due_at
         LIMIT %(limit)s
           FOR NO KEY UPDATE OF j SKIP LOCKED
    ), clock AS (
        -- The task ids' time, read once: six bytes of Unix milliseconds, then version 7
        -- (x'7000' = 28672) and the millisecond's fraction in 1/4096, as ids.uuid7_text.
        SELECT substring(int8send(c.ms) FROM 3)
               || substring(int4send(28672 + c.fraction) FROM 3) AS prefix
          FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS us) AS t
         CROSS JOIN LATERAL (
               SELECT t.us / 1000 AS ms, (mod(t.us, 1000) * 4096 / 1000)::int AS fraction
               ) AS c
    ), inserted AS (
        -- Task ids are UUIDv7 (ids.uuid7_text): the clock's eight bytes, the variant and the
        -- row's number in 22 bits (x'800000' = 8388608: the ids of one statement rise in
        -- insertion order), and five bytes of gen_random_uuid()'s randomness. Time-ordered
        -- ids land on the unique index's right edge; random ones each cost a leaf read on a
        -- long history.
        INSERT INTO {EXECUTION}
               (job_id, task, scheduled_for, status, task_id, last_error, created_at,
                queued_at, finished_at, retry_count, worker, duplicates, updated_at)
        SELECT d.id, d.task, d.occurrence,
               CASE WHEN d.at_bound THEN %(skipped)s ELSE %(pending)s END,
               encode(overlay(uuid_send(gen_random_uuid())
                              PLACING k.prefix || substring(int4send(8388608 + d.n::int) FROM 2)
                              FROM 1 FOR 11), 'hex')::uuid,
               CASE WHEN d.at_bound THEN %(waiting_note)s ELSE '' END, %(now)s,
               CASE WHEN d.at_bound THEN NULL ELSE %(now)s::timestamptz END,
               CASE WHEN d.at_bound THEN %(now)s::timestamptz END, 0, '', 0, %(now)s
          FROM (SELECT id, task, occurrence, at_bound,
                       row_number() OVER (ORDER BY next_due_at, id) AS n
                  FROM due
                 WHERE planned) AS d
         CROSS JOIN clock AS k
         ORDER BY d.n
            ON CONFLICT (job_id, scheduled_for) DO NOTHING
        RETURNING id, job_id, task_id
    ), made AS (
        SELECT jsonb_object_agg(job_id, id) AS ids, jsonb_object_agg(job_id, task_id) AS uuids
          FROM inserted
    ), moved AS (
        UPDATE {JOB} AS j
           SET next_due_at = d.following, next_occurrence_at = d.following,
               current_execution_id = CASE WHEN d.forbid THEN (m.ids ->> d.id::text)::bigint END,
               task_unknown_since = NULL, updated_at = %(now)s
          FROM due AS d
         CROSS JOIN made AS m
         WHERE j.id = d.id AND d.planned
    )
    SELECT d.planned AS planned, d.at_bound AS at_bound,
           (m.ids ->> d.id::text)::bigint AS execution_id,
           m.uuids ->> d.id::text AS task_id, d.occurrence::text AS occurrence,
           d.id AS pk, h.next_occurrence_at, h.next_due_at, h.created_at,
           h.misfire, h.overlap, h.jitter, d.task AS task, d.args_text AS args,
           d.kwargs_text AS kwargs, d.queue AS queue, d.priority AS priority,
           d.timeout AS timeout, h.task_table, h.task_row_id,
           h.interval AS schedule__interval, h.cron AS schedule__cron,
           h.timezone AS schedule__timezone, h.run_at AS schedule__run_at,
           h.starts_at AS schedule__starts_at, h.ends_at AS schedule__ends_at,
           h.rrule AS schedule__rrule, h.task_unknown_since
      FROM due AS d
     CROSS JOIN made AS m
      LEFT JOIN LATERAL (
           SELECT d.next_occurrence_at::text, d.next_due_at::text, d.created_at::text,
                  d.misfire, d.overlap, d.jitter, d.task_table, d.task_row_id, d.interval,
                  d.cron, d.timezone, d.run_at::text, d.starts_at::text, d.ends_at::text,
                  d.rrule, d.task_unknown_since::text
            WHERE NOT d.planned
           ) AS h (next_occurrence_at, next_due_at, created_at, misfire, overlap, jitter,
                   task_table, task_row_id, interval, cron, timezone, run_at, starts_at,
                   ends_at, rrule, task_unknown_since) ON true
     ORDER BY d.next_due_at, d.id
    """,
    # The planned row's execution, then every due field, as the SELECT list names them.
    columns=("planned", "at_bound", "execution_id", "task_id", "occurrence", *DUE_FIELDS),
)


def lock_due(*, now: datetime, limit: int, planning: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Lock up to ``limit`` due jobs (in the caller's transaction); one named row per job.

    ``planning`` holds the parameters under which the PostgreSQL form may plan a row itself,
    and the bound on waiting executions (``waiting.sql_bound``). Unplanned rows carry every
    ``DUE_FIELDS`` name, times read (``read_times``) and the arguments as stored text; planned
    ones carry ``execution_id``, ``task_id``, ``occurrence``, the message's fields and
    ``at_bound`` (the execution was written SKIPPED: the job has its most waiting ones).
    """
    if not ledger.on_postgresql():
        return _lock_due_with_orm(now, limit)
    found = ledger.rows(
        LOCK_DUE,
        {
            **planning,
            "now": now,
            "limit": limit,
            "active": JobStatus.ACTIVE.value,
            "pending": ExecutionStatus.PENDING.value,
        },
    )
    for row in found:
        if not row["planned"]:
            read_times(row)
    return found


def _lock_due_with_orm(now: datetime, limit: int) -> list[dict[str, Any]]:
    """``LOCK_DUE`` on SQLite: the same rows, locked and read by the ORM, none planned."""
    found = (
        Job.objects.filter(job_due_index(), next_due_at__lte=now)
        .select_for_update(skip_locked=True, no_key=True, of=("self",))
        .order_by("next_due_at")
        .annotate(
            args_text=Cast("args", output_field=TextField()),
            kwargs_text=Cast("kwargs", output_field=TextField()),
        )
        .values(*_ROW_FIELDS, "args_text", "kwargs_text")[:limit]
    )
    return [
        {
            **row,
            "planned": False,
            "at_bound": False,
            "args": row.pop("args_text"),
            "kwargs": row.pop("kwargs_text"),
        }
        for row in found
    ]


def read_times(row: dict[str, Any]) -> dict[str, Any]:
    """A locked row with its times read from text, in place.

    As text a time is one ``fromisoformat`` call (psycopg requires the server's ISO
    ``DateStyle`` anyway). A time Python cannot hold ('infinity', years past 9999) is kept
    under ``bad_times`` by name and read as None, for the claim to name.
    """
    for name in TIME_FIELDS:
        if row[name] is not None:
            try:
                row[name] = datetime.fromisoformat(row[name])
            except ValueError:
                row.setdefault("bad_times", {})[name] = row[name]
                row[name] = None
    return row


# -- write_claim: insert the planned executions and move the claimed jobs at once. Rows travel
#    as JSON (``json_to_recordset``): one C-speed encoding per batch, where binding an array
#    per column costs more in Python than the statement costs the server.
WRITE_CLAIM = ledger.Statement(
    postgresql=f"""
    WITH inserted AS (
        INSERT INTO {EXECUTION}
               (job_id, task, scheduled_for, status, task_id, last_error, created_at,
                queued_at, finished_at, retry_count, worker, duplicates, updated_at)
        SELECT v.job_id, v.task, v.scheduled_for, v.status, v.task_id, v.last_error,
               %(now)s,
               CASE WHEN v.status = %(pending)s THEN %(now)s::timestamptz END,
               CASE WHEN v.status <> %(pending)s THEN %(now)s::timestamptz END,
               0, '', 0, %(now)s
          FROM json_to_recordset(%(executions)s::json) AS v(
               job_id bigint, task varchar, scheduled_for timestamptz, status varchar,
               task_id uuid, last_error text)
         -- In the order of their time-ordered task ids, which then rise with the rows' ids.
         ORDER BY v.task_id
            ON CONFLICT (job_id, scheduled_for) DO NOTHING
        RETURNING id, job_id, task_id, status, scheduled_for
    ), first_pending AS (
        SELECT jsonb_object_agg(job_id, id) AS ids
          FROM (SELECT DISTINCT ON (job_id) job_id, id
                  FROM inserted
                 WHERE status = %(pending)s
                 ORDER BY job_id, scheduled_for) AS p
    ), moved AS (
        UPDATE {JOB} AS j
           SET next_due_at = CASE WHEN v.keep THEN j.next_due_at ELSE v.next_due_at END,
               next_occurrence_at = CASE WHEN v.keep THEN j.next_occurrence_at
                                         ELSE v.next_occurrence_at END,
               status = v.status,
               pause_reason = COALESCE(v.reason, j.pause_reason),
               task_unknown_since = v.unknown_since,
               current_execution_id = CASE
                   WHEN v.hold THEN (f.ids ->> v.id::text)::bigint END,
               updated_at = %(now)s
          FROM json_to_recordset(%(jobs)s::json) AS v(
               id bigint, next_due_at timestamptz, next_occurrence_at timestamptz,
               status varchar, hold boolean, keep boolean, reason varchar,
               unknown_since timestamptz)
         CROSS JOIN first_pending AS f
         WHERE j.id = v.id
    )
    SELECT task_id::text AS task_id, id FROM inserted
    """,
    columns=("task_id", "id"),
)


def write_claim(
    *,
    now: datetime,
    executions: Sequence[Mapping[str, Any]],
    jobs: Sequence[Mapping[str, Any]],
) -> dict[str, int]:
    """Write the planned executions and move the jobs; the new executions' ids by task id.

    ``executions``: ``job_id``, ``task``, ``scheduled_for``, ``status``, ``task_id`` (text)
    and ``last_error``. ``jobs``: ``id``, ``next_due_at``, ``next_occurrence_at``, ``status``,
    ``hold`` (any overlap but ``allow``: the job takes its first new PENDING execution as
    current), ``keep`` (its times stay as they are), ``reason`` (a pause reason, or None) and
    ``unknown_since`` (since when it waits for a process that knows its task, or None). An
    occurrence that already has its execution is left as it is, and absent from the result.
    """
    if not ledger.on_postgresql():
        return _write_claim_with_orm(now=now, executions=executions, jobs=jobs)
    written = ledger.rows(
        WRITE_CLAIM,
        {
            "now": now.isoformat(),
            "pending": ExecutionStatus.PENDING.value,
            "executions": json.dumps(
                [{**e, "scheduled_for": e["scheduled_for"].isoformat()} for e in executions]
            ),
            "jobs": json.dumps([_job_json(job) for job in jobs]),
        },
    )
    return {row["task_id"]: row["id"] for row in written}


def _job_json(job: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **job,
        "next_due_at": job["next_due_at"].isoformat() if job["next_due_at"] else None,
        "next_occurrence_at": (
            job["next_occurrence_at"].isoformat() if job["next_occurrence_at"] else None
        ),
        "unknown_since": job["unknown_since"].isoformat() if job["unknown_since"] else None,
    }


#: Rows per ``bulk_update`` on SQLite. Each statement sets every field through a ``CASE`` with
#: one branch per row, which SQLite evaluates row by row: a statement's cost grows with the
#: square of its rows (a claim of 10,000 jobs in one statement took minutes; in batches of
#: 500, about a second).
_ORM_UPDATE_BATCH = 500


def _write_claim_with_orm(
    *,
    now: datetime,
    executions: Sequence[Mapping[str, Any]],
    jobs: Sequence[Mapping[str, Any]],
) -> dict[str, int]:
    """``WRITE_CLAIM`` on SQLite, with the ORM's bulk writes."""
    taken = set(
        Execution.objects.filter(
            job_id__in={row["job_id"] for row in executions},
            scheduled_for__in={row["scheduled_for"] for row in executions},
        ).values_list("job_id", "scheduled_for")
    )
    fresh = [row for row in executions if (row["job_id"], row["scheduled_for"]) not in taken]
    Execution.objects.bulk_create(
        [
            Execution(
                **{**row, "task_id": uuid.UUID(row["task_id"])},
                created_at=now,
                queued_at=now if row["status"] == ExecutionStatus.PENDING else None,
                finished_at=None if row["status"] == ExecutionStatus.PENDING else now,
                updated_at=now,
            )
            # In the order of their time-ordered task ids, as in WRITE_CLAIM.
            for row in sorted(fresh, key=lambda row: row["task_id"])
        ]
    )
    ids = {
        str(task_id): pk
        for task_id, pk in Execution.objects.filter(
            task_id__in=[row["task_id"] for row in fresh]
        ).values_list("task_id", "pk")
    }
    first_pending: dict[int, int] = {}
    for row in sorted(fresh, key=lambda row: row["scheduled_for"]):
        if row["status"] == ExecutionStatus.PENDING:
            first_pending.setdefault(row["job_id"], ids[row["task_id"]])
    moved: list[Job] = []
    kept: list[Job] = []
    paused: list[Job] = []
    for item in jobs:
        job = Job(
            pk=item["id"],
            next_due_at=item["next_due_at"],
            next_occurrence_at=item["next_occurrence_at"],
            current_execution_id=first_pending.get(item["id"]) if item["hold"] else None,
            status=item["status"],
            pause_reason=item["reason"] or "",
            task_unknown_since=item["unknown_since"],
            updated_at=now,
        )
        (kept if item["keep"] else moved).append(job)
        if item["reason"] is not None:
            paused.append(job)
    Job.objects.bulk_update(
        moved,
        [
            "next_due_at",
            "next_occurrence_at",
            "current_execution",
            "status",
            "task_unknown_since",
            "updated_at",
        ],
        batch_size=_ORM_UPDATE_BATCH,
    )
    # A job paused for a time it cannot read keeps its times as they are (as in WRITE_CLAIM).
    Job.objects.bulk_update(
        kept,
        ["current_execution", "status", "task_unknown_since", "updated_at"],
        batch_size=_ORM_UPDATE_BATCH,
    )
    Job.objects.bulk_update(paused, ["pause_reason"], batch_size=_ORM_UPDATE_BATCH)
    return ids
