"""A package that does not ship joins the registry by ``register`` alone (``conftest.py``'s one
line registers Payzo), and nothing shipped names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from paycore.providers import registry
from tests.fourth_provider import provider as payzo

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("libs", "services", "cli", "devstack", "harness", "tools", "bench", "deploy", "docker-compose.yml")


def test_a_registered_package_is_known_by_name_but_never_listed_as_shipped() -> None:
    assert registry.PACKAGES["payzo"] is payzo.PROVIDER
    assert registry.PROVIDERS["payzo"] == payzo.PROVIDER.client
    assert payzo.PROVIDER not in registry.PROVIDER_PACKAGES  # the settings, docs and `paycore up` list
    assert registry.notification_format("payzo:acct_store:test").name == "payzo"


def test_a_name_is_registered_once() -> None:
    with pytest.raises(ValueError, match="already registered"):
        registry.register(payzo.PROVIDER)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.PACKAGES["cardco"])


def test_no_shipped_file_names_the_fourth_provider() -> None:
    tops = [ROOT / top for top in SHIPPED]
    files = [p for top in tops for p in ([top] if top.is_file() else top.rglob("*"))
             if p.is_file() and ".venv" not in p.parts and "node_modules" not in p.parts
             and p.suffix in (".py", ".md", ".toml", ".yml", ".yaml", ".json")]
    assert len(files) > 100
    assert [str(p.relative_to(ROOT)) for p in files if "payzo" in p.read_text(encoding="utf-8").lower()] == []
