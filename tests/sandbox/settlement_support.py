"""What the settlement tests share: a known day on the sandbox clock, the controls, CSV by name."""

from __future__ import annotations

import csv
import datetime as dt
import io
from typing import Any

import httpx

from tests.sandbox.support import advance


async def next_noon(client: httpx.AsyncClient) -> dt.date:
    """Move the sandbox clock to noon UTC of the next day, so nothing a test does crosses
    midnight; answers that day."""
    now = (await client.get("/_sandbox/clock")).json()["now"]
    day = dt.datetime.fromtimestamp(now, dt.UTC).date() + dt.timedelta(days=1)
    noon = dt.datetime.combine(day, dt.time(12), dt.UTC).timestamp()
    await advance(client, noon - now)
    return day


async def control(client: httpx.AsyncClient, what: str, body: dict[str, Any],
                  status: int = 200) -> Any:
    response = await client.post(f"/_sandbox/settlements/{what}", json=body)
    assert response.status_code == status, response.text
    return response.json()


async def close(client: httpx.AsyncClient, day: dt.date, **narrow: str) -> list[dict[str, Any]]:
    closed: list[dict[str, Any]] = (await control(client, "close",
                                                  {"date": day.isoformat(), **narrow}))["data"]
    return closed


def rows_of(text: str) -> list[dict[str, str]]:
    """A CSV by header name."""
    return list(csv.DictReader(io.StringIO(text)))


def fee(gross: int) -> int:
    return round(gross * 0.014) + 25
