-- An attempt from its start to its successful end, and a run enqueued through Django's Tasks.

-- name: start_attempt
-- Start one attempt at an execution (compare-and-set) and write its attempt row.
-- columns: job_id, checkpoint, attempt, scheduled_for, created_at, call, errors, earlier_workers, first_started_at, commit_mode
WITH started AS (
    UPDATE scheduling_execution
       SET status = %(running)s, started_at = %(now)s, finished_at = NULL,
           last_heartbeat_at = GREATEST(%(now)s, now()), retry_at = NULL,
           worker = %(worker)s,
           updated_at = %(now)s
     WHERE id = %(id)s
       AND (status IN (%(pending)s, %(queued)s)
            OR (status = %(retry)s AND retry_at <= %(now)s))
       AND NOT EXISTS (
            SELECT 1 FROM scheduling_job x
             WHERE x.id = scheduling_execution.job_id
               AND ((x.expires IS NOT NULL
                     AND scheduling_execution.scheduled_for
                         + x.expires * interval '1 second' < %(now)s)
                    OR (NOT %(limits_checked)s
                        AND (x.max_running IS NOT NULL OR %(owner_limits)s))))
       -- The crash hold: an execution made before the last crash recovery (when crash
       -- recovery reset every kind of shared statistics at one instant) starts, for one lease
       -- after it, only for the worker whose start the crash undid (attempts.restore_start).
       AND NOT (created_at < (SELECT COALESCE(LEAST(w.stats_reset, b.stats_reset,
                                                    a.stats_reset), '-infinity')
                                FROM pg_stat_wal w, pg_stat_bgwriter b, pg_stat_archiver a)
                AND now() < (SELECT COALESCE(LEAST(w.stats_reset, b.stats_reset,
                                                   a.stats_reset), '-infinity')
                               FROM pg_stat_wal w, pg_stat_bgwriter b, pg_stat_archiver a)
                            + %(lease)s * interval '1 second')
 RETURNING id, job_id, checkpoint, scheduled_for, created_at, call, result -> 'errors' AS errors
), earlier AS (
    -- The run's earlier attempts, read once: the new one's number, and with the run's
    -- creation, call and errors what a Django task's running result needs.
    SELECT count(*) AS attempts,
           array_agg(a.worker ORDER BY a.number) AS workers,
           (array_agg(a.started_at ORDER BY a.number))[1] AS first_started_at
      FROM started s
      JOIN scheduling_attempt a
        ON a.execution_id = s.id AND a.scheduled_for = s.scheduled_for
), attempt AS (
    INSERT INTO scheduling_attempt
           (execution_id, scheduled_for, number, worker, pid, started_at, outcome, error)
    SELECT s.id, s.scheduled_for, 1 + e.attempts,
           %(worker)s, %(pid)s, %(now)s, %(attempt_running)s, ''
      FROM started s
     CROSS JOIN earlier e
 RETURNING number
)
SELECT s.job_id AS job_id, s.checkpoint AS checkpoint,
       (SELECT number FROM attempt) AS attempt, s.scheduled_for AS scheduled_for,
       s.created_at AS created_at, s.call AS call, s.errors AS errors,
       e.workers AS earlier_workers, e.first_started_at AS first_started_at,
       set_config('synchronous_commit', 'off', true) AS commit_mode
  FROM started s
 CROSS JOIN earlier e

-- name: held_after_crash
-- Seconds until an execution made before the last crash recovery may start (no row: not held).
SELECT EXTRACT(EPOCH FROM r.recovered_at + %(lease)s * interval '1 second' - now()) AS seconds
  FROM scheduling_execution
 CROSS JOIN (SELECT COALESCE(LEAST(w.stats_reset, b.stats_reset, a.stats_reset), '-infinity')
                    AS recovered_at
               FROM pg_stat_wal w, pg_stat_bgwriter b, pg_stat_archiver a) AS r
 WHERE id = %(id)s AND created_at < r.recovered_at
   AND now() < r.recovered_at + %(lease)s * interval '1 second'

-- name: complete_attempt
-- End the running attempt successfully: result merged, run counted, failures reset, job released.
-- columns: job_id
WITH done AS (
    UPDATE scheduling_execution
       SET status = %(completed)s, finished_at = %(now)s, last_error = '',
           updated_at = %(now)s,
           result = CASE WHEN %(result)s::jsonb IS NULL THEN result
                         ELSE COALESCE(result, '{}'::jsonb) || %(result)s::jsonb END
     WHERE id = %(id)s AND status = %(running)s
       AND (%(attempt)s::int IS NULL OR EXISTS (
            SELECT 1 FROM scheduling_attempt a
             WHERE a.execution_id = %(id)s AND a.number = %(attempt)s
               AND a.outcome = %(attempt_running)s))
 RETURNING id, job_id
), attempt AS (
    UPDATE scheduling_attempt
       SET outcome = %(attempt_completed)s, finished_at = %(now)s
     WHERE execution_id IN (SELECT id FROM done) AND outcome = %(attempt_running)s
), job AS (
    UPDATE scheduling_job j
       SET execute_count = j.execute_count + 1,
           consecutive_failures = 0,
           last_keepalive_at = %(now)s,
           current_execution_id = NULLIF(j.current_execution_id, d.id)
      FROM done d WHERE j.id = d.job_id
)
SELECT job_id FROM done

-- name: insert_run
-- Write one run of Django's Tasks framework as an execution; its id.
-- columns: id
INSERT INTO scheduling_execution
       (task, scheduled_for, status, retry_count, task_id, worker, created_at, queued_at,
        retry_at, last_error, duplicates, call, updated_at)
VALUES (%(task)s, %(scheduled_for)s, %(status)s, 0, %(task_id)s, '', %(now)s,
        %(queued_at)s::timestamptz, %(retry_at)s::timestamptz, '', 0, %(call)s::jsonb,
        %(now)s)
RETURNING id

-- name: insert_runs
-- Write many runs of one task (enqueue_many) in one statement, each back with its task id.
-- columns: id, task_id
INSERT INTO scheduling_execution
       (task, scheduled_for, status, retry_count, task_id, worker, created_at, queued_at,
        retry_at, last_error, duplicates, call, updated_at)
SELECT %(task)s, %(scheduled_for)s, %(status)s, 0, r.task_id, '', %(now)s,
       %(queued_at)s::timestamptz, %(retry_at)s::timestamptz, '', 0, r.call, %(now)s
  FROM jsonb_to_recordset(%(runs)s::jsonb) AS r(task_id uuid, call jsonb)
RETURNING id, task_id
