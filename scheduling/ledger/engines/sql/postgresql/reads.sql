-- The scheduler's idle probe and the operators' reads.

-- name: probe
-- Every question of an idle tick, each one index probe.
-- columns: due, republish, stale, next_due_at, waiting
-- The states are literals, so each probe matches its partial index's predicate whatever way
-- the driver binds parameters.
SELECT
  EXISTS (SELECT 1 FROM scheduling_job WHERE status = 'active'
           AND (current_execution_id IS NULL OR overlap = 'cancel_other')
           AND next_due_at <= %(now)s) AS due,
  EXISTS (SELECT 1 FROM scheduling_execution WHERE status = 'pending'
           AND queued_at < %(pending_before)s)
  OR EXISTS (SELECT 1 FROM scheduling_execution WHERE status = 'queued'
           AND queued_at < %(queued_before)s)
  OR EXISTS (SELECT 1 FROM scheduling_execution WHERE status = 'retry'
           AND retry_at <= %(now)s) AS republish,
  EXISTS (SELECT 1 FROM scheduling_execution WHERE status = 'running'
           AND last_heartbeat_at < %(stale_before)s) AS stale,
  (SELECT MIN(next_due_at) FROM scheduling_job WHERE status = 'active'
           AND (current_execution_id IS NULL OR overlap = 'cancel_other')
           AND next_due_at > '-infinity' AND next_due_at < 'infinity') AS next_due_at,
  EXISTS (SELECT 1 FROM scheduling_execution WHERE status = 'waiting') AS waiting

-- name: ping
-- One round trip that touches no table.
SELECT 1 AS answer

-- name: lag_percentiles
-- Start minus due time at the quantiles over one range of due times, every owner.
SELECT percentile_cont(%(quantiles)s::double precision[]) WITHIN GROUP
         (ORDER BY date_part('epoch', e.started_at - e.scheduled_for)) AS lags
  FROM scheduling_execution e
 WHERE e.scheduled_for >= %(start)s AND e.scheduled_for < %(end)s
   AND e.started_at IS NOT NULL

-- name: owner_lag_percentiles
-- Start minus due time at the quantiles over one range of due times, one owner's jobs.
SELECT percentile_cont(%(quantiles)s::double precision[]) WITHIN GROUP
         (ORDER BY date_part('epoch', e.started_at - e.scheduled_for)) AS lags
  FROM scheduling_execution e JOIN scheduling_job j ON j.id = e.job_id
 WHERE e.scheduled_for >= %(start)s AND e.scheduled_for < %(end)s
   AND e.started_at IS NOT NULL AND j.owner_id = %(owner_id)s

-- name: job_names
-- The names of many jobs at once, by one array parameter.
-- columns: id, name
SELECT id, name FROM scheduling_job WHERE id = ANY(%(ids)s::bigint[])
