-- Locks and bounds that last until the transaction ends.

-- name: lock_declarations
-- A transaction-scoped advisory lock on the declarations' name.
SELECT pg_advisory_xact_lock(hashtextextended('duecourse.declarations', 0)) AS locked

-- name: lock_slot
-- A transaction-scoped advisory lock on a name (a job's, an owner's).
SELECT pg_advisory_xact_lock(hashtextextended(%(name)s, 0)) AS locked

-- name: bound_statements
-- This transaction's statements fail after a timeout instead of hanging.
SELECT set_config('statement_timeout', %(timeout)s, true)
