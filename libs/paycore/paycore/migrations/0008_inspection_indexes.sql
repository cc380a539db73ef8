-- Issue 13: indexes for what operators look at (paycore.inspection). Each one serves one
-- read that would otherwise scan a table that only grows (the history, the outbox, the
-- escalations); every one is partial where the read is, so writers pay for few rows.

-- The overview's chart: attempts that entered Unknown, per hour of the last 24 hours.
-- Without it the chart reads every event of the day (six or more per attempt).
CREATE INDEX payment_attempt_events_entered_unknown ON payment_attempt_events (occurred_at)
    WHERE kind = 'transition' AND detail ->> 'to' = 'Unknown';

-- The overview's chart: escalations raised per hour (resolved ones included).
CREATE INDEX payment_escalations_raised ON payment_escalations (raised_at);

-- The escalation listing's order and keyset cursor: open episodes first, oldest raised first.
CREATE INDEX payment_escalations_listing
    ON payment_escalations ((resolved_at IS NOT NULL), raised_at, escalation_id);

-- Unmatched notifications, oldest first by event id (keyset cursor): the few rows the
-- webhook intake stored with no attempt, out of the whole history.
CREATE INDEX payment_attempt_events_unmatched ON payment_attempt_events (event_id)
    WHERE kind = 'notification' AND attempt_id IS NULL;

-- "Was this stored notification attached since?": the attachment's transition event names it
-- (paycore.notifications.attach_notification); the listing asks once per unmatched row.
CREATE INDEX payment_attempt_events_attachments
    ON payment_attempt_events ((detail ->> 'attached_notification'))
    WHERE kind = 'transition' AND detail ? 'attached_notification';

-- An attempt's outbox rows (the attempt page): until now only unfinished rows were
-- reachable by their ordering key, and alerts carry none.
CREATE INDEX outbox_messages_by_attempt ON outbox_messages (attempt_id)
    WHERE attempt_id IS NOT NULL;

-- Dead letters, oldest first by message id (keyset cursor); the pending index excludes them.
CREATE INDEX outbox_messages_dead_letters ON outbox_messages (message_id)
    WHERE dead_lettered_at IS NOT NULL;
