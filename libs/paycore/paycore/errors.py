"""The library's own errors: one hierarchy, and one vocabulary for "the write may have committed".

Every error the library raises on purpose derives from :class:`PaycoreError`,
so a caller can tell paycore refusing something from a bug. Database failures
are asyncpg's and the socket's own (:data:`DATABASE_ERRORS`); together with
:class:`OutcomeNotConfirmed` they are :data:`MAY_HAVE_COMMITTED`: a write that
ended with one of them must be treated as possibly committed (reload the durable
state; never send on the strength of it).
"""

from __future__ import annotations

import asyncpg


class PaycoreError(Exception):
    """Base of every error the library raises on purpose."""


class AdminPortInUse(PaycoreError, OSError):
    """The process's admin port (``/metrics``, ``/healthz``) is taken; ``str()`` says what moves it."""


class NotFound(PaycoreError, LookupError):
    """No such row (for this customer, where one is named)."""


class AttemptNotFound(NotFound):
    """No payment attempt with that id."""


class TransitionRefused(PaycoreError, ValueError):
    """The transition table (:mod:`paycore.domain`) does not allow this state change."""


class OutcomeNotConfirmed(PaycoreError):
    """An outcome write could not be confirmed (its retries were exhausted): it may have committed."""


# Every way a database call can fail without it being our bug: the socket (refused,
# reset, timed out), the server's errors, a connection closed under us, and a
# connection asyncpg finds in a state it cannot use (as a crash of the server can
# leave one: seen in `make chaos`). A loop that must outlive a database outage
# catches these, and only these.
DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError,
)

# A write that ended with one of these may or may not have committed.
MAY_HAVE_COMMITTED: tuple[type[BaseException], ...] = (*DATABASE_ERRORS, OutcomeNotConfirmed)


class InvalidPaymentMethod(PaycoreError, ValueError):
    """A payment method paycore will not store or send: card data, or a value the provider refuses.

    ``str()`` says why without repeating the value (it may be card data).
    """
