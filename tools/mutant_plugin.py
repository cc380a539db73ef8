"""A pytest plugin for ``tools.mutate_generated``: per-test coverage contexts, durations, order.

Loaded with ``-p tools.mutant_plugin`` in the generated run's own pytest processes only:

- under ``coverage run``, each test's setup, call and teardown are recorded under the test's
  node id (the coverage context), so the run knows which tests execute which line;
- ``MUTANT_DURATIONS_OUT``: each test's seconds (setup, call and teardown) are written there
  as JSON when the session ends;
- ``MUTANT_ORDER``: a file of node ids, one per line; the collected tests run in that order
  (the fastest first, so a killed mutant is known soon), after the suite's own ordering.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import orjson
import pytest

_seconds: dict[str, float] = defaultdict(float)


def _switch(context: str) -> None:
    try:
        import coverage
    except ImportError:  # not a coverage run
        return
    current = coverage.Coverage.current()
    if current is not None:
        current.switch_context(context)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, None]:
    _switch(item.nodeid)
    yield
    _switch("")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds[report.nodeid] += report.duration


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    order_file = os.environ.get("MUTANT_ORDER")
    if not order_file:
        return
    rank = {nodeid: i for i, nodeid in enumerate(Path(order_file).read_text().splitlines())}
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))


def pytest_sessionfinish() -> None:
    out = os.environ.get("MUTANT_DURATIONS_OUT")
    if out:
        Path(out).write_bytes(orjson.dumps(dict(_seconds)))
