"""When services and the database die.

The plan is drawn from ``options.rng("kills")`` as points of progress (the
share of orders done), so a run kills at the same moments of its load
whatever the machine's speed: for each service kind, ``options.kills`` kills
somewhere in the middle of the load, going round its instances from one the
seed picks (so with at least as many kills as instances, every instance of
the kind dies once), and, with ``options.db_kill``, one ``kill -9`` of the
PostgreSQL postmaster around the middle, down for 2 to 5 seconds.

Each planned kill's outcome is recorded in ``record.extra["kill_plan"]``:
``carried out``, ``failed: ...`` (it did not come back: the stack also counts
it as exited) or ``not carried out: the load ended at N %``; the report counts
every planned kill that was not carried out.

Kills run as their moments come without waiting for earlier ones to finish
(a restart takes seconds); the stack lets only one kill of an instance run at
a time. A restart that fails does not stop the run: the stack records the
instance as exited, because a service that does not come back is what the
report must show.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from paycore_devstack.chaos.load import Progress
from paycore_devstack.chaos.model import ChaosOptions, RunRecord
from paycore_devstack.chaos.stack import ChaosStack

log = logging.getLogger("paycore.chaos")

SERVICE_KILLS_BETWEEN = (0.05, 0.85)  # not before the load has started, nor after it has ended
DB_KILL_BETWEEN = (0.3, 0.7)  # in the thick of it
DB_DOWN_S = (2.0, 5.0)
DATABASE = "postgres"
CARRIED_OUT = "carried out"
NOT_REACHED = "not reached"


@dataclass(frozen=True)
class PlannedKill:
    at: float  # the share of orders done when it happens
    target: str  # an instance name, or "postgres"
    down_s: float | None = None  # for the database: how long it stays down


def plan(kinds: dict[str, list[str]], options: ChaosOptions) -> list[PlannedKill]:
    """The run's kills, in order of progress; the same for the same seed and kinds."""
    rng = options.rng("kills")
    kills: list[PlannedKill] = []
    for kind in sorted(kinds):  # sorted: the draws do not depend on the stack's start order
        instances = sorted(kinds[kind])
        first = rng.randrange(len(instances))
        for n in range(options.kills):
            target = instances[(first + n) % len(instances)]
            kills.append(PlannedKill(rng.uniform(*SERVICE_KILLS_BETWEEN), target))
    if options.db_kill:
        kills.append(PlannedKill(rng.uniform(*DB_KILL_BETWEEN), DATABASE, rng.uniform(*DB_DOWN_S)))
    return sorted(kills, key=lambda k: (k.at, k.target))


async def run(stack: ChaosStack, options: ChaosOptions, record: RunRecord, progress: Progress) -> None:
    """Carry out the plan as the load progresses; returns when it is done or the load ended.

    Kills already under way when the load ends are waited for (each is bounded by
    the stack's own deadlines), so the system is whole again before it settles.
    """
    kills = plan(stack.kinds(), options)
    entries: list[dict[str, Any]] = [
        {"at": round(k.at, 4), "target": k.target, **({"down_s": round(k.down_s, 2)} if k.down_s else {}),
         "outcome": NOT_REACHED}
        for k in kills
    ]
    record.extra["kill_plan"] = entries
    log.info("kill plan: %s", ", ".join(f"{k.target}@{k.at:.2f}" for k in kills) or "none")
    in_flight: set[asyncio.Task[None]] = set()
    try:
        for done, (kill, entry) in enumerate(zip(kills, entries, strict=True)):
            if not await progress.reached(kill.at):
                skipped = len(kills) - done
                log.warning("the load ended at %.0f%%; %d planned kill(s) not carried out",
                            100 * progress.fraction, skipped)
                for left in entries[done:]:
                    left["outcome"] = f"not carried out: the load ended at {100 * progress.fraction:.0f}%"
                break
            log.info("progress %.0f%%: killing %s", 100 * progress.fraction, kill.target)
            entry["outcome"] = "under way"
            task = asyncio.create_task(_carry_out(stack, kill, entry), name=f"kill-{kill.target}")
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
    finally:
        if in_flight:
            await asyncio.gather(*in_flight, return_exceptions=True)


async def _carry_out(stack: ChaosStack, kill: PlannedKill, entry: dict[str, Any]) -> None:
    try:
        if kill.target == DATABASE:
            assert kill.down_s is not None
            await stack.kill_database(kill.down_s)
        else:
            await stack.kill(kill.target)
    except Exception as exc:
        # The stack recorded it (an instance that does not come back counts as exited).
        log.exception("the kill of %s failed", kill.target)
        entry["outcome"] = f"failed: {type(exc).__name__}: {exc}"[:300]
    else:
        entry["outcome"] = CARRIED_OUT


def not_carried_out(record: RunRecord) -> list[dict[str, Any]]:
    """The planned kills that did not happen as planned (skipped, failed or never finished)."""
    return [k for k in record.extra.get("kill_plan", ()) if k.get("outcome") != CARRIED_OUT]
