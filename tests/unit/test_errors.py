"""The library's own errors: every exception class it defines derives from ``PaycoreError``
(so a caller can tell paycore refusing something from a bug), and "the write may have
committed" is one tuple."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import paycore
from paycore.errors import DATABASE_ERRORS, MAY_HAVE_COMMITTED, OutcomeNotConfirmed, PaycoreError


def library_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined (not merely imported) in a module of the library."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(paycore.__path__, prefix="paycore."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, BaseException)
                    and value.__module__ == module.__name__):
                found[f"{module.__name__}.{name}"] = value
    return found


def test_every_exception_the_library_defines_is_a_paycore_error() -> None:
    found = library_exceptions()
    assert len(found) > 30  # the walk reached the library's modules
    outside = sorted(name for name, cls in found.items()
                     if not issubclass(cls, PaycoreError))
    assert outside == []


def test_may_have_committed_is_the_database_errors_and_an_unconfirmed_outcome() -> None:
    assert MAY_HAVE_COMMITTED == (*DATABASE_ERRORS, OutcomeNotConfirmed)
