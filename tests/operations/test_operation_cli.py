"""``paycore refunds|captures|voids`` and ``paycore credentials`` (issue 29): the real ``main``
against real PostgreSQL and the sandbox over HTTP, with the settings a shell would export.

What they print, and their exit codes: 0 done (or in flight), 1 refused or ended without
moving money or nothing found, 2 bad arguments; a secret printed once, never listed.
"""

from __future__ import annotations

import getpass
import json
import uuid

import pytest

from tests.support.cli import paycore
from tests.support.stack import Stack

from .support import order_status, paid_order, refund_posts


async def test_a_refund_created_shown_and_listed(shell: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    order_id, attempt_id = await paid_order(shell, 5000)
    assert await paycore("refunds", "create", order_id, "--amount", "1500", "--reason", "returned") == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("refund ")
    assert first.endswith(f": Succeeded (order {order_id}, payment {attempt_id})")
    operation_id = first.split()[1].rstrip(":")
    assert f"cli:{getpass.getuser()}" in out and "15.00 EUR (1500 minor units)" in out
    assert out.splitlines()[-1].split()[-3:] == ["transition", "Started", "Succeeded"]  # the timeline's end

    assert await paycore("refunds", "show", operation_id, "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "Succeeded" and shown["requested_by"] == f"cli:{getpass.getuser()}"
    assert [e["to"] for e in shown["timeline"] if e["kind"] == "transition"] == ["NotStarted", "Succeeded"]
    assert await paycore("refunds", "list", order_id) == 0
    listed = capsys.readouterr().out
    assert operation_id in listed and "15.00 EUR" in listed
    assert await order_status(shell.pool, order_id) == "PartiallyRefunded"
    assert len(await refund_posts(shell)) == 1


async def test_a_refused_refund_exits_1_with_its_rule_and_records_nothing(
    shell: Stack, capsys: pytest.CaptureFixture[str],
) -> None:
    order_id, _ = await paid_order(shell, 5000)
    assert await paycore("refunds", "create", order_id, "--amount", "5001") == 1
    err = capsys.readouterr().err
    assert "refund refused (amount-exceeds-refundable)" in err and "Nothing was recorded" in err
    assert "Traceback" not in err
    assert await shell.pool.fetchval("SELECT count(*) FROM payment_operations") == 0
    assert await refund_posts(shell) == []
    assert await paycore("refunds", "create", "no-such-order", "--amount", "1") == 1
    assert "order no-such-order not found" in capsys.readouterr().err
    assert await paycore("refunds", "list", "no-such-order") == 1
    assert "no order no-such-order" in capsys.readouterr().err


async def test_a_payment_captured_up_front_cannot_be_captured_or_voided(
    shell: Stack, capsys: pytest.CaptureFixture[str],
) -> None:
    order_id, _ = await paid_order(shell, 5000)
    assert await paycore("captures", "create", order_id, "--amount", "5000") == 1
    assert "capture refused (payment-not-capturable)" in capsys.readouterr().err
    assert await paycore("voids", "create", order_id) == 1
    assert "void refused (payment-not-cancelable)" in capsys.readouterr().err
    assert await shell.pool.fetchval("SELECT count(*) FROM payment_operations") == 0


async def test_a_hold_captured_and_another_voided(shell: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    captured, _ = await paid_order(shell, 5000, capture="manual")
    assert await paycore("captures", "create", captured, "--amount", "3000", "--json") == 0
    capture = json.loads(capsys.readouterr().out)
    assert (capture["kind"], capture["state"], capture["amount_minor"]) == ("capture", "Succeeded", 3000)
    assert await paycore("captures", "show", capture["operation_id"]) == 0
    assert capsys.readouterr().out.startswith(f"capture {capture['operation_id']}: Succeeded")
    # A capture's id names no void.
    assert await paycore("voids", "show", capture["operation_id"]) == 1
    assert f"no void {capture['operation_id']}" in capsys.readouterr().err

    voided, _ = await paid_order(shell, 5000, capture="manual")
    assert await paycore("voids", "create", voided) == 0
    assert ": Succeeded" in capsys.readouterr().out.splitlines()[0]
    assert (await order_status(shell.pool, captured), await order_status(shell.pool, voided)) == (
        "Paid", "Voided")


async def test_bad_arguments_exit_2(shell: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    assert await paycore("refunds", "show", "not-a-uuid") == 2
    assert "not an operation id" in capsys.readouterr().err
    for argv in (["refunds", "create", "o", "--amount", "0"], ["refunds", "create", "o", "--amount", "1.5"],
                 ["refunds", "create", "o"],
                 ["refunds", "create", "o", "--amount", "1", "--reason", "x" * 201],
                 ["voids", "create", "o", "--amount", "1"],
                 ["credentials", "issue", "bo", "--scope", "admin"],
                 ["credentials", "issue", "bo"]):
        with pytest.raises(SystemExit) as usage:
            await paycore(*argv)
        assert usage.value.code == 2, argv
    capsys.readouterr()
    assert await paycore("refunds", "show", str(uuid.uuid4())) == 1


async def test_credentials_issue_list_revoke(shell: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    order_id, _ = await paid_order(shell, 5000)
    assert await paycore("credentials", "issue", "warehouse", "--scope", "refunds", "--scope", "read") == 0
    out = capsys.readouterr().out
    secret = out.splitlines()[-1]
    assert secret.startswith("pcsc_") and "backoffice:warehouse" in out
    stored = await shell.pool.fetchval("SELECT secret_hash FROM service_credentials WHERE name = 'warehouse'")
    assert secret.encode() not in bytes(stored)

    async def refund(key: str) -> int:
        r = await shell.shop.http.post(f"/orders/{order_id}/refunds", json={"amount_minor": 100},
                                       headers={"Authorization": f"Bearer {secret}", "Idempotency-Key": key})
        return r.status_code

    assert await refund("a") == 201
    assert await paycore("credentials", "list") == 0
    listed = capsys.readouterr().out
    assert "warehouse" in listed and "read,refunds" in listed and secret not in listed
    assert await paycore("credentials", "list", "--json") == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["last_used_at"] is not None and row["revoked_at"] is None and "secret" not in row

    assert await paycore("credentials", "issue", "warehouse", "--scope", "read") == 1
    assert "exists already" in capsys.readouterr().err
    assert await paycore("credentials", "issue", "bad name", "--scope", "read") == 2
    assert await paycore("credentials", "issue", str(uuid.uuid4()), "--scope", "read") == 2
    capsys.readouterr()

    assert await paycore("credentials", "revoke", row["credential_id"]) == 0
    revoked = capsys.readouterr().out
    assert f"credential warehouse ({row['credential_id']}) revoked by {getpass.getuser()}" in revoked
    assert await refund("b") == 401
    assert await paycore("credentials", "revoke", "warehouse") == 1
    assert "revoked already" in capsys.readouterr().err
    assert await paycore("credentials", "revoke", "nobody") == 1
    assert "no credential nobody" in capsys.readouterr().err
