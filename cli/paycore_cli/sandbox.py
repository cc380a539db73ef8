"""The local provider sandbox as the ``paycore`` command starts it: its settings, app and built-in account.

The sandbox package is imported only when one of these functions runs.
"""

from __future__ import annotations

import importlib
from typing import Any

from paycore.config import ConfigError
from paycore_cli.common import CommandError

# The local sandbox's built-in development account (not secrets).
SANDBOX_ACCOUNT = "acct_store"
SANDBOX_ENVIRONMENT = "test"
SANDBOX_API_KEY = "sk_test_acct_store_local"


def sandbox_settings() -> Any:
    try:
        module = importlib.import_module("paycore_sandbox.settings")
    except ModuleNotFoundError as exc:
        if exc.name and "paycore_sandbox".startswith(exc.name):
            raise CommandError("cannot import paycore_sandbox: the service package is not installed") from exc
        raise
    try:
        return module.SandboxSettings.from_env()
    except ConfigError:
        raise
    except ValueError as exc:  # the sandbox reports its settings errors as ValueError
        raise ConfigError("sandbox settings", str(exc)) from exc


def sandbox_app() -> Any:
    """App factory for the sandbox: its settings from the environment."""
    return importlib.import_module("paycore_sandbox.app").create_app(sandbox_settings())


def sandbox_webhook_secret() -> str:
    """The local sandbox's built-in webhook secret for acct_store (a development value)."""
    from paycore_sandbox.settings import SandboxSettings

    for acct in SandboxSettings.default().accounts:
        if acct.account == SANDBOX_ACCOUNT and acct.environment == SANDBOX_ENVIRONMENT:
            return acct.webhook_secret
    raise CommandError("the sandbox has no built-in acct_store test account")
