"""The overview's chart, drawn on the server as SVG geometry (no JavaScript chart library).

Two bars per hour for the last 24 hours: attempts that entered Unknown, and escalations raised.
The template draws the rectangles; this module only works out where they go.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paycore_console.inspection import HourCount

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
    series: str  # "unknown" | "escalations"
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
