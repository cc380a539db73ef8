"""faust-streaming, patched where its start-up loses records (an alert lost is a page lost).

faust-streaming 0.15.3 (and its master; upstream issue #596) pauses a partition only in its
own bookkeeping: the consumer thread still fetches it, and faust drops what it drains of a
paused partition. Three ways that lost alerts after a (re)start, backlog or not -- seen on
the local broker and in CI (tests/incidents/test_incident_agent.py):

1. faust hands the consumer thread its *live* set of active partitions. When recovery has
   read the changelog it pauses the changelog partitions, the set becomes empty while the
   stream partitions are still paused, and aiokafka reads an empty set as "every
   partition": the stream records it drains are dropped, its position is past them, and
   only a seek to a committed offset brings them back (a partition with none never does).
2. Recovery ends with ``resume_partitions(streams)``, ``perform_seek()`` (one offset lookup
   per partition, awaited one by one) and ``flow_control.resume()``, which clears every
   stream queue: what was fetched from the sought offsets meanwhile is queued, cleared, and
   never read again.
3. Records processed during that seek may be committed meanwhile; the seek then resets
   faust's committed offset to the older value it looked up, the acked offsets start past a
   gap, and faust never commits that partition again.

:class:`Consumer` hands the thread a copy of the set (1); :class:`Recovery` seeks while the
stream partitions are paused and resumes them with no await before the queues are cleared
(2, 3). :func:`faust_app` makes a faust.App with both.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import faust
from faust.app.base import App as FaustApp
from faust.tables.manager import TableManager as FaustTableManager
from faust.tables.recovery import Recovery as FaustRecovery
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.transports import TransportT


class Consumer(faust_aiokafka.Consumer):
    async def _getmany(self, active_partitions: set[TP] | None, timeout: float) -> Any:  # noqa: ASYNC109 -- faust's
        # A copy: the consumer thread waits with it while faust pauses and resumes partitions.
        fixed = None if active_partitions is None else set(active_partitions)
        return await super()._getmany(fixed, timeout)


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer


class Recovery(FaustRecovery):
    async def on_recovery_completed(self, generation_id: int = 0) -> None:
        """faust's own, reordered: seek, then resume the stream partitions, clear, resume flow."""
        consumer = self.app.consumer
        self.log.info("Restore complete!")
        await self.app.on_rebalance_complete.send()
        self._set_recovery_ended()
        callbacks = [asyncio.ensure_future(table.on_recovery_completed(self.actives_for_table[table],
                                                                        self.standbys_for_table[table]))
                     for table in self.tables.values()]
        if callbacks:
            await asyncio.wait(callbacks)
        assignment = consumer.assignment()
        if assignment and self.app.consumer_generation_id == generation_id:
            self.log.info("Seek stream partitions to committed offsets.")
            await self._wait(consumer.perform_seek(), timeout=self.app.conf.broker_request_timeout)
        if self.app.consumer_generation_id != generation_id:
            # Another rebalance began meanwhile; it runs a recovery of its own.
            self.log.warning("Recovery rebalancing again: generation %r, recovered %r",
                             self.app.consumer_generation_id, generation_id)
            return
        # From here to the clear no await: nothing can be queued only to be thrown away.
        consumer.resume_partitions({tp for tp in assignment if not self._is_changelog_tp(tp)})
        self.completed.set()
        self.app.flow_control.resume()
        consumer.resume_flow()
        await cast(FaustApp, self.app)._fetcher.maybe_start()
        self.tables.on_actives_ready()
        if not self.app.assignor.assigned_standbys():
            self.tables.on_standbys_ready()
        self.app.on_rebalance_end()
        self.log.info("Worker ready")


class TableManager(FaustTableManager):
    @property
    def recovery(self) -> FaustRecovery:
        if self._recovery is None:
            self._recovery = Recovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery


class App(faust.App):
    def _new_transport(self) -> TransportT:
        return Transport(self.conf.broker_consumer, self)


def faust_app(app_id: str, **settings: Any) -> faust.App:
    """``faust.App(app_id, **settings)`` with :class:`Consumer` and :class:`Recovery`."""
    return App(app_id, TableManager=TableManager, **settings)


def recovered(app: faust.App) -> bool:
    """Whether ``app`` has recovered its tables (once; faust starts its timers after that)."""
    return bool(cast(FaustTableManager, app.tables).recovery.completed.is_set())
