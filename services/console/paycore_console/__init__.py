"""paycore's operator console: server-rendered pages and a JSON API over what operators can see
(:mod:`paycore_console.inspection`) and the operator functions of :mod:`paycore` (escalations,
conflicts, dead ends, notifications, outbox); who may use it is :mod:`paycore_console.credentials`."""
