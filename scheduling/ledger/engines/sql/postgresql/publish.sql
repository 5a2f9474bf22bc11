-- The publisher's bookkeeping.

-- name: commit_unflushed
-- Let this transaction commit without waiting for its WAL flush.
SET LOCAL synchronous_commit = off

-- name: mark_queued
-- PENDING executions whose messages reached the broker become QUEUED.
UPDATE scheduling_execution SET status = %(queued)s, queued_at = %(now)s, updated_at = %(now)s
 WHERE id = ANY(%(ids)s::bigint[]) AND status = %(pending)s
