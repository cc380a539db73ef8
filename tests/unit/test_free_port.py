"""free_port: below the ephemeral range, and each parallel test worker in its own slice."""

from __future__ import annotations

import pytest

from paycore_devstack._process import LOWEST_PORT, _ephemeral_range, _share, free_port


def test_outside_a_parallel_run_the_whole_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert _share(15_000, 32_768) == range(15_000, 32_768)


def test_workers_get_disjoint_slices_that_cover_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    slices = []
    for index in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
        slices.append(set(_share(15_000, 32_768)))
    assert not (slices[0] & slices[1] or slices[1] & slices[2] or slices[0] & slices[2])
    assert min(slices[0]) == 15_000 and len(set().union(*slices)) >= 32_768 - 15_000 - 2


def test_a_worker_picks_only_from_its_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    mine = _share(LOWEST_PORT, _ephemeral_range()[0])
    assert all(free_port() in mine for _ in range(20))


@pytest.mark.parametrize(("worker", "count"), [("master", "3"), ("gw0", "1"), ("gwx", "3"), ("gw1", "")])
def test_odd_worker_settings_mean_the_whole_range(monkeypatch: pytest.MonkeyPatch, worker: str,
                                                   count: str) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)
    assert _share(15_000, 32_768) == range(15_000, 32_768)
