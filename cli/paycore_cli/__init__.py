"""``paycore`` -- the one command that starts and operates everything.

::

    paycore up                     # everything, on embedded defaults (make run)
    paycore migrate                # apply database migrations
    paycore serve checkout|sandbox|webhooks [--host H] [--port N]
    paycore run recovery|dispatcher|alerts [--metrics-host H] [--metrics-port N]
    paycore run consumer fulfillment|email [--metrics-host H] [--metrics-port N]
    paycore outbox requeue|skip MESSAGE_ID --operator NAME --reason TEXT
    paycore outbox purge [--older-than SECONDS]
    paycore escalations ack|resolve ESCALATION_ID --operator NAME [--reason TEXT]
    paycore token CUSTOMER_ID [--ttl SECONDS]
    paycore notifications attach EVENT_ID ATTEMPT_ID --operator NAME --reason TEXT
    paycore actions list [--attempt ID] [--escalation ID] [--operator NAME] [--limit N] [--json]
    paycore refunds create ORDER_ID --amount N [--reason R] | show ID | list ORDER_ID
    paycore captures create ORDER_ID --amount N | show ID;  paycore voids create ORDER_ID | show ID
    paycore credentials issue NAME --scope S [--scope S …] | list | revoke NAME|ID

Configuration comes from ``PAYCORE_*`` variables (:mod:`paycore.config`). Local
state -- embedded PostgreSQL data, the generated JWT secret, the broker log --
lives in ``PAYCORE_HOME``, else in the nearest ``.paycore/`` of the current
directory or its parents (``up`` makes one in the current directory if none).

Modules: :mod:`.parser` (arguments and help), :mod:`.serve` (migrate, serve,
run), :mod:`.operator_commands`, :mod:`.operation_commands` (refunds, captures,
voids, the back office's credentials), :mod:`.tokens`, :mod:`.common` (what
they share) and :mod:`.main`. ``up`` and ``chaos`` are implemented by the
development package ``paycore_devstack`` (:mod:`.development`).

Service packages are imported only by the command that runs them, never when
this package is imported.
"""
