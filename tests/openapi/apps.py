"""The three HTTP services as the OpenAPI tests build them, and the routes an app serves."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from starlette.applications import Starlette
from starlette.routing import Route

from paycore.clock import SystemClock
from paycore.config import ProviderAccountConfig, Secret, Settings
from paycore.providers.stripe.provider import API_VERSION as STRIPE_API_VERSION
from paycore_checkout.app import create_app as create_checkout_app
from paycore_checkout.openapi import document as checkout_document
from paycore_console.api import ENDPOINTS
from paycore_console.app import create_app as create_console_app
from paycore_console.openapi import document as console_document
from paycore_console.settings import ConsoleSettings
from paycore_webhooks.app import create_app as create_webhooks_app
from paycore_webhooks.app import receivers_for
from paycore_webhooks.openapi import document as webhooks_document
from tests.console.conftest import SECRET as CONSOLE_SECRET
from tests.support.stack import checkout_settings
from tests.support.webhooks import intake_settings
from tests.unit.test_adyen_notifications import account as adyen_account

UNUSED_DSN = "postgresql://unused/x"
STRIPE_SECRET = "whsec_store_5f1f0b2c9d8e7a6b"
_PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")


def stripe_account() -> ProviderAccountConfig:
    return ProviderAccountConfig(provider="stripe", account="acct_store", environment="test",
                                 base_url="http://127.0.0.1:9", api_key=Secret("sk_test_x"),
                                 webhook_secret=Secret(STRIPE_SECRET), api_version=STRIPE_API_VERSION)


def all_providers(settings: Settings) -> Settings:
    """Cardco (the sandbox's accounts), Stripe and Adyen: a route for each."""
    return dataclasses.replace(settings, accounts=(*settings.accounts, stripe_account(), adyen_account()))


def webhooks_settings(sandbox_url: str, db_dsn: str) -> Settings:
    return all_providers(intake_settings(sandbox_url, db_dsn))


def console_settings(db_dsn: str) -> ConsoleSettings:
    return ConsoleSettings.from_env({"PAYCORE_DATABASE_URL": db_dsn,
                                     "PAYCORE_CONSOLE_SECRET": CONSOLE_SECRET})


def served_operations(app: Starlette, *, only: str | None = None) -> set[tuple[str, str]]:
    """``(method, OpenAPI path)`` of every route (HEAD is Starlette's shadow of GET); ``only`` keeps
    the paths that start with it."""
    return {(method.lower(), _PARAM.sub(r"{\1}", route.path))
            for route in app.routes if isinstance(route, Route)
            if only is None or route.path.startswith(only) or route.path == "/openapi.json"
            for method in (route.methods or ()) if method != "HEAD"}


def documented_operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method, path) for path, ops in document["paths"].items() for method in ops}


def each_app() -> dict[str, tuple[Starlette, dict[str, Any], str | None]]:
    """Each service's app (never started: no database needed), its document, and which of its
    routes the document covers (the console's pages are HTML for people, not the API)."""
    checkout = checkout_settings("http://127.0.0.1:9", UNUSED_DSN)
    webhooks = webhooks_settings("http://127.0.0.1:9", UNUSED_DSN)
    return {
        "checkout": (create_checkout_app(checkout), checkout_document(), None),
        "webhooks": (create_webhooks_app(webhooks),
                     webhooks_document(receivers_for(webhooks, SystemClock())), None),
        "console": (create_console_app(console_settings(UNUSED_DSN)), console_document(ENDPOINTS), "/api/"),
    }
