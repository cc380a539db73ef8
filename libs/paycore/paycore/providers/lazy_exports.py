"""A provider package's re-exports, each imported from its module on first use.

A package's ``__init__`` names what it re-exports and from where; its settings (``.provider``)
then load without its client or SDK, which only the first use of a client name imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` (PEP 562) of ``package``: ``exports`` maps each name to its
    module (relative to ``package``, or absolute)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    return __getattr__
