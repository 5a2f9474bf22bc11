-- The partitioned history: executions and attempts split by scheduled_for into periods.
-- Identifiers in braces ({table}, {partition}, ...) are composed by the engine with
-- psycopg's sql.Identifier; everything else is a named parameter.

-- name: is_partitioned
-- Whether a table is partitioned (the executions table, after the migration).
-- columns: partitioned
SELECT EXISTS (SELECT 1 FROM pg_partitioned_table
                WHERE partrelid = %(table)s::regclass) AS partitioned

-- name: partition_bounds
-- The bounds of every partition of a table, as PostgreSQL writes them.
-- columns: bound
SELECT pg_get_expr(c.relpartbound, c.oid) AS bound
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = %(table)s::regclass

-- name: newest_options
-- The storage parameters of a table's newest period (a partitioned table holds none itself).
-- columns: options
SELECT c.reloptions AS options
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = %(table)s::regclass AND c.relname <> %(default)s
 ORDER BY c.relname DESC LIMIT 1

-- name: table_options
-- The storage parameters of one table.
-- columns: options
SELECT reloptions AS options FROM pg_class WHERE oid = %(table)s::regclass

-- name: lock_timeout
-- How long this transaction's maintenance waits for a lock before giving up ('0': for ever).
SELECT set_config('lock_timeout', %(timeout)s, true) AS lock_timeout

-- name: constraints_immediate
-- Run now the checks a caller's transaction deferred: a table with pending ones cannot be dropped.
SET CONSTRAINTS ALL IMMEDIATE

-- name: lock_for_moving
-- Hold off writes to the default partitions while a period's rows move out of them.
LOCK TABLE {executions}, {attempts} IN SHARE ROW EXCLUSIVE MODE

-- name: lock_for_dropping
-- Take a period's partitions whole before they are detached and dropped.
LOCK TABLE {executions}, {attempts} IN ACCESS EXCLUSIVE MODE

-- name: lock_history
-- Take the jobs, executions and attempts tables whole, for the migration's move.
LOCK TABLE {jobs}, {executions}, {attempts} IN ACCESS EXCLUSIVE MODE

-- name: count_in_period
-- How many rows of a table fall in one period.
-- columns: rows
SELECT count(*) AS rows FROM {table}
 WHERE scheduled_for >= %(start)s AND scheduled_for < %(end)s

-- name: stash_period
-- Copy a table's rows of one period aside, into a temporary table dropped at commit.
CREATE TEMP TABLE {stash} ON COMMIT DROP AS
SELECT * FROM {table} WHERE scheduled_for >= %(start)s AND scheduled_for < %(end)s

-- name: delete_period
-- Delete a table's rows of one period.
DELETE FROM {table} WHERE scheduled_for >= %(start)s AND scheduled_for < %(end)s

-- name: create_period
-- One period's partition of a table, made as its newest period was ({storage}: WITH options).
CREATE TABLE {partition} PARTITION OF {table}
   FOR VALUES FROM (%(start)s) TO (%(end)s){storage}

-- name: create_default
-- A table's default partition, for what no period holds.
CREATE TABLE {partition} PARTITION OF {table} DEFAULT{storage}

-- name: insert_all
-- Every row of one table into another of the same columns (through the parent: routed).
INSERT INTO {table} SELECT * FROM {source}

-- name: copy_all
-- Every row of one table into another, ids as they are.
INSERT INTO {table} OVERRIDING SYSTEM VALUE SELECT * FROM {source}

-- name: drop_tables
-- Drop tables (partitions, temporary tables).
DROP TABLE {tables}

-- name: drop_table_cascade
-- Drop a table and every foreign key that refers to it.
DROP TABLE {table} CASCADE

-- name: count_by_job
-- A table's executions by job (a period's partition, or the kept rows).
-- columns: job_id, executions
SELECT job_id, count(*) AS executions FROM {table} GROUP BY job_id

-- name: count_rows
-- How many rows a table holds.
-- columns: rows
SELECT count(*) AS rows FROM {table}

-- name: keep_current
-- Mark what a dropped period keeps: unfinished executions (one arm per partial index) and current runs.
CREATE TEMP TABLE _kept_ids ON COMMIT DROP AS
SELECT e.id FROM {partition} e WHERE e.status = 'pending'
UNION SELECT e.id FROM {partition} e WHERE e.status = 'queued'
UNION SELECT e.id FROM {partition} e WHERE e.status = 'retry'
UNION SELECT e.id FROM {partition} e WHERE e.status = 'waiting'
UNION SELECT e.id FROM {partition} e WHERE e.status = 'running'
UNION SELECT e.id FROM {partition} e
       WHERE e.id IN (SELECT j.current_execution_id FROM scheduling_job j
                       WHERE j.current_execution_id IS NOT NULL)

