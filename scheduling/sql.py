"""Every hand-written statement of the engine, by name, and the runner for the hot ones.

The ORM writes most of the ledger. The statements here are the ones on a hot path, where one
round trip instead of several, or text instead of driver-decoded values, is the difference the
benchmarks measure. Each constant is headed by the function that runs it, so a grep leads from
a verb to its SQL and back. Where SQLite needs a
different form, the function keeps an ORM twin next to its call, and the specification tests
run both (``make test`` runs the claim, attempt and policy tests on SQLite as well).
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections
from psycopg.types.json import Jsonb
from psycopg.types.numeric import Int8

from scheduling import conf
from scheduling.models import (
    Attempt,
    AttemptOutcome,
    Execution,
    ExecutionStatus,
    Job,
    Schedule,
)

JOB = Job._meta.db_table
SCHEDULE = Schedule._meta.db_table
EXECUTION = Execution._meta.db_table
ATTEMPT = Attempt._meta.db_table

# -- claims._claim_pg: due active jobs not waiting on an execution, oldest first, locked
#    against other schedulers (the rows of ``claims._lock_due_orm``). The ones whose claim is
#    one PENDING execution at their occurrence and one interval forward (``planned``: every
#    condition of ``claims._claim_pg``'s docstring holds) are planned here: their executions
#    inserted and the jobs moved in this statement. One row per locked job comes back: a
#    planned one with its execution (NULL when its occurrence already had one) and what its
#    message needs; any other whole, JSON and times as text, for ``claims._plan``. Rows meet
#    through one-row JSON lookups, never joins on the CTEs, whose row counts the planner
#    cannot estimate (a nested loop over two of them is quadratic).
CLAIM_DUE_JOBS = f"""
    WITH due AS MATERIALIZED (
        SELECT j.id, j.next_occurrence_at, j.next_due_at, j.created_at, j.misfire,
               j.overlap, j.jitter, j.task, j.args, j.kwargs, j.queue, j.priority, j.timeout,
               j.task_table, j.task_row_id, s.interval, s.cron, s.timezone, s.run_at,
               s.starts_at, s.ends_at, c.occurrence, c.following, a.args_text, a.kwargs_text,
               j.overlap = %(forbid)s AS forbid,
               COALESCE(
                   j.task = ANY(%(tasks)s::text[]) AND j.task_table = ''
                   AND j.task_row_id IS NULL
                   AND jsonb_typeof(j.args) = 'array' AND jsonb_typeof(j.kwargs) = 'object'
                   -- Arguments well inside their limits (scheduling.arguments); Python
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
         WHERE j.status = %(active)s AND j.current_execution_id IS NULL
           AND j.next_due_at <= %(now)s
         ORDER BY j.next_due_at
         LIMIT %(limit)s
           FOR NO KEY UPDATE OF j SKIP LOCKED
    ), inserted AS (
        INSERT INTO {EXECUTION}
               (job_id, task, scheduled_for, status, task_id, last_error, created_at,
                queued_at, finished_at, retry_count, worker, duplicates, updated_at)
        SELECT d.id, d.task, d.occurrence, %(pending)s, gen_random_uuid(), '', %(now)s,
               %(now)s, NULL, 0, '', 0, %(now)s
          FROM due AS d
         WHERE d.planned
            ON CONFLICT (job_id, scheduled_for) DO NOTHING
        RETURNING id, job_id, task_id
    ), made AS (
        SELECT jsonb_object_agg(job_id, id) AS ids, jsonb_object_agg(job_id, task_id) AS uuids
          FROM inserted
    ), moved AS (
        UPDATE {JOB} AS j
           SET next_due_at = d.following, next_occurrence_at = d.following,
               current_execution_id = CASE WHEN d.forbid THEN (m.ids ->> d.id::text)::bigint END,
               updated_at = %(now)s
          FROM due AS d
         CROSS JOIN made AS m
         WHERE j.id = d.id AND d.planned
    )
    SELECT d.planned, (m.ids ->> d.id::text)::bigint, m.uuids ->> d.id::text,
           d.occurrence::text, d.id, h.next_occurrence_at, h.next_due_at, h.created_at,
           h.misfire, h.overlap, h.jitter, d.task, d.args_text, d.kwargs_text, d.queue,
           d.priority, d.timeout, h.task_table, h.task_row_id, h.interval, h.cron,
           h.timezone, h.run_at, h.starts_at, h.ends_at
      FROM due AS d
     CROSS JOIN made AS m
      LEFT JOIN LATERAL (
           SELECT d.next_occurrence_at::text, d.next_due_at::text, d.created_at::text,
                  d.misfire, d.overlap, d.jitter, d.task_table, d.task_row_id, d.interval,
                  d.cron, d.timezone, d.run_at::text, d.starts_at::text, d.ends_at::text
            WHERE NOT d.planned
           ) AS h (next_occurrence_at, next_due_at, created_at, misfire, overlap, jitter,
                   task_table, task_row_id, interval, cron, timezone, run_at, starts_at,
                   ends_at) ON true
     ORDER BY d.next_due_at, d.id

    """

# -- claims._write_pg: insert the planned executions and move the claimed jobs at once.
WRITE_CLAIM = f"""
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
               current_execution_id = CASE
                   WHEN v.forbid THEN (f.ids ->> v.id::text)::bigint END,
               updated_at = %(now)s
          FROM json_to_recordset(%(jobs)s::json) AS v(
               id bigint, next_due_at timestamptz, next_occurrence_at timestamptz,
               status varchar, forbid boolean, keep boolean, reason varchar)
         CROSS JOIN first_pending AS f
         WHERE j.id = v.id
    )
    SELECT task_id::text, id FROM inserted

    """

#: When the server last recovered from a crash: crash recovery resets every kind of shared
#: statistics at one instant (a clean restart keeps them; a hand-made reset names one kind), so
#: the earliest of three kinds' reset times is the moment a start not yet flushed may have
#: been lost.
RECOVERED_AT = """(SELECT COALESCE(LEAST(w.stats_reset, b.stats_reset, a.stats_reset), '-infinity')
                     FROM pg_stat_wal w, pg_stat_bgwriter b, pg_stat_archiver a)"""

#: When the hold after that recovery ends: one lease (``%(lease)s`` seconds) later.
HOLD_ENDS = f"{RECOVERED_AT} + %(lease)s * interval '1 second'"
#: An execution made before the last crash recovery, while the hold lasts: only the worker
#: whose start the crash undid may start it (``attempts.restore_start``).
HELD = f"(created_at < {RECOVERED_AT} AND now() < {HOLD_ENDS})"

# -- attempts.held_after_crash: seconds until this execution may start, when the hold applies
#    to it (the condition START_EXECUTION refuses), else no row.
HELD_AFTER_CRASH = f"""
    SELECT EXTRACT(EPOCH FROM {HOLD_ENDS} - now()) FROM {EXECUTION} WHERE id = %(id)s AND {HELD}
    """

# -- attempts.start_execution: the worker's claim of one attempt (compare-and-set) and its
#    attempt row (the job's keep-alive is the heartbeat's and the end's); an expired
#    occurrence does not start. The lease starts on the database's clock (a worker's clock
#    running behind must not start it old).
#    The start commits without waiting for its WAL flush (the end that follows waits for
#    both, see docs/architecture.md, *One flush per task*): so for one lease after the server
#    last recovered from a crash (``RECOVERED_AT``), an execution made before that
#    recovery starts only for the worker whose start the crash lost (``attempts.restore_start``).
#    A job with a running limit (or any job, while owner limits are on) is started only by
#    the limited start, which has locked and counted first (``limits_checked``).
START_EXECUTION = f"""
    WITH started AS (
        UPDATE {EXECUTION}
           SET status = %(running)s, started_at = %(now)s, finished_at = NULL,
               last_heartbeat_at = GREATEST(%(now)s, now()), retry_at = NULL,
               worker = %(worker)s,
               updated_at = %(now)s
         WHERE id = %(id)s
           AND (status IN (%(pending)s, %(queued)s)
                OR (status = %(retry)s AND retry_at <= %(now)s))
           AND NOT EXISTS (
                SELECT 1 FROM {JOB} x
                 WHERE x.id = {EXECUTION}.job_id
                   AND ((x.expires IS NOT NULL
                         AND {EXECUTION}.scheduled_for
                             + x.expires * interval '1 second' < %(now)s)
                        -- A limited job starts through limits.py, which counts first.
                        OR (NOT %(limits_checked)s
                            AND (x.max_running IS NOT NULL OR %(owner_limits)s))))
           AND NOT {HELD}
     RETURNING id, job_id, checkpoint, scheduled_for
    ), attempt AS (
        INSERT INTO {ATTEMPT}
               (execution_id, number, worker, pid, started_at, outcome, error)
        SELECT s.id,
               1 + (SELECT count(*) FROM {ATTEMPT} a
                     WHERE a.execution_id = s.id),
               %(worker)s, %(pid)s, %(now)s, %(attempt_running)s, ''
          FROM started s
     RETURNING number
    )
    SELECT s.job_id, s.checkpoint, (SELECT number FROM attempt), s.scheduled_for,
           set_config('synchronous_commit', 'off', true)
      FROM started s

    """
START_EXECUTION_VALUES = {
    "running": ExecutionStatus.RUNNING.value,
    "pending": ExecutionStatus.PENDING.value,
    "queued": ExecutionStatus.QUEUED.value,
    "retry": ExecutionStatus.RETRY.value,
    "attempt_running": AttemptOutcome.RUNNING.value,
}

# -- djangotasks.runs.write_run: one run enqueued through Django's Tasks framework
# (in the caller's transaction).
INSERT_ENQUEUED = f"""
    INSERT INTO {EXECUTION}
           (task, scheduled_for, status, retry_count, task_id, worker, created_at, queued_at,
            retry_at, last_error, duplicates, call, updated_at)
    VALUES (%(task)s, %(scheduled_for)s, %(status)s, 0, %(task_id)s, '', %(now)s,
            %(queued_at)s::timestamptz, %(retry_at)s::timestamptz, '', 0, %(call)s::jsonb,
            %(now)s)
    RETURNING id
    """

# -- attempts.complete_execution: the successful end of the running attempt.
COMPLETE_EXECUTION = f"""
    WITH done AS (
        UPDATE {EXECUTION}
           SET status = %(completed)s, finished_at = %(now)s, last_error = '',
               updated_at = %(now)s,
               result = CASE WHEN %(result)s::jsonb IS NULL THEN result
                             ELSE COALESCE(result, '{{}}'::jsonb) || %(result)s::jsonb END
         WHERE id = %(id)s AND status = %(running)s
           AND (%(attempt)s::int IS NULL OR EXISTS (
                SELECT 1 FROM {ATTEMPT} a
                 WHERE a.execution_id = %(id)s AND a.number = %(attempt)s
                   AND a.outcome = %(attempt_running)s))
     RETURNING id, job_id
    ), attempt AS (
        UPDATE {ATTEMPT}
           SET outcome = %(attempt_completed)s, finished_at = %(now)s
         WHERE execution_id IN (SELECT id FROM done) AND outcome = %(attempt_running)s
    ), job AS (
        UPDATE {JOB} j
           SET execute_count = j.execute_count + 1,
               last_keepalive_at = %(now)s,
               current_execution_id = NULLIF(j.current_execution_id, d.id)
          FROM done d WHERE j.id = d.job_id
    )
    SELECT job_id FROM done

    """
COMPLETE_EXECUTION_VALUES = {
    "result": None,
    "completed": ExecutionStatus.COMPLETED.value,
    "running": ExecutionStatus.RUNNING.value,
    "attempt_completed": AttemptOutcome.COMPLETED.value,
    "attempt_running": AttemptOutcome.RUNNING.value,
}

# -- publishing.mark_queued: these executions' messages reached the broker.
MARK_QUEUED = f"""
    UPDATE {EXECUTION} SET status = %s, queued_at = %s, updated_at = %s
     WHERE id = ANY(%s::bigint[]) AND status = %s
    """

# -- selectors.scheduler_probe: every question of an idle tick, each an index probe.
SCHEDULER_PROBE = f"""
    SELECT
      EXISTS (SELECT 1 FROM {JOB} WHERE status = 'active'
               AND current_execution_id IS NULL AND next_due_at <= %s),
      EXISTS (SELECT 1 FROM {EXECUTION} WHERE status = 'pending' AND queued_at < %s)
      OR EXISTS (SELECT 1 FROM {EXECUTION} WHERE status = 'queued' AND queued_at < %s)
      OR EXISTS (SELECT 1 FROM {EXECUTION} WHERE status = 'retry' AND retry_at <= %s),
      EXISTS (SELECT 1 FROM {EXECUTION} WHERE status = 'running'
               AND last_heartbeat_at < %s),
      (SELECT MIN(next_due_at) FROM {JOB} WHERE status = 'active'
               AND current_execution_id IS NULL
               AND next_due_at > '-infinity' AND next_due_at < 'infinity'),
      EXISTS (SELECT 1 FROM {EXECUTION} WHERE status = 'waiting')

    """

# -- overview._lag_percentiles_pg: start minus due time at the dashboard's quantiles, over
#    one bounded range of scheduled_for; {quantiles}, {join} and {owner} are filled by the
#    caller (the owner filter joins the job only for a staff user's own view).
LAG_PERCENTILES = (
    """
    SELECT percentile_cont(ARRAY[{quantiles}]) WITHIN GROUP
             (ORDER BY EXTRACT(EPOCH FROM e.started_at - e.scheduled_for))
      FROM """
    + EXECUTION
    + """ e {join}
     WHERE e.scheduled_for >= %s AND e.scheduled_for < %s AND e.started_at IS NOT NULL {owner}
    """
)

HOT_PREPARE_THRESHOLD = 5


def execute_hot(sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """Run one of the statements a worker sends for every task; return its first row.

    A worker process sends the same few statements thousands of times. Prepared on the server,
    each is planned once per connection instead of on every call, where planning was half of
    the statement's server time; Django's cursors bind parameters on the client and never
    prepare. So this runs a plain psycopg cursor on Django's own connection: the same
    transaction, with errors mapped to Django's as any query's are. ``PREPARE_STATEMENTS``
    off (for a pooler that cannot keep prepared statements) takes Django's cursor instead.
    """
    # A dict is a JSON document (a Django task's call or result): sent as jsonb on either path.
    if not conf.get("PREPARE_STATEMENTS"):
        with connection.cursor() as cursor:
            cursor.execute(sql, {k: Jsonb(v) if type(v) is dict else v for k, v in params.items()})
            return cursor.fetchone()
    django_connection = connections[DEFAULT_DB_ALIAS]  # one lookup; ``connection`` is a proxy
    django_connection.ensure_connection()
    raw = django_connection.connection
    if (
        raw.prepare_threshold is None
        and django_connection.settings_dict["OPTIONS"].get("server_side_binding") is not True
    ):
        # Django turns psycopg's statement cache off. Its own cursors bind on the client and
        # are never prepared, so turning the cache on touches only the statements sent here
        # (with server-side binding configured, the project's own threshold is left alone).
        raw.prepare_threshold = HOT_PREPARE_THRESHOLD
    # Integers go as int8 whatever their size, so each statement is prepared once, not once
    # per combination of int2/int4/int8 parameters.
    values = {
        k: Int8(v) if type(v) is int else Jsonb(v) if type(v) is dict else v
        for k, v in params.items()
    }
    with django_connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        cursor.execute(sql, values, prepare=True)
        return cursor.fetchone()
