"""Cardco provider sandbox: a faithful, fault-injecting implementation of
``docs/providers/cardco.md`` for tests and local runs.

``create_app(SandboxSettings.from_env())`` is the whole public surface; the
control endpoints under ``/_sandbox/`` are documented in :mod:`paycore_sandbox.control`.
"""

from paycore_sandbox.app import create_app
from paycore_sandbox.settings import SandboxAccount, SandboxSettings

__all__ = ["SandboxAccount", "SandboxSettings", "create_app"]
