"""Started attempts whose send's answer may still arrive: wait until the settle time has passed
(the call and record budgets and the processing allowance after the first send), then they are
Unknown work. Nothing is looked up or sent meanwhile."""

from __future__ import annotations

from paycore.domain import PassKind
from paycore_recovery.rescuers.base import Rescuer


class SettlingRescuer(Rescuer):
    kind = PassKind.SETTLING  # decide_pass finishes it until the settle time; nothing to gather
