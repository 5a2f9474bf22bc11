-- A backfill's writes.

-- name: insert_waiting
-- One WAITING execution per occurrence the ledger does not hold yet; the instants written.
-- columns: scheduled_for
INSERT INTO scheduling_execution
       (job_id, task, scheduled_for, status, task_id, last_error, created_at,
        retry_count, worker, duplicates, updated_at)
SELECT %(job_id)s, %(task)s, v.at, %(waiting)s, v.task_id, %(reason)s, %(now)s,
       0, '', 0, %(now)s
  FROM unnest(%(instants)s::timestamptz[], %(task_ids)s::uuid[]) AS v(at, task_id)
 ORDER BY v.at
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING scheduled_for
