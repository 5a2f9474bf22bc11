-- The reads whose one text runs on every database the ORM engine serves.

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
