"""One rescuer per kind of stuck work (:class:`paycore.domain.PassKind`), as Kill Bill's janitor
keeps one task per kind: each decides with :func:`paycore.domain.decide_pass` and writes with the
library's one writer. The sweep (:mod:`paycore_recovery.loop`) claims due attempts in the
reference's order and hands each to the rescuer of its kind."""

from __future__ import annotations

from paycore.domain import PassKind
from paycore_recovery.rescuers.base import Rescuer, Worker
from paycore_recovery.rescuers.customer_action import CustomerActionRescuer
from paycore_recovery.rescuers.not_started import NotStartedRescuer
from paycore_recovery.rescuers.settling import SettlingRescuer
from paycore_recovery.rescuers.unknown import UnknownRescuer

RESCUERS: tuple[type[Rescuer], ...] = (
    NotStartedRescuer, CustomerActionRescuer, SettlingRescuer, UnknownRescuer)


def rescuers_for(worker: Worker) -> dict[PassKind, Rescuer]:
    """One rescuer of each kind for ``worker``."""
    made = {cls.kind: cls(worker) for cls in RESCUERS}
    assert set(made) == set(PassKind), "a kind of stuck work without its rescuer"
    return made
