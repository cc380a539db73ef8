"""Operator accounts against real PostgreSQL: adding, signing in, throttling, disabling, the CLI.

Time is the fake clock's (``now`` is passed in): the throttle's window passes without sleeping.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Literal

import asyncpg
import pytest
from argon2 import PasswordHasher

from paycore.clock import FakeClock
from paycore.operator_actions import list_actions
from paycore.operators import (
    PASSWORD_HASHER,
    AuthenticationFailed,
    LoginThrottle,
    OperatorAccountRefused,
    OperatorNotFound,
    Role,
    TooManyAttempts,
    add_operator,
    authenticate,
    disable_operator,
    dummy_hash,
    get_operator,
    list_operators,
)
from paycore_cli.main import main
from paycore_console.credentials import ConsoleAuth, ConsoleAuthSettings, SessionRefused

PASSWORD = "correct horse battery"
CLIENT = "203.0.113.7"
OTHER_CLIENT = "198.51.100.9"


class RecordingHasher(PasswordHasher):
    """The real hasher; it also remembers which stored hash each sign-in was checked against."""

    def __init__(self) -> None:
        super().__init__()
        self.checked: list[str] = []

    def verify(self, hash: str | bytes, password: str | bytes) -> Literal[True]:
        self.checked.append(hash if isinstance(hash, str) else hash.decode())
        return super().verify(hash, password)


async def _add(pool: asyncpg.Pool, clock: FakeClock, name: str = "alice", role: str = "operator",
               password: str = PASSWORD) -> None:
    await add_operator(pool, name, password, role, clock.now(), operator="root")


async def _failures(pool: asyncpg.Pool) -> int:
    count: int = await pool.fetchval("SELECT count(*) FROM operator_login_failures")
    return count


# --------------------------------------------------------------------------- adding and signing in


async def test_an_added_operator_signs_in_and_the_addition_is_recorded(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    change = await add_operator(pool, "alice", PASSWORD, "viewer", clock.now(), operator="root")
    added = change.operator
    assert (added.name, added.role, added.active) == ("alice", Role.VIEWER, True)

    signed_in = await authenticate(pool, "alice", PASSWORD, CLIENT, clock.now())
    assert signed_in == added

    stored = await pool.fetchval("SELECT password_hash FROM operators WHERE name = 'alice'")
    assert stored.startswith("$argon2id$") and PASSWORD not in stored
    [recorded] = await list_actions(pool, operator="root")
    assert recorded == change.recorded  # what the call returns is what was recorded
    assert (recorded.action.value, recorded.target_operator, recorded.reason) == (
        "operator-add", "alice", None)
    assert recorded.state_after == {"role": "viewer", "disabled_at": None}
    assert PASSWORD not in json.dumps(recorded.as_json())


async def test_a_wrong_password_fails_and_is_counted(pool: asyncpg.Pool, clock: FakeClock) -> None:
    await _add(pool, clock)
    with pytest.raises(AuthenticationFailed) as failed:
        await authenticate(pool, "alice", PASSWORD + "!", CLIENT, clock.now())
    assert str(failed.value) == "unknown operator or wrong password"
    assert await _failures(pool) == 1



async def test_an_overlong_password_fails_without_being_hashed_whole(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    hasher = RecordingHasher()
    await add_operator(pool, "alice", PASSWORD, "operator", clock.now(), operator="root", hasher=hasher)
    with pytest.raises(AuthenticationFailed):
        await authenticate(pool, "alice", PASSWORD + "x" * 2000, CLIENT, clock.now(), hasher=hasher)
    assert hasher.checked == [dummy_hash(hasher)]
    assert await _failures(pool) == 1

async def test_an_unknown_name_fails_the_same_way_after_checking_a_dummy_hash(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    hasher = RecordingHasher()
    await add_operator(pool, "alice", PASSWORD, "operator", clock.now(), operator="root", hasher=hasher)
    with pytest.raises(AuthenticationFailed) as wrong:
        await authenticate(pool, "alice", "not the password", CLIENT, clock.now(), hasher=hasher)
    with pytest.raises(AuthenticationFailed) as unknown:
        await authenticate(pool, "mallory", PASSWORD, CLIENT, clock.now(), hasher=hasher)
    assert str(unknown.value) == str(wrong.value)
    # The unknown name cost a full argon2 verification, with the same parameters as a real one.
    alice_hash = await pool.fetchval("SELECT password_hash FROM operators WHERE name = 'alice'")
    assert hasher.checked == [alice_hash, dummy_hash(hasher)]
    assert dummy_hash(hasher).split("$")[3] == alice_hash.split("$")[3]  # m=…,t=…,p=…
    # Unknown names are throttled like known ones.
    assert await _failures(pool) == 2


async def test_a_disabled_operator_cannot_sign_in_even_with_the_right_password(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    hasher = RecordingHasher()
    await add_operator(pool, "alice", PASSWORD, "operator", clock.now(), operator="root", hasher=hasher)
    clock.advance(60)
    change = await disable_operator(pool, "alice", clock.now(), operator="root", reason="left the team")
    disabled = change.operator
    assert disabled.disabled_at == clock.now() and not disabled.active
    with pytest.raises(AuthenticationFailed):
        await authenticate(pool, "alice", PASSWORD, CLIENT, clock.now(), hasher=hasher)
    assert hasher.checked == [dummy_hash(hasher)]  # never the account's own hash

    [disabling, _] = await list_actions(pool, operator="root")
    assert disabling == change.recorded
    assert (disabling.action.value, disabling.target_operator, disabling.reason) == (
        "operator-disable", "alice", "left the team")
    with pytest.raises(OperatorAccountRefused, match="disabled already"):
        await disable_operator(pool, "alice", clock.now(), operator="root", reason="again")
    with pytest.raises(OperatorNotFound):
        await disable_operator(pool, "nobody", clock.now(), operator="root", reason="typo")
    assert len(await list_actions(pool, operator="root")) == 2  # refusals record nothing


async def test_disabling_needs_a_reason_and_an_operator(pool: asyncpg.Pool, clock: FakeClock) -> None:
    await _add(pool, clock)
    with pytest.raises(OperatorAccountRefused, match="needs a reason"):
        await disable_operator(pool, "alice", clock.now(), operator="root", reason="  ")
    with pytest.raises(OperatorAccountRefused, match="operator name is required"):
        await disable_operator(pool, "alice", clock.now(), operator="", reason="left")
    assert (await get_operator(pool, "alice")).active  # rolled back with the record


# --------------------------------------------------------------------------- the rules


@pytest.mark.parametrize(("name", "password", "role", "refusal"), [
    ("alice", "short pass", "operator", "at least 12 characters"),
    ("alice", "x" * 1025, "operator", "at most 1024"),
    ("alice-the-operator", "Alice-The-Operator", "operator", "must not be the operator's name"),
    ("alice", PASSWORD, "admin", "role must be 'viewer', 'operator' or 'refunder'"),
    ("", PASSWORD, "viewer", "operator name is required"),
    ("a" * 65, PASSWORD, "viewer", "longer than 64"),
    ("ali\x00ce", PASSWORD, "viewer", "must be printable"),
    ("oidc:alice", PASSWORD, "viewer", "reserved"),
])
async def test_the_rules_refuse_and_nothing_is_stored(
    pool: asyncpg.Pool, clock: FakeClock, name: str, password: str, role: str, refusal: str,
) -> None:
    with pytest.raises(OperatorAccountRefused, match=refusal):
        await add_operator(pool, name, password, role, clock.now(), operator="root")
    assert await list_operators(pool) == []
    assert await list_actions(pool) == []


async def test_a_name_is_taken_once(pool: asyncpg.Pool, clock: FakeClock) -> None:
    await _add(pool, clock)
    with pytest.raises(OperatorAccountRefused, match="exists already"):
        await add_operator(pool, " alice ", "another password", "viewer", clock.now(), operator="root")
    assert [o.role for o in await list_operators(pool)] == [Role.OPERATOR]
    assert len(await list_actions(pool)) == 1


async def test_the_database_refuses_what_the_library_refuses(pool: asyncpg.Pool, clock: FakeClock) -> None:
    # A writer that skips paycore.operators still cannot store a bad role, name or a plain password.
    for name, role, password_hash in (("bob", "admin", "$argon2id$x"), ("oidc:bob", "viewer", "$argon2id$x"),
                                      ("bob", "viewer", "plain text")):
        with pytest.raises(asyncpg.CheckViolationError):
            await pool.execute("INSERT INTO operators (name, role, password_hash, created_at) "
                               "VALUES ($1, $2, $3, $4)", name, role, password_hash, clock.now())


# --------------------------------------------------------------------------- throttling


async def test_after_max_failures_the_name_and_client_are_refused_until_the_window_passes(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    await _add(pool, clock)
    throttle = LoginThrottle(max_failures=3, window_s=600)
    for _ in range(3):
        with pytest.raises(AuthenticationFailed):
            await authenticate(pool, "alice", "wrong password", CLIENT, clock.now(), throttle=throttle)
        clock.advance(10)
    # The right password is refused too, saying when to come back: 600 s after the first failure.
    with pytest.raises(TooManyAttempts) as refused:
        await authenticate(pool, "alice", PASSWORD, CLIENT, clock.now(), throttle=throttle)
    assert refused.value.retry_after_s == 600 - 30
    assert await _failures(pool) == 3  # a refused sign-in is not counted: no lock-out extension

    # Another client is not locked out by this one's failures.
    assert (await authenticate(pool, "alice", PASSWORD, OTHER_CLIENT, clock.now(),
                               throttle=throttle)).name == "alice"

    clock.advance(600 - 30 - 1)
    with pytest.raises(TooManyAttempts) as still:
        await authenticate(pool, "alice", PASSWORD, CLIENT, clock.now(), throttle=throttle)
    assert still.value.retry_after_s == 1
    clock.advance(1)  # the first failure has left the window
    signed_in = await authenticate(pool, "alice", PASSWORD, CLIENT, clock.now(), throttle=throttle)
    assert signed_in.name == "alice"
    assert await _failures(pool) == 0  # a success clears its key's failures


async def test_an_unknown_name_is_throttled_like_a_known_one(pool: asyncpg.Pool, clock: FakeClock) -> None:
    throttle = LoginThrottle(max_failures=2, window_s=60)
    for _ in range(2):
        with pytest.raises(AuthenticationFailed):
            await authenticate(pool, "mallory", "guess guess guess", CLIENT, clock.now(), throttle=throttle)
    with pytest.raises(TooManyAttempts):
        await authenticate(pool, "mallory", "guess guess guess", CLIENT, clock.now(), throttle=throttle)


async def test_concurrent_wrong_guesses_cannot_slip_past_the_limit(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    await _add(pool, clock)
    throttle = LoginThrottle(max_failures=3, window_s=600)

    async def guess(i: int) -> str:
        try:
            await authenticate(pool, "alice", f"wrong password {i}", CLIENT, clock.now(), throttle=throttle)
        except AuthenticationFailed:
            return "failed"
        except TooManyAttempts:
            return "throttled"
        return "signed in"

    outcomes = await asyncio.gather(*(guess(i) for i in range(8)))
    assert sorted(outcomes) == ["failed"] * 3 + ["throttled"] * 5
    assert await _failures(pool) == 3


async def test_one_client_spraying_many_names_is_refused_for_every_name_until_the_window_passes(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    await _add(pool, clock)
    throttle = LoginThrottle(max_failures=3, window_s=600, max_client_failures=4)
    for i in range(4):  # one failure per name: no name reaches its own limit
        with pytest.raises(AuthenticationFailed):
            await authenticate(pool, f"guess-{i}", "wrong password", CLIENT, clock.now(), throttle=throttle)
        clock.advance(10)
    # The address is refused now, for any name, the right password included; 600 s after its first failure.
    for name, password in (("guess-9", "wrong password"), ("alice", PASSWORD)):
        with pytest.raises(TooManyAttempts) as refused:
            await authenticate(pool, name, password, CLIENT, clock.now(), throttle=throttle)
        assert refused.value.retry_after_s == 600 - 40
    assert await _failures(pool) == 4  # refusals are not counted
    # Another address is not refused for this one's spray.
    assert (await authenticate(pool, "alice", PASSWORD, OTHER_CLIENT, clock.now(),
                               throttle=throttle)).name == "alice"
    clock.advance(600 - 40)  # the first failure has left the window: three remain, under the cap
    signed_in = await authenticate(pool, "alice", PASSWORD, CLIENT, clock.now(), throttle=throttle)
    assert signed_in.name == "alice"


async def test_concurrent_guesses_of_many_names_cannot_slip_past_the_clients_cap(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    throttle = LoginThrottle(max_failures=3, window_s=600, max_client_failures=3)

    async def guess(i: int) -> str:
        try:
            await authenticate(pool, f"name-{i}", "wrong password", CLIENT, clock.now(), throttle=throttle)
        except AuthenticationFailed:
            return "failed"
        except TooManyAttempts:
            return "throttled"
        return "signed in"

    outcomes = await asyncio.gather(*(guess(i) for i in range(8)))
    assert sorted(outcomes) == ["failed"] * 3 + ["throttled"] * 5
    assert await _failures(pool) == 3


# --------------------------------------------------------------------------- rehashing


async def test_a_hash_made_with_old_parameters_is_replaced_at_the_next_sign_in(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    old = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1)
    await add_operator(pool, "alice", PASSWORD, "operator", clock.now(), operator="root", hasher=old)
    before = await pool.fetchval("SELECT password_hash FROM operators WHERE name = 'alice'")
    assert "m=8192,t=1,p=1" in before

    await authenticate(pool, "alice", PASSWORD, CLIENT, clock.now(), hasher=PASSWORD_HASHER)
    after = await pool.fetchval("SELECT password_hash FROM operators WHERE name = 'alice'")
    assert after != before and not PASSWORD_HASHER.check_needs_rehash(after)
    await authenticate(pool, "alice", PASSWORD, CLIENT, clock.now())  # the new hash verifies
    # A failed sign-in never rewrites it.
    with pytest.raises(AuthenticationFailed):
        await authenticate(pool, "alice", "wrong password!", CLIENT, clock.now(), hasher=old)
    assert await pool.fetchval("SELECT password_hash FROM operators WHERE name = 'alice'") == after


# --------------------------------------------------------------------------- the CLI


def _run(monkeypatch: pytest.MonkeyPatch, argv: list[str], stdin: str = "") -> int:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))  # a pipe: not a terminal
    return main(argv)


def test_the_cli_adds_lists_and_disables_operators_reading_the_password_from_stdin(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("PAYCORE_DATABASE_URL", db_dsn)
    assert _run(monkeypatch, ["operators", "add", "alice", "--role", "operator", "--operator", "root"],
                stdin=PASSWORD + "\n") == 0
    assert _run(monkeypatch, ["operators", "add", "victor", "--role", "viewer", "--operator", "root",
                              "--reason", "on call"], stdin="viewer's password\n") == 0
    out = capsys.readouterr().out
    assert "operator alice (operator) added by root" in out

    assert _run(monkeypatch, ["operators", "disable", "victor", "--operator", "alice",
                              "--reason", "rotation over"]) == 0
    capsys.readouterr()
    assert _run(monkeypatch, ["operators", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(o["name"], o["role"], o["disabled_at"] is not None) for o in listed] == [
        ("alice", "operator", False), ("victor", "viewer", True)]
    assert _run(monkeypatch, ["operators", "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAME", "ROLE", "CREATED", "(UTC)", "DISABLED", "(UTC)"]

    assert _run(monkeypatch, ["actions", "list", "--json"]) == 0
    actions = json.loads(capsys.readouterr().out)
    assert [(a["action"], a["operator"], a["target_operator"]) for a in actions] == [
        ("operator-disable", "alice", "victor"), ("operator-add", "root", "victor"),
        ("operator-add", "root", "alice")]

    async def sign_in() -> str:
        conn = await asyncpg.connect(db_dsn)
        try:
            return (await authenticate(conn, "alice", PASSWORD, CLIENT, FakeClock().now())).name
        finally:
            await conn.close()

    assert asyncio.run(sign_in()) == "alice"  # the password was read exactly, without its newline
    everything = capsys.readouterr()
    assert PASSWORD not in everything.out + everything.err + caplog.text


def test_a_one_shot_command_keeps_log_lines_off_its_output_unless_a_level_is_set(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAYCORE_")}
    env["PAYCORE_DATABASE_URL"] = db_dsn
    argv = ["operators", "add", "alice", "--role", "viewer", "--operator", "root"]
    added = subprocess.run([sys.executable, "-m", "paycore_cli", *argv], input=PASSWORD + "\n",
                           capture_output=True, text=True, env=env, timeout=60)
    assert (added.returncode, added.stderr) == (0, "")
    assert added.stdout == "operator alice (viewer) added by root\n"
    monkeypatch.setenv("PAYCORE_DATABASE_URL", db_dsn)
    monkeypatch.setenv("PAYCORE_LOG_LEVEL", "INFO")  # asked for: the action's log line too
    assert _run(monkeypatch, ["operators", "disable", "alice", "--operator", "root", "--reason", "gone"]) == 0
    assert any(r.name == "paycore.operator_actions" and "operator-disable" in r.getMessage()
               for r in caplog.records)


def test_the_cli_prints_the_recorded_action_as_json_for_scripts(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PAYCORE_DATABASE_URL", db_dsn)
    assert _run(monkeypatch, ["operators", "add", "alice", "--role", "viewer", "--operator", "root",
                              "--reason", "on call", "--json"], stdin=PASSWORD + "\n") == 0
    added = json.loads(capsys.readouterr().out)  # one JSON document, nothing else on stdout
    assert (added["action"], added["operator"], added["target_operator"], added["reason"]) == (
        "operator-add", "root", "alice", "on call")
    assert added["state_after"] == {"role": "viewer", "disabled_at": None}
    assert _run(monkeypatch, ["operators", "disable", "alice", "--operator", "root",
                              "--reason", "rotation over", "--json"]) == 0
    disabled = json.loads(capsys.readouterr().out)
    assert (disabled["action"], disabled["target_operator"], disabled["reason"]) == (
        "operator-disable", "alice", "rotation over")
    assert disabled["state_before"] == {"disabled_at": None} and disabled["state_after"]["disabled_at"]
    assert _run(monkeypatch, ["actions", "list", "--json"]) == 0
    recorded = json.loads(capsys.readouterr().out)
    assert [a["action_id"] for a in recorded] == [disabled["action_id"], added["action_id"]]
    # A refusal still exits non-zero and prints no JSON document.
    assert _run(monkeypatch, ["operators", "disable", "alice", "--operator", "root", "--reason", "again",
                              "--json"]) == 1
    refused = capsys.readouterr()
    assert refused.out == "" and "disabled already" in refused.err
    assert PASSWORD not in json.dumps([added, disabled])


def test_the_cli_changes_a_password_enables_changes_a_role_and_ends_sessions_each_recorded(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A leaked password does not retire the name: a new one ends the account's sessions."""
    monkeypatch.setenv("PAYCORE_DATABASE_URL", db_dsn)
    monkeypatch.setenv("PAYCORE_CONSOLE_SECRET", "c" * 40)
    assert _run(monkeypatch, ["operators", "add", "alice", "--role", "operator", "--operator", "root"],
                stdin=PASSWORD + "\n") == 0
    auth = ConsoleAuth(ConsoleAuthSettings.from_env({"PAYCORE_CONSOLE_SECRET": "c" * 40}))

    async def sign_in(password: str = PASSWORD) -> str:
        conn = await asyncpg.connect(db_dsn)
        try:
            account = await authenticate(conn, "alice", password, CLIENT, datetime.now(UTC))
            return await auth.issue_session(conn, account.name, account.role, datetime.now(UTC))
        finally:
            await conn.close()

    async def usable(token: str) -> bool:
        conn = await asyncpg.connect(db_dsn)
        try:
            await auth.verify_session(conn, token, datetime.now(UTC))
            return True
        except SessionRefused:
            return False
        finally:
            await conn.close()

    first, second = asyncio.run(sign_in()), asyncio.run(sign_in())
    capsys.readouterr()
    assert _run(monkeypatch, ["operators", "sessions", "alice"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3  # a header and two sessions
    new_password = "a fresh passphrase 2026"
    assert _run(monkeypatch, ["operators", "passwd", "alice", "--operator", "root", "--reason", "leaked"],
                stdin=new_password + "\n") == 0
    assert "given a new password by root; 2 console session(s) ended" in capsys.readouterr().out
    assert not asyncio.run(usable(first)) and not asyncio.run(usable(second))
    with pytest.raises(AuthenticationFailed):
        asyncio.run(sign_in())
    third = asyncio.run(sign_in(new_password))

    assert _run(monkeypatch, ["operators", "role", "alice", "viewer", "--operator", "root",
                              "--reason", "moved to support"]) == 0
    assert "made a viewer" in capsys.readouterr().out and not asyncio.run(usable(third))
    fourth = asyncio.run(sign_in(new_password))
    assert _run(monkeypatch, ["operators", "end-sessions", "alice", "--operator", "root"]) == 0
    assert not asyncio.run(usable(fourth))
    assert _run(monkeypatch, ["operators", "disable", "alice", "--operator", "root", "--reason", "left"]) == 0
    assert _run(monkeypatch, ["operators", "enable", "alice", "--operator", "root", "--reason", "back"]) == 0
    assert _run(monkeypatch, ["operators", "enable", "alice", "--operator", "root", "--reason", "twice"]) == 1
    asyncio.run(sign_in(new_password))  # enabled again, with the password it had
    capsys.readouterr()
    assert _run(monkeypatch, ["actions", "list", "--json"]) == 0
    actions = json.loads(capsys.readouterr().out)
    assert [(a["action"], a["operator"], a["target_operator"]) for a in reversed(actions)] == [
        ("operator-add", "root", "alice"), ("operator-password", "root", "alice"),
        ("operator-role", "root", "alice"), ("operator-end-sessions", "root", "alice"),
        ("operator-disable", "root", "alice"), ("operator-enable", "root", "alice")]
    everything = capsys.readouterr()
    assert new_password not in everything.out + everything.err + caplog.text + json.dumps(actions)


@pytest.mark.parametrize(("argv", "stdin", "code", "says"), [
    (["operators", "add", "bob", "--role", "viewer", "--operator", "root"], "too short\n", 1,
     "at least 12 characters"),
    (["operators", "add", "bob", "--role", "viewer", "--operator", "root"], "", 2,
     "no password on standard input"),
    (["operators", "disable", "nobody", "--operator", "root", "--reason", "typo"], "", 1,
     "no operator named 'nobody'"),
])
def test_the_cli_refuses_with_a_non_zero_exit(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    argv: list[str], stdin: str, code: int, says: str,
) -> None:
    monkeypatch.setenv("PAYCORE_DATABASE_URL", db_dsn)
    assert _run(monkeypatch, argv, stdin=stdin) == code
    assert says in capsys.readouterr().err


def test_the_cli_takes_no_password_argument(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["operators", "add", "bob", "--role", "viewer", "--operator", "root", "--password", "x" * 20])
    assert usage.value.code == 2


def test_at_a_terminal_the_password_is_asked_twice_and_must_match(monkeypatch: pytest.MonkeyPatch) -> None:
    from paycore_cli import operator_accounts
    from paycore_cli.common import CommandError

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    answers = iter([PASSWORD, PASSWORD, PASSWORD, "something else"])
    monkeypatch.setattr("getpass.getpass", lambda prompt="": next(answers))
    assert operator_accounts.read_password(Terminal()) == PASSWORD
    with pytest.raises(CommandError, match="do not match"):
        operator_accounts.read_password(Terminal())


@pytest.mark.parametrize("command", [["operators"], *(["operators", c] for c in (
    "add", "disable", "enable", "passwd", "role", "end-sessions", "sessions", "list"))])
def test_help_for_every_operators_command(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: paycore " + " ".join(command))


def test_the_throttle_is_configured_by_its_settings() -> None:
    from paycore.settings_spec import ConfigError

    assert LoginThrottle.from_env({}) == LoginThrottle(max_failures=5, window_s=900, max_client_failures=50)
    assert LoginThrottle.from_env({"PAYCORE_CONSOLE_LOGIN_MAX_FAILURES": "3",
                                   "PAYCORE_CONSOLE_LOGIN_WINDOW_S": "60",
                                   "PAYCORE_CONSOLE_LOGIN_MAX_CLIENT_FAILURES": "7"}) == LoginThrottle(
                                       3, 60, 7)
    # A cap per client below the limit per name would make that limit unreachable: refused.
    with pytest.raises(ConfigError, match="PAYCORE_CONSOLE_LOGIN_MAX_CLIENT_FAILURES"):
        LoginThrottle.from_env({"PAYCORE_CONSOLE_LOGIN_MAX_FAILURES": "5",
                                "PAYCORE_CONSOLE_LOGIN_MAX_CLIENT_FAILURES": "4"})
