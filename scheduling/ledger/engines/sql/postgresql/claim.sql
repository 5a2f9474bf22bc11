-- The claim: lock the due jobs (the plain ones planned in SQL), then write the rest.

-- name: lock_due
-- Lock up to a batch of due jobs oldest first (SKIP LOCKED); plan, insert and move the plain ones in the statement itself.
-- columns: planned, at_bound, execution_id, task_id, occurrence, pk, next_occurrence_at, next_due_at, created_at, misfire, overlap, jitter, task, args, kwargs, queue, priority, timeout, task_table, task_row_id, schedule__interval, schedule__cron, schedule__timezone, schedule__run_at, schedule__starts_at, schedule__ends_at, schedule__rrule, task_unknown_since
-- Rows meet through one-row JSON lookups, never joins on the CTEs, whose row counts the
-- planner cannot estimate (a nested loop over two of them is quadratic). JSON and times come
-- back as text: decoding them through the driver's Python loaders costs more than the rest of
-- the claim's Python work together. Unplanned rows come back whole for the claim to plan.
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
                   SELECT 1 FROM scheduling_execution AS w
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
      FROM scheduling_job AS j
      JOIN scheduling_schedule AS s ON s.id = j.schedule_id
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
    INSERT INTO scheduling_execution
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
    UPDATE scheduling_job AS j
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

-- name: write_claim
-- Insert the executions the claim planned in Python and move their jobs, rows travelling as JSON.
-- columns: task_id, id
-- One C-speed JSON encoding per batch (json_to_recordset), where binding an array per column
-- costs more in Python than the statement costs the server.
WITH inserted AS (
    INSERT INTO scheduling_execution
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
    UPDATE scheduling_job AS j
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
