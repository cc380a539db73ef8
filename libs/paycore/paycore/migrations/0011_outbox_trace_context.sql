-- Issue 14: a trace crosses the outbox. paycore.outbox.enqueue stores the W3C traceparent of the
-- span that queued the row (the request or job it belongs to); the relay's producer span is its
-- child and the relay sends the producer span's traceparent as a Kafka header, so the consumer's
-- span joins the same trace. NULL when tracing is off or nothing traced queued the row: the relay
-- then sends no header. A traceparent is ids and flags only, never payload data.
ALTER TABLE outbox_messages ADD COLUMN traceparent text NULL;
