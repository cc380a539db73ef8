"""paycore: payment-attempt recovery.

Every payment attempt is recorded before it is sent, sent under one idempotency
key, called ``Unknown`` whenever the provider's answer does not arrive, and
resolved only by evidence. This package holds the rules every service shares:

- :mod:`paycore.clock` -- the one clock, real or fake, and the budgets that run on it
- :mod:`paycore.config` -- ``PAYCORE_*`` settings, validated at start-up
- :mod:`paycore.domain` -- attempt states, allowed transitions, provider outcomes
- :mod:`paycore.db` -- connection pool and migrations
- :mod:`paycore.attempts` -- the attempt repository: create, start, record outcome
- :mod:`paycore.escalations`, :mod:`paycore.outbox` -- durable alerts and downstream work
- :mod:`paycore.providers` -- the provider interface (``base.Provider``), its one factory
  (``registry.for_accounts``), and Cardco (``providers.cardco``)
"""

__version__ = "0.1.0"
