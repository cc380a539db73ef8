"""Wire dialects: each speaks one provider's documented wire on the sandbox's one core.

The core (ledger, lifecycle, tokens, faults, clock, capture, webhook delivery)
is shared; a dialect owns its paths, auth, bodies, error shapes and webhook
envelope. A payment records the dialect that created it
(:attr:`paycore_sandbox.ledger.Payment.dialect`), and its events go, rendered
and signed by :func:`webhook_format` of that dialect, to that dialect's
endpoints only. ``cardco`` is the built-in format of
:mod:`paycore_sandbox.delivery` (Standard Webhooks), so it has no entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from paycore_sandbox.settings import WEBHOOK_DIALECTS, SandboxAccount
from paycore_sandbox.webhooks import Event

DEFAULT_DIALECT = "cardco"
DIALECTS = WEBHOOK_DIALECTS


@dataclass(frozen=True)
class WebhookFormat:
    """How one dialect delivers events.

    ``render(events, account)``: the body for those events (several only for a
    batch), or None when the dialect sends no notification for them.
    ``headers(account, webhook_id, timestamp, body)``: the request headers of one
    attempt. ``accepted(status, body)``: whether the receiver's answer counts as
    delivered (anything else is retried).
    """

    render: Callable[[Sequence[Event], SandboxAccount], bytes | None]
    headers: Callable[[SandboxAccount, str, int, bytes], dict[str, str]]
    accepted: Callable[[int, bytes], bool]
    batches: bool = False  # whether several events may share one delivery


def webhook_format(dialect: str) -> WebhookFormat | None:
    """The webhook format of ``dialect``; None for cardco (the built-in format)."""
    # Imported here: the dialect modules import the core, which imports this package.
    from paycore_sandbox.dialects import adyen_webhooks

    formats = {"adyen": adyen_webhooks.FORMAT}
    return formats.get(dialect)
