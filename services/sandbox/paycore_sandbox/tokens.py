"""Test payment methods: each token decides the outcome deterministically."""

from __future__ import annotations

from dataclasses import dataclass

from paycore_sandbox.errors import invalid_param
from paycore_sandbox.ledger import PaymentStatus


@dataclass(frozen=True)
class Outcome:
    status: PaymentStatus
    http_status: int
    decline_code: str | None = None


OUTCOMES: dict[str, Outcome] = {
    "tok_visa": Outcome("succeeded", 201),
    "tok_decline": Outcome("declined", 402, "card_declined"),
    "tok_insufficient_funds": Outcome("declined", 402, "insufficient_funds"),
    "tok_3ds": Outcome("requires_action", 201),
    "tok_async": Outcome("processing", 201),
}

# Rejected at validation: no payment is created and the key is not stored.
REJECTED: dict[str, str] = {"tok_expired": "The card has expired."}


def outcome_for(payment_method: str) -> Outcome:
    if payment_method in REJECTED:
        raise invalid_param("payment_method", REJECTED[payment_method])
    outcome = OUTCOMES.get(payment_method)
    if outcome is None:
        known = ", ".join(sorted([*OUTCOMES, *REJECTED]))
        raise invalid_param("payment_method",
                            f"Unknown payment method {payment_method!r}; the sandbox "
                            f"accepts only test tokens: {known}.")
    return outcome
