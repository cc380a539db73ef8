"""The whole system as processes that a chaos run can kill and restart (CONTRACT; to implement).

:class:`ChaosStack` starts, in a run directory under ``options.out_dir``: embedded
PostgreSQL (its own data directory), the local Tansu broker, migrations, the
sandbox, two checkouts, the webhook intake, two recovery workers, the
dispatcher, and the fulfillment and email consumers; each a child process
started through the ``paycore`` CLI, its output in ``logs/<instance>.log``.
"""

from __future__ import annotations

from types import TracebackType

from paycore.runtime.chaos.model import ChaosOptions, Endpoints, RunRecord


class ChaosStack:
    def __init__(self, options: ChaosOptions, record: RunRecord) -> None:
        self.options = options
        self.record = record

    async def __aenter__(self) -> ChaosStack:
        raise NotImplementedError

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        raise NotImplementedError

    @property
    def endpoints(self) -> Endpoints:
        raise NotImplementedError

    def kinds(self) -> dict[str, list[str]]:
        """Service kind -> its instances, e.g. ``{"checkout": ["checkout-1", "checkout-2"], ...}``."""
        raise NotImplementedError

    async def kill(self, instance: str) -> None:
        """SIGKILL ``instance``, then start it again and wait until it is ready (both recorded)."""
        raise NotImplementedError

    async def kill_database(self, down_s: float) -> None:
        """``kill -9`` the postmaster; after ``down_s`` restart it on the same data and port."""
        raise NotImplementedError

    def exited_on_own(self) -> list[tuple[str, int]]:
        """Instances that exited without being killed by the run: (name, returncode)."""
        raise NotImplementedError
