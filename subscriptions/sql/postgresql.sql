-- The subscriptions app's statements on PostgreSQL. Other databases take the ORM's forms
-- (subscriptions/engines.py, OrmLedger).

-- name: unflushed_commit
-- Let the current transaction commit without waiting for the WAL flush.
SET LOCAL synchronous_commit TO OFF

-- name: share_batches
-- Hold a placer's batches against closing until it commits; which were closed already.
SELECT id, closed_at IS NOT NULL AS closed FROM subscriptions_duebatch
 WHERE id = ANY(%(ids)s) ORDER BY id FOR KEY SHARE

-- name: record_charge
-- One job's charge step, conditional on its counter, committed without waiting for the WAL flush.
UPDATE subscriptions_subscriptionjob
   SET parameter = %(parameter)s, custom_text = %(reference)s, opt_counter = %(next)s,
       last_update = %(now)s
 WHERE scheduled_id = %(id)s AND opt_counter = %(read)s
   AND set_config('synchronous_commit', 'off', true) IS NOT NULL

-- name: rewind_charge
-- One job back to create_order with no charge reference, conditional on its counter.
UPDATE subscriptions_subscriptionjob
   SET parameter = %(parameter)s, custom_text = '', opt_counter = %(next)s,
       last_update = %(now)s
 WHERE scheduled_id = %(id)s AND opt_counter = %(read)s

-- name: write_steps
-- Each job's step columns and its next counter (rows locked by the caller), rows as JSON.
UPDATE subscriptions_subscriptionjob AS j
   SET status = v.status, retry_count = v.retry_count, parameter = v.parameter,
       custom_decimal = v.custom_decimal, custom_text = v.custom_text,
       opt_counter = v.opt_counter, last_update = %(now)s
  FROM json_to_recordset(%(rows)s::json) AS v(
       id bigint, status integer, retry_count integer, parameter varchar,
       custom_decimal numeric, custom_text varchar, opt_counter smallint)
 WHERE j.scheduled_id = v.id

-- name: confirm_orders
-- The pending orders of (subscription, period start), paid by a charge; those confirmed.
UPDATE subscriptions_order AS o
   SET status = %(confirmed)s, confirmed_at = %(now)s, charge_reference = v.reference
  FROM json_to_recordset(%(rows)s::json) AS v(
       subscription_id bigint, period_start timestamptz, reference varchar)
 WHERE o.subscription_id = v.subscription_id AND o.period_start = v.period_start
   AND o.status = %(pending)s
RETURNING o.subscription_id, o.period_start
