-- The emailer's statements on MySQL and MariaDB: lists travel as one JSON parameter
-- (JSON_TABLE), so each statement has one fixed text. MySQL has no RETURNING (MariaDB none on
-- UPDATE) and no ON CONFLICT ... WHERE: the claim is four statements in one transaction
-- (due_ids, insert_claimed, reclaim_uncertain with the resend policy, held_by_run).

-- name: due_ids
-- The next due participants' ids for a run (the claim's first step: MySQL has no RETURNING).
SELECT p.id FROM emailer_participant p WHERE
            p.project_id = %(project)s
            AND p.unsubscribed_at IS NULL
            AND p.id > %(after)s
            AND (%(every_status)s OR p.status IN (SELECT value FROM JSON_TABLE(%(statuses)s, '$[*]' COLUMNS (value VARCHAR(255) PATH '$')) AS j))
            AND (SELECT 1 FROM emailer_delivery d
                  WHERE d.task_id = %(task)s AND d.participant_id = p.id
                    AND ((d.occurrence = %(occ)s AND d.state <> %(reclaim)s)
                         OR (%(once)s AND d.state IN (SELECT value FROM JSON_TABLE(%(blocking)s, '$[*]' COLUMNS (value VARCHAR(32) PATH '$')) AS j)))
                  LIMIT 1) IS NULL ORDER BY p.id LIMIT %(limit)s

-- name: insert_claimed
-- Mark those participants sending for the run; a row another run holds is left as it is.
INSERT INTO emailer_delivery (task_id, occurrence, participant_id, history_id, email, state,
                         reply, tries, claimed_at)
        SELECT %(task)s, %(occ)s, p.id, %(hist)s, p.email, 'sending', '', 1, %(now)s
          FROM emailer_participant p
         WHERE p.id IN (SELECT value FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS j)
        ON DUPLICATE KEY UPDATE emailer_delivery.id = emailer_delivery.id

-- name: reclaim_uncertain
-- With the resend policy, this occurrence's uncertain rows among them taken again.
UPDATE emailer_delivery
           SET state = 'sending', history_id = %(hist)s, tries = tries + 1,
               claimed_at = %(now)s, finished_at = NULL, reply = ''
         WHERE task_id = %(task)s AND occurrence = %(occ)s AND state = 'uncertain'
           AND participant_id IN (SELECT value FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS j)

-- name: held_by_run
-- What the run now holds among those participants (the claim's last step).
SELECT d.id AS delivery_id, d.participant_id, d.email, p.name, p.status, d.tries
          FROM emailer_delivery d JOIN emailer_participant p ON p.id = d.participant_id
         WHERE d.history_id = %(hist)s AND d.state = 'sending' AND d.claimed_at = %(now)s
           AND d.participant_id IN (SELECT value FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS j)

-- name: has_due
-- Whether anyone after a participant id is still due.
SELECT 1 AS due FROM emailer_participant p WHERE
            p.project_id = %(project)s
            AND p.unsubscribed_at IS NULL
            AND p.id > %(after)s
            AND (%(every_status)s OR p.status IN (SELECT value FROM JSON_TABLE(%(statuses)s, '$[*]' COLUMNS (value VARCHAR(255) PATH '$')) AS j))
            AND (SELECT 1 FROM emailer_delivery d
                  WHERE d.task_id = %(task)s AND d.participant_id = p.id
                    AND ((d.occurrence = %(occ)s AND d.state <> %(reclaim)s)
                         OR (%(once)s AND d.state IN (SELECT value FROM JSON_TABLE(%(blocking)s, '$[*]' COLUMNS (value VARCHAR(32) PATH '$')) AS j)))
                  LIMIT 1) IS NULL LIMIT 1

-- name: record_chunk
-- Each delivery's outcome, in one UPDATE joined to the outcomes' JSON list.
UPDATE emailer_delivery AS d
          JOIN JSON_TABLE(%(outcomes)s, '$[*]' COLUMNS (
                 id BIGINT PATH '$.id', state VARCHAR(32) PATH '$.state',
                 reply TEXT PATH '$.reply', tries INTEGER PATH '$.tries')) AS o
            ON d.id = o.id
           SET d.tries = CASE WHEN o.tries = 1 THEN d.tries ELSE o.tries END,
               d.state = o.state, d.reply = o.reply, d.finished_at = %(now)s
         WHERE d.history_id = %(hist)s AND d.state = 'sending'

-- name: release_first
-- Delete first claims never handed to the server (the participant is due again).
DELETE FROM emailer_delivery
         WHERE id IN (SELECT value FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS j)
           AND history_id = %(hist)s AND state = 'sending' AND tries = 1

-- name: release_resend
-- Put resends never handed to the server back to uncertain.
UPDATE emailer_delivery SET state = 'uncertain'
         WHERE id IN (SELECT value FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS j)
           AND history_id = %(hist)s AND state = 'sending'

-- name: recover_run
-- A dead attempt's sending rows become uncertain.
UPDATE emailer_delivery
           SET state = 'uncertain', finished_at = %(now)s,
               reply = 'the attempt ended while this message was being sent'
         WHERE history_id = %(hist)s AND state = 'sending'

-- name: count_run
-- A run's deliveries per state.
SELECT state, COUNT(*) AS deliveries FROM emailer_delivery
         WHERE history_id = %(hist)s GROUP BY state
