-- The test gateway's statements (subscriptions/testgateway/ledger.py), read once at import.

-- name: test_gateway_charge
-- The test gateway's charge in one round trip: inserted unless replayed or scripted to fail.
WITH seen AS (
    SELECT reference, customer, amount::text AS amount FROM subscriptions_gatewaycharge
     WHERE idempotency_key = %(key)s
), script AS (
    SELECT errors_left, declines_left FROM subscriptions_gatewayscript
     WHERE customer = %(customer)s AND (errors_left > 0 OR declines_left > 0)
       FOR NO KEY UPDATE
), inserted AS (
    INSERT INTO subscriptions_gatewaycharge (reference, idempotency_key, customer, amount, created_at)
    SELECT %(reference)s, %(key)s, %(customer)s, %(amount)s, %(now)s
     WHERE NOT EXISTS (SELECT 1 FROM seen) AND NOT EXISTS (SELECT 1 FROM script)
        ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING reference
)
SELECT i.reference AS inserted, s.reference AS seen_reference,
       s.customer AS seen_customer, s.amount AS seen_amount,
       c.errors_left AS errors_left, c.declines_left AS declines_left
  FROM (SELECT 1) AS one
  LEFT JOIN inserted AS i ON true
  LEFT JOIN seen AS s ON true
  LEFT JOIN script AS c ON true
