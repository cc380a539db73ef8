"""Money as people type it, back to minor units with the currency's own exponent (the console's
refund form): what reads one way only is taken, anything else refused with what to type."""

from __future__ import annotations

import pytest

from paycore.currencies import AmountNotReadable, format_amount, max_amount_minor, parse_amount


@pytest.mark.parametrize(("typed", "currency", "minor"), [
    ("25", "EUR", 2500), ("25.5", "EUR", 2550), ("25.50", "EUR", 2550), (" 0.01 ", "EUR", 1),
    ("500", "JPY", 500), ("1.5", "KWD", 1500), ("1.500", "KWD", 1500), ("007", "USD", 700),
])
def test_typed_money_is_read_with_the_currencys_decimals(typed: str, currency: str, minor: int) -> None:
    assert parse_amount(typed, currency) == minor
    assert parse_amount(format_amount(minor, currency).split()[0], currency) == minor  # as shown, as typed


@pytest.mark.parametrize(("typed", "currency", "refusal"), [
    ("12.345", "EUR", "EUR has 2 decimals, not 3"),
    ("5.5", "JPY", "JPY has no decimals"),
    ("1,000.00", "EUR", "not an amount: type digits and a point before the decimals, as in 25.50"),
    ("1 000", "EUR", "not an amount"), ("-5", "EUR", "not an amount"), ("+5", "EUR", "not an amount"),
    ("1e3", "EUR", "not an amount"), (".5", "EUR", "not an amount"), ("5.", "EUR", "not an amount"),
    ("", "EUR", "not an amount"), ("１２", "EUR", "not an amount"), ("x", "JPY", "type whole JPY"),
    ("0", "EUR", "more than zero"), ("0.00", "EUR", "more than zero"),
    ("10000000000.01", "EUR", "more than 10000000000.00 EUR"), ("9" * 5000, "EUR", "more than"),
    ("5", "XXX", "not a currency paycore takes"),
])
def test_anything_else_is_refused_with_what_to_type(typed: str, currency: str, refusal: str) -> None:
    with pytest.raises(AmountNotReadable, match=refusal):
        parse_amount(typed, currency)


def test_the_largest_order_can_be_refunded_whole() -> None:
    assert parse_amount("10000000000", "KWD") == max_amount_minor("KWD")
