"""The console's charts, drawn on the server as SVG geometry (no JavaScript chart library).

The overview's: two bars per hour for the last 24 hours, attempts that entered Unknown and
escalations raised. The settlements page's: two bars per day, settlement fees and exceptions
found. The templates draw the rectangles; this module only works out where they go.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paycore.currencies import format_amount
from paycore_console.inspection import HourCount
from paycore_console.settlements import Day

WIDTH = 720
HEIGHT = 160
TOP = 10  # room above the tallest bar
BOTTOM = 20  # room for the hour labels
LEFT = 30  # room for the scale


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    series: str  # "unknown" | "escalations"; "fees" | "exceptions"
    value: int
    title: str  # the tooltip (an SVG <title>), also what a screen reader says


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    baseline: float
    left: int
    peak: int
    bars: tuple[Bar, ...]
    labels: tuple[tuple[float, str], ...]  # every sixth hour: x and "HH:00"


def hourly_chart(hours: Sequence[HourCount]) -> Chart:
    peak = max([1, *(h.entered_unknown for h in hours), *(h.escalations_raised for h in hours)])
    plot = HEIGHT - TOP - BOTTOM
    slot = (WIDTH - LEFT) / max(1, len(hours))
    bar = slot * 0.4
    baseline = float(HEIGHT - BOTTOM)
    bars: list[Bar] = []
    labels: list[tuple[float, str]] = []
    for i, h in enumerate(hours):
        x0 = LEFT + i * slot + slot * 0.1
        hour = h.hour.strftime("%H:00")
        series_values = (("unknown", h.entered_unknown, "entered Unknown"),
                         ("escalations", h.escalations_raised, "escalations raised"))
        for j, (series, value, what) in enumerate(series_values):
            height = plot * value / peak
            bars.append(Bar(round(x0 + j * bar, 1), round(baseline - height, 1), round(bar, 1),
                            round(height, 1), series, value, f"{hour} UTC: {value} {what}"))
        if i % 6 == 0:
            labels.append((round(x0, 1), hour))
    return Chart(WIDTH, HEIGHT, baseline, LEFT, peak, tuple(bars), tuple(labels))


@dataclass(frozen=True)
class DailyChart:
    """Fees and exceptions per day, each series on its own scale (money and a count)."""

    width: int
    height: int
    baseline: float
    left: int
    currency: str | None  # the fees' currency; None: no batch in the window (exceptions only)
    fee_peak_minor: int
    exception_peak: int
    bars: tuple[Bar, ...]
    labels: tuple[tuple[float, str], ...]  # about every week: x and "MM-DD"


def daily_chart(days: Sequence[Day], currency: str | None) -> DailyChart:
    """Two bars a day: the fees of ``currency``'s batches (drawn by their size: a fee refunded is
    negative) and the settlement exceptions found."""
    fees = [d.fees_minor.get(currency, 0) if currency is not None else 0 for d in days]
    fee_peak = max([1, *(abs(f) for f in fees)])
    exception_peak = max([1, *(d.exceptions for d in days)])
    plot = HEIGHT - TOP - BOTTOM
    slot = (WIDTH - LEFT) / max(1, len(days))
    bar = slot * 0.4
    baseline = float(HEIGHT - BOTTOM)
    step = max(1, round(len(days) / 5))
    bars: list[Bar] = []
    labels: list[tuple[float, str]] = []
    for i, (d, fee) in enumerate(zip(days, fees, strict=True)):
        x0 = LEFT + i * slot + slot * 0.1
        day = d.day.isoformat()
        fee_text = format_amount(fee, currency) if currency is not None else "no fees"
        series_values = (("fees", fee, abs(fee) / fee_peak, f"{day}: fees {fee_text}"),
                         ("exceptions", d.exceptions, d.exceptions / exception_peak,
                          f"{day}: {d.exceptions} exception(s) found"))
        for j, (series, value, share, title) in enumerate(series_values):
            height = plot * share
            bars.append(Bar(round(x0 + j * bar, 1), round(baseline - height, 1), round(bar, 1),
                            round(height, 1), series, value, title))
        if i % step == 0:
            labels.append((round(x0, 1), d.day.strftime("%m-%d")))
    return DailyChart(WIDTH, HEIGHT, baseline, LEFT, currency, fee_peak, exception_peak, tuple(bars),
                      tuple(labels))
