"""The short seeded chaos run CI keeps for Stripe (tests/chaos/short_run.py says what every one checks).

Shorter than Cardco's (the same code path, about 30 orders), one kill per kind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.short_run import short_run

# As tests/chaos/test_chaos_run.py's SEEDS: a seed that finds a defect is added here.
SEEDS = [20261202]


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
async def test_a_short_seeded_stripe_chaos_run_keeps_every_money_invariant(
        embedded_dir: Path, seed: int) -> None:
    await short_run(embedded_dir, provider="stripe", seed=seed, orders=30, clients=6, kills=1)
