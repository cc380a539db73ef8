"""The currencies paycore takes payments in, with their minor-unit exponents (one table).

Source: ISO 4217 List One ("current currency & funds code list"), published
2026-01-01 by the ISO 4217 maintenance agency (SIX). Kept: every code whose
minor unit is a number, except

- fund codes (BOV CHE CHW CLF COU MXV USN UYI) and the units of account XAD
  (Arab Accounting Dinar) and UYW (Unidad Previsional): indexes and
  settlement units, not money a customer pays in;
- codes with no minor unit ("N.A."): precious metals (XAU XAG XPD XPT), the
  SDR and other supranational units (XDR XSU XUA XBA–XBD), the testing code
  XTS and "no currency" XXX.

Withdrawn codes (BGN since the euro on 2026-01-01, ANG, HRK, ZWL …) are not in
List One and so not here. When the agency publishes an amendment, update the
sets below and the date above; an order already stored in a withdrawn code
keeps its currency (its exponent then reads as unknown).
"""

from __future__ import annotations

from paycore.errors import PaycoreError

_ZERO = """
BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX VND VUV XAF XOF XPF
"""
_TWO = """
AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BMD BND BOB BRL BSD BTN BWP BYN BZD CAD CDF CHF
CNY COP CRC CUP CVE CZK DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GTQ GYD HKD HNL
HTG HUF IDR ILS INR IRR JMD KES KGS KHR KPW KYD KZT LAK LBP LKR LRD LSL MAD MDL MGA MKD MMK MNT
MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD PAB PEN PGK PHP PKR PLN QAR RON RSD RUB
SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TOP TRY TTD TWD TZS UAH
USD UYU UZS VED VES WST XCD XCG YER ZAR ZMW ZWG
"""
_THREE = """
BHD IQD JOD KWD LYD OMR TND
"""

EXPONENTS: dict[str, int] = {
    **dict.fromkeys(_ZERO.split(), 0),
    **dict.fromkeys(_TWO.split(), 2),
    **dict.fromkeys(_THREE.split(), 3),
}

# The largest order, in major units of its currency: ten billion (JPY 10^10,
# EUR 10^12, KWD 10^13 minor units). It keeps the previous bound for two-decimal
# currencies (10^12 minor units) and leaves room under bigint for every exponent.
MAX_MAJOR_UNITS = 10**10


def exponent(code: str) -> int | None:
    """The minor-unit exponent of an accepted currency code, or None if it is not one."""
    return EXPONENTS.get(code)


def max_amount_minor(code: str) -> int:
    """The largest amount in minor units an order in ``code`` may have."""
    return int(MAX_MAJOR_UNITS * 10 ** EXPONENTS[code])


def format_amount(amount_minor: int, code: str) -> str:
    """Money as people read it: ``2500, EUR`` is ``25.00 EUR``, ``500, JPY`` is ``500 JPY``,
    ``1500, KWD`` is ``1.500 KWD`` (the currency's own decimals, a point, no grouping). A code
    without a known exponent keeps its minor units and says so."""
    places = EXPONENTS.get(code)
    if places is None:
        return f"{amount_minor} {code} (minor units)"
    sign, whole = ("-" if amount_minor < 0 else ""), abs(amount_minor)
    if places == 0:
        return f"{sign}{whole} {code}"
    major, minor = divmod(whole, 10**places)
    return f"{sign}{major}.{minor:0{places}d} {code}"


class AmountNotReadable(PaycoreError, ValueError):
    """Typed money paycore will not guess at: its words say what to type instead."""


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()  # "١٢" and "１２" are digits to isdigit() alone


def parse_amount(text: str, code: str) -> int:
    """Money as people type it, in minor units: ``25``, ``25.5`` and ``25.50`` EUR are 2550,
    ``500`` JPY is 500, ``1.5`` KWD is 1500. A point separates the decimals, and there are at most
    the currency's own; no sign, no grouping (``1,000.00`` or ``1 000`` could mean two things),
    more than zero and at most :func:`max_amount_minor`. Raises :class:`AmountNotReadable`."""
    places = EXPONENTS.get(code)
    if places is None:
        raise AmountNotReadable(f"{code!r} is not a currency paycore takes")
    typed = text.strip()
    whole, point, fraction = typed.partition(".")
    if not _digits(whole) or (point and not _digits(fraction)):
        how = (f"type whole {code}, as in 25" if places == 0 else
               f"type digits and a point before the decimals, as in 25.{'5'.ljust(places, '0')}")
        raise AmountNotReadable(f"{typed!r} is not an amount: {how} (no sign, no separators)")
    if len(whole.lstrip("0")) > len(str(max_amount_minor(code))):  # never past int()'s digit limit
        raise AmountNotReadable(f"the amount is more than {format_amount(max_amount_minor(code), code)}")
    if len(fraction) > places:
        plural = "s" if places != 1 else ""
        raise AmountNotReadable(f"{code} has {places} decimal{plural}, not {len(fraction)}" if places
                                else f"{code} has no decimals")
    minor: int = int(whole) * 10**places + (int(fraction.ljust(places, "0")) if places else 0)
    if minor <= 0:
        raise AmountNotReadable("the amount must be more than zero")
    if minor > max_amount_minor(code):
        raise AmountNotReadable(f"the amount is more than {format_amount(max_amount_minor(code), code)}")
    return minor