-- name: keep_current_and_latest
-- Mark what a dropped period keeps: as keep_current, and each named job's executions from its keep-th newest on.
CREATE TEMP TABLE _kept_ids ON COMMIT DROP AS
SELECT e.id FROM {partition} e WHERE e.status = 'pending'
UNION SELECT e.id FROM {partition} e WHERE e.status = 'queued'
UNION SELECT e.id FROM {partition} e WHERE e.status = 'retry'
UNION SELECT e.id FROM {partition} e WHERE e.status = 'waiting'
UNION SELECT e.id FROM {partition} e WHERE e.status = 'running'
UNION SELECT e.id FROM {partition} e
       WHERE e.id IN (SELECT j.current_execution_id FROM scheduling_job j
                       WHERE j.current_execution_id IS NOT NULL)
UNION SELECT e.id FROM {partition} e
  JOIN unnest(%(jobs)s::bigint[], %(nth)s::timestamptz[]) AS k(job_id, nth)
    ON k.job_id = e.job_id AND (k.nth IS NULL OR e.scheduled_for >= k.nth)

-- name: stash_kept_executions
-- Copy the kept executions of a period aside, into a temporary table dropped at commit.
CREATE TEMP TABLE _kept_executions ON COMMIT DROP AS
SELECT * FROM {partition} WHERE id IN (SELECT id FROM _kept_ids)

-- name: stash_kept_attempts
-- Copy the kept executions' attempts aside, into a temporary table dropped at commit.
CREATE TEMP TABLE _kept_attempts ON COMMIT DROP AS
SELECT * FROM {partition} WHERE execution_id IN (SELECT id FROM _kept_ids)

-- name: detach_partition
-- Detach one partition from its table.
ALTER TABLE {table} DETACH PARTITION {partition}

-- name: nth_newest
-- Each named job's keep-th newest occurrence within a range of periods (None: it has fewer).
-- columns: job_id, nth
-- Bounded to the periods, the read leaves out the default partition, so PostgreSQL reads the
-- periods newest first and stops at the keep-th (one step down one index for most jobs),
-- instead of merging every period's index. What the default partition holds is older (rows
-- kept by an earlier drop) or later (due past the periods made): left out, the keep-th newest
-- found is never later than the true one, so no row of a job's latest goes.
SELECT k.job_id AS job_id,
       (SELECT x.scheduled_for FROM scheduling_execution x
         WHERE x.job_id = k.job_id
           AND x.scheduled_for >= %(first)s AND x.scheduled_for < %(last)s
         ORDER BY x.scheduled_for DESC OFFSET %(keep)s - 1 LIMIT 1) AS nth
  FROM unnest(%(jobs)s::bigint[]) AS k(job_id)

-- name: rename_table
-- Give a table another name.
ALTER TABLE {table} RENAME TO {name}

-- name: create_partitioned_like
-- An empty table partitioned by scheduled_for, with another table's columns, defaults and checks.
CREATE TABLE {table} (LIKE {source} INCLUDING DEFAULTS INCLUDING IDENTITY
                      INCLUDING CONSTRAINTS) PARTITION BY RANGE (scheduled_for)

-- name: create_plain_like
-- An empty plain table with another table's columns, defaults and checks.
CREATE TABLE {table} (LIKE {source} INCLUDING DEFAULTS INCLUDING IDENTITY
                      INCLUDING CONSTRAINTS)

-- name: set_storage
-- Give a table storage parameters ({options}).
ALTER TABLE {table} SET ({options})

-- name: oldest_and_now
-- The oldest occurrence a table holds, and the server's clock.
-- columns: oldest, now
SELECT min(scheduled_for) AS oldest, clock_timestamp() AS now FROM {table}

-- name: refresh_heartbeats
-- A fresh heartbeat for every running execution, so a wait on the move is not taken for a dead worker.
UPDATE {table} SET last_heartbeat_at = clock_timestamp() WHERE status = 'running'

-- name: identity_sequence
-- The sequence behind a table's id.
-- columns: sequence
SELECT pg_get_serial_sequence(%(table)s, 'id') AS sequence

-- name: rename_sequence
-- Give a sequence the name Django gives it.
ALTER SEQUENCE {sequence} RENAME TO {name}

-- name: restart_identity
-- Set a table's id sequence past its largest id.
SELECT setval(pg_get_serial_sequence(%(table)s, 'id'),
              coalesce((SELECT max(id) FROM {table}), 0) + 1, false) AS next

-- name: add_period_primary_key
-- The primary key of a partitioned table, which must hold the partition key.
ALTER TABLE {table} ADD PRIMARY KEY (id, scheduled_for)

-- name: add_plain_primary_key
-- The primary key of a plain table.
ALTER TABLE {table} ADD PRIMARY KEY (id)

-- name: add_attempt_number_unique
-- An attempt's number is unique per execution and occurrence (the partition key with it).
ALTER TABLE {table} ADD CONSTRAINT attempt_number_unique
      UNIQUE (execution_id, number, scheduled_for)

-- name: delete_orphan_attempts
-- Attempts whose execution is gone (none should be: the foreign key that follows refuses any).
DELETE FROM {attempts} a
 WHERE NOT EXISTS (SELECT 1 FROM {executions} e WHERE e.id = a.execution_id)

-- name: clear_missing_current
-- Jobs whose current execution is gone hold none.
UPDATE {jobs} j SET current_execution_id = NULL
 WHERE current_execution_id IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM {executions} e WHERE e.id = j.current_execution_id)
