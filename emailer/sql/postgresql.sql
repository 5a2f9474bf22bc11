-- The emailer's statements on PostgreSQL: lists travel as one JSON parameter
-- (json_array_elements_text, json_to_recordset), so each statement has one fixed text.

-- name: claim_chunk
-- Mark the next due participants sending for a run, in one INSERT; what it now owns.
-- "Has had this mail" is a scalar subquery with LIMIT, not NOT EXISTS, on purpose: the
-- planner cannot turn it into an anti join, so it is always one probe of the unique index
-- (task, participant, occurrence) per candidate. The flags (every_status, once) are values in
-- the text Django sends, and PostgreSQL folds "true OR ..." and "false AND ..." away when it
-- plans: a condition a flag turns off is not in the plan.
INSERT INTO emailer_delivery (task_id, occurrence, participant_id, history_id, email, state,
                              reply, tries, claimed_at)
SELECT %(task)s, %(occ)s, p.id, %(hist)s, p.email, 'sending', '', 1, %(now)s
  FROM emailer_participant p
 WHERE
    p.project_id = %(project)s
    AND p.unsubscribed_at IS NULL
    AND p.id > %(after)s
    AND (%(every_status)s OR p.status IN (SELECT value FROM json_array_elements_text(%(statuses)s::json)))
    AND (SELECT 1 FROM emailer_delivery d
          WHERE d.task_id = %(task)s AND d.participant_id = p.id
            AND ((d.occurrence = %(occ)s AND d.state <> %(reclaim)s)
                 OR (%(once)s AND d.state IN (SELECT value FROM json_array_elements_text(%(blocking)s::json))))
          LIMIT 1) IS NULL
 ORDER BY p.id
 LIMIT %(limit)s
ON CONFLICT (task_id, participant_id, occurrence) DO NOTHING
RETURNING id AS delivery_id, participant_id, email,
          (SELECT name FROM emailer_participant x WHERE x.id = participant_id) AS name,
          (SELECT status FROM emailer_participant x WHERE x.id = participant_id) AS status,
          tries

-- name: claim_chunk_resending
-- The same, with this occurrence's uncertain rows claimed again (the resend policy).
INSERT INTO emailer_delivery (task_id, occurrence, participant_id, history_id, email, state,
                              reply, tries, claimed_at)
SELECT %(task)s, %(occ)s, p.id, %(hist)s, p.email, 'sending', '', 1, %(now)s
  FROM emailer_participant p
 WHERE
    p.project_id = %(project)s
    AND p.unsubscribed_at IS NULL
    AND p.id > %(after)s
    AND (%(every_status)s OR p.status IN (SELECT value FROM json_array_elements_text(%(statuses)s::json)))
    AND (SELECT 1 FROM emailer_delivery d
          WHERE d.task_id = %(task)s AND d.participant_id = p.id
            AND ((d.occurrence = %(occ)s AND d.state <> %(reclaim)s)
                 OR (%(once)s AND d.state IN (SELECT value FROM json_array_elements_text(%(blocking)s::json))))
          LIMIT 1) IS NULL
 ORDER BY p.id
 LIMIT %(limit)s
ON CONFLICT (task_id, participant_id, occurrence) DO UPDATE
       SET state = 'sending', history_id = excluded.history_id,
           tries = emailer_delivery.tries + 1, claimed_at = excluded.claimed_at,
           finished_at = NULL, reply = ''
     WHERE emailer_delivery.state = 'uncertain'
RETURNING id AS delivery_id, participant_id, email,
          (SELECT name FROM emailer_participant x WHERE x.id = participant_id) AS name,
          (SELECT status FROM emailer_participant x WHERE x.id = participant_id) AS status,
          tries

-- name: has_due
-- Find one participant still due after an id.
SELECT 1 AS due FROM emailer_participant p WHERE p.project_id = %(project)s
       AND p.unsubscribed_at IS NULL
       AND p.id > %(after)s
       AND (%(every_status)s OR p.status IN (SELECT value FROM json_array_elements_text(%(statuses)s::json)))
       AND (SELECT 1 FROM emailer_delivery d
             WHERE d.task_id = %(task)s AND d.participant_id = p.id
               AND ((d.occurrence = %(occ)s AND d.state <> %(reclaim)s)
                    OR (%(once)s AND d.state IN (SELECT value FROM json_array_elements_text(%(blocking)s::json))))
             LIMIT 1) IS NULL LIMIT 1

-- name: record_chunk
-- Write each delivery's outcome in one UPDATE, on rows this run still holds.
UPDATE emailer_delivery AS d
   SET state = o.state, reply = o.reply,
       tries = CASE WHEN o.tries = 1 THEN d.tries ELSE o.tries END,
       finished_at = %(now)s
  FROM json_to_recordset(%(outcomes)s::json)
       AS o(id bigint, state text, reply text, tries integer)
 WHERE d.id = o.id AND d.history_id = %(hist)s AND d.state = 'sending'

-- name: release_first
-- Delete first claims never handed to the server (the participant is due again).
DELETE FROM emailer_delivery
 WHERE id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json))
   AND history_id = %(hist)s AND state = 'sending' AND tries = 1

-- name: release_resend
-- Put resends never handed to the server back to uncertain.
UPDATE emailer_delivery SET state = 'uncertain'
 WHERE id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json))
   AND history_id = %(hist)s AND state = 'sending'

-- name: recover_run
-- Turn this run's sending rows, left by a dead attempt, into uncertain.
UPDATE emailer_delivery
   SET state = 'uncertain', finished_at = %(now)s,
       reply = 'the attempt ended while this message was being sent'
 WHERE history_id = %(hist)s AND state = 'sending'

-- name: count_run
-- Count the run's deliveries per state.
SELECT state, COUNT(*) AS deliveries FROM emailer_delivery
 WHERE history_id = %(hist)s GROUP BY state
