"""paycore's operator console: server-rendered pages and a JSON API over the operator functions of
:mod:`paycore` (inspection, escalations, conflicts, dead ends, notifications, outbox)."""
