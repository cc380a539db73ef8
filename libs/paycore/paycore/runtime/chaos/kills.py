"""When services and the database die (CONTRACT; to implement).

The plan is drawn from ``options.rng("kills")`` as points of progress (the
share of orders done), so a run kills at the same moments of its load
whatever the machine's speed.
"""

from __future__ import annotations

from paycore.runtime.chaos.load import Progress
from paycore.runtime.chaos.model import ChaosOptions, RunRecord
from paycore.runtime.chaos.stack import ChaosStack


async def run(stack: ChaosStack, options: ChaosOptions, record: RunRecord, progress: Progress) -> None:
    raise NotImplementedError
