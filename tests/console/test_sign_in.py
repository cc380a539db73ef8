"""Signing in and out of the console: cookies, failures, throttling, expiry."""

from __future__ import annotations

import re

import httpx

from paycore.clock import FakeClock
from paycore_console.auth import SESSION_COOKIE
from tests.console.conftest import PASSWORD, ConsoleRig, MakeRig, hidden


def session_cookie(response: httpx.Response) -> str:
    cookies = response.headers.get_list("set-cookie")
    return next(h for h in cookies if h.startswith("paycore_console_session="))


async def test_signing_in_sets_an_httponly_strict_secure_session_cookie_and_opens_the_overview(
    rig: ConsoleRig,
) -> None:
    await rig.add("ops-1")
    client = rig.client()
    signed = await rig.sign_in(client, "ops-1")
    assert signed.status_code == 303 and signed.headers["location"] == "/"
    cookie = session_cookie(signed)
    attributes = {a.strip().lower() for a in cookie.split(";")}
    assert {"httponly", "secure", "samesite=strict", "path=/"} <= attributes
    home = await client.get("/")
    assert home.status_code == 200
    assert '<span id="operator-name">ops-1</span>' in home.text
    assert "<title>Overview · paycore console</title>" in home.text


async def test_insecure_cookies_are_only_by_setting_for_http_on_loopback(make_rig: MakeRig,
                                                                        clock: FakeClock) -> None:
    rig = await make_rig(clock, PAYCORE_CONSOLE_INSECURE_COOKIES="true")
    await rig.add("ops-1")
    client = rig.client(base_url="http://127.0.0.1:8500")
    signed = await rig.sign_in(client, "ops-1")
    cookie = session_cookie(signed)
    assert "secure" not in cookie.lower()
    assert (await client.get("/")).status_code == 200


async def test_a_wrong_password_or_unknown_name_is_refused_the_same_way(rig: ConsoleRig) -> None:
    await rig.add("ops-1")
    client = rig.client()
    wrong = await rig.sign_in(client, "ops-1", "not the password at all")
    nobody = await rig.sign_in(client, "nobody", PASSWORD)
    for answer in (wrong, nobody):
        assert answer.status_code == 401
        assert "Unknown operator or wrong password." in answer.text
        assert "paycore_console_session=" not in answer.headers.get("set-cookie", "")
    assert (await client.get("/")).status_code == 303  # still not signed in


async def test_failed_sign_ins_are_throttled_per_name_and_client_even_with_the_right_password(
    make_rig: MakeRig, clock: FakeClock,
) -> None:
    rig = await make_rig(clock, PAYCORE_CONSOLE_LOGIN_MAX_FAILURES="2", PAYCORE_CONSOLE_LOGIN_WINDOW_S="60")
    await rig.add("ops-1")
    client = rig.client()
    for _ in range(2):
        assert (await rig.sign_in(client, "ops-1", "wrong password here")).status_code == 401
    locked = await rig.sign_in(client, "ops-1")
    assert locked.status_code == 429
    assert int(locked.headers["retry-after"]) > 0
    assert "Too many failed sign-ins" in locked.text
    # Another client address is its own key: the throttle is by the caller's address.
    elsewhere = rig.client(client_address=("198.51.100.4", 5000))
    assert (await rig.sign_in(elsewhere, "ops-1")).status_code == 303
    clock.advance(61)
    assert (await rig.sign_in(client, "ops-1")).status_code == 303


async def test_one_client_address_trying_many_names_is_capped_for_every_name(
    make_rig: MakeRig, clock: FakeClock,
) -> None:
    rig = await make_rig(clock, PAYCORE_CONSOLE_LOGIN_MAX_FAILURES="3",
                         PAYCORE_CONSOLE_LOGIN_MAX_CLIENT_FAILURES="4", PAYCORE_CONSOLE_LOGIN_WINDOW_S="60")
    await rig.add("ops-1")
    client = rig.client()
    for i in range(4):  # one failure per name: no name reaches its own limit of 3
        assert (await rig.sign_in(client, f"guess-{i}", "wrong password here")).status_code == 401
    for name in ("guess-new", "ops-1"):  # any name, the right password too
        capped = await rig.sign_in(client, name)
        assert capped.status_code == 429, capped.text
        assert 0 < int(capped.headers["retry-after"]) <= 60
        assert "Too many failed sign-ins" in capped.text
    elsewhere = rig.client(client_address=("198.51.100.4", 5000))
    assert (await rig.sign_in(elsewhere, "ops-1")).status_code == 303
    clock.advance(61)
    assert (await rig.sign_in(client, "ops-1")).status_code == 303


async def test_a_session_expires_after_its_ttl(make_rig: MakeRig, clock: FakeClock) -> None:
    rig = await make_rig(clock, PAYCORE_CONSOLE_SESSION_TTL_S="600")
    browser = await rig.browser()
    clock.advance(599)
    assert (await browser.client.get("/escalations")).status_code == 200
    clock.advance(2)
    page = await browser.client.get("/escalations")
    assert page.status_code == 303 and page.headers["location"] == "/login?next=/escalations"
    api = await browser.client.get("/api/v1/overview")
    assert api.status_code == 401
    assert api.headers["content-type"] == "application/problem+json"


async def test_signing_out_forgets_the_session(rig: ConsoleRig) -> None:
    browser = await rig.browser()
    out = await browser.post_form("/logout")
    assert out.status_code == 303 and out.headers["location"] == "/login"
    assert (await browser.client.get("/")).status_code == 303


async def test_a_copied_session_cookie_is_refused_once_its_session_signed_out(rig: ConsoleRig) -> None:
    browser = await rig.browser()
    copied = browser.client.cookies[SESSION_COOKIE]
    thief = rig.client(cookies={SESSION_COOKIE: copied})
    assert (await thief.get("/api/v1/overview")).status_code == 200  # a copy works while it lives
    assert (await browser.post_form("/logout")).status_code == 303
    for path in ("/", "/api/v1/overview"):
        answer = await thief.get(path)
        assert answer.status_code in (303, 401), (path, answer.status_code)
    assert (await thief.get("/api/v1/overview")).headers["content-type"] == "application/problem+json"


async def test_an_idle_session_ends_after_the_idle_timeout(make_rig: MakeRig, clock: FakeClock) -> None:
    rig = await make_rig(clock, PAYCORE_CONSOLE_SESSION_IDLE_S="1800")
    browser = await rig.browser()
    clock.advance(1700)
    assert (await browser.client.get("/")).status_code == 200  # used: its idle time starts again
    clock.advance(1700)
    assert (await browser.client.get("/")).status_code == 200
    clock.advance(1801)
    assert (await browser.client.get("/")).status_code == 303
    assert await rig.pool.fetchval("SELECT end_reason FROM operator_sessions") == "idle"


async def test_an_operator_sees_their_open_sessions_and_ends_the_others(rig: ConsoleRig) -> None:
    here = await rig.browser("ops-1")
    laptop, phone = rig.client(), rig.client()
    for client in (laptop, phone):
        assert (await rig.sign_in(client, "ops-1")).status_code == 303
    page = await here.client.get("/sessions")
    assert page.status_code == 200 and page.text.count('data-testid="session-row"') == 3
    assert page.text.count('data-testid="this-session"') == 1
    # Ending one of the others by its handle; then all the rest.
    [handle, *_] = [h for h in re.findall(r'name="session" value="([0-9a-f]{16})"', page.text)]
    assert "Session" in await here.flash_after(await here.post_form("/sessions/end", session=handle))
    assert sum([(await c.get("/")).status_code == 303 for c in (laptop, phone)]) == 1
    assert "Ended 1 other" in await here.flash_after(await here.post_form("/sessions/end", session="others"))
    assert [(await c.get("/")).status_code for c in (laptop, phone)] == [303, 303]
    assert (await here.client.get("/")).status_code == 200  # this one stays
    [recorded] = await rig.pool.fetch("SELECT operator, target_operator FROM operator_actions"
                                      " WHERE action = 'operator-end-sessions'")
    assert (recorded["operator"], recorded["target_operator"]) == ("ops-1", "ops-1")
    other = await rig.browser("ops-2")  # another operator cannot end ops-1's sessions by handle
    refused = await other.post_form("/sessions/end", session=handle)
    assert "Refused" in await other.flash_after(refused)


async def test_the_sign_in_form_needs_its_own_token_and_next_stays_on_this_site(rig: ConsoleRig) -> None:
    await rig.add("ops-1")
    client = rig.client()
    form = await client.get("/login")
    token = hidden(form.text, "csrf_token")
    forged = await client.post("/login", data={"csrf_token": token + "x", "name": "ops-1",
                                               "password": PASSWORD})
    assert forged.status_code == 403
    other = rig.client()  # a token made for another browser's sign-in form
    assert (await other.post("/login", data={"csrf_token": token, "name": "ops-1",
                                             "password": PASSWORD})).status_code == 403
    offsite = await client.post("/login", data={"csrf_token": token, "name": "ops-1", "password": PASSWORD,
                                                 "next": "//evil.example/"})
    assert offsite.status_code == 303 and offsite.headers["location"] == "/"


async def test_a_disabled_operators_session_stops_at_once(rig: ConsoleRig) -> None:
    from paycore.operators import disable_operator

    browser = await rig.browser()
    await disable_operator(rig.pool, "ops-1", rig.clock.now(), operator="root", reason="left the team")
    assert (await browser.client.get("/")).status_code == 303


# -- behind a proxy ----------------------------------------------------------------------------

PROXY = ("10.1.2.3", 443)  # the peer every request comes from behind a proxy


async def test_behind_a_trusted_proxy_each_client_has_its_own_sign_in_throttle(
    make_rig: MakeRig, clock: FakeClock,
) -> None:
    rig = await make_rig(clock, PAYCORE_CONSOLE_LOGIN_MAX_FAILURES="2", PAYCORE_CONSOLE_LOGIN_WINDOW_S="60",
                         PAYCORE_CONSOLE_TRUSTED_PROXIES="10.0.0.0/8")
    await rig.add("ops-1")
    guesser = rig.client(client_address=PROXY, headers={"X-Forwarded-For": "198.51.100.66"})
    colleague = rig.client(client_address=PROXY, headers={"X-Forwarded-For": "203.0.113.20"})
    for _ in range(2):
        assert (await rig.sign_in(guesser, "ops-1", "wrong password here")).status_code == 401
    assert (await rig.sign_in(guesser, "ops-1")).status_code == 429
    # The same proxy, another client: not locked out by the guesser.
    assert (await rig.sign_in(colleague, "ops-1")).status_code == 303
    clients = await rig.pool.fetch("SELECT DISTINCT client FROM operator_login_failures")
    assert [r["client"] for r in clients] == ["198.51.100.66"]


async def test_x_forwarded_for_from_an_untrusted_peer_is_ignored(make_rig: MakeRig, clock: FakeClock) -> None:
    rig = await make_rig(clock, PAYCORE_CONSOLE_LOGIN_MAX_FAILURES="2", PAYCORE_CONSOLE_LOGIN_WINDOW_S="60",
                         PAYCORE_CONSOLE_TRUSTED_PROXIES="10.0.0.0/8")
    await rig.add("ops-1")
    # Not from the proxy: a forged X-Forwarded-For would otherwise reset the throttle at will.
    for forged in ("198.51.100.1", "198.51.100.2"):
        direct = rig.client(client_address=("192.0.2.50", 5000), headers={"X-Forwarded-For": forged})
        assert (await rig.sign_in(direct, "ops-1", "wrong password here")).status_code == 401
    again = rig.client(client_address=("192.0.2.50", 5000), headers={"X-Forwarded-For": "198.51.100.3"})
    assert (await rig.sign_in(again, "ops-1")).status_code == 429
    clients = await rig.pool.fetch("SELECT DISTINCT client FROM operator_login_failures")
    assert [r["client"] for r in clients] == ["192.0.2.50"]
    # No proxies configured (the default): nobody's X-Forwarded-For is believed.
    plain = await make_rig(clock)
    proxied = plain.client(client_address=PROXY, headers={"X-Forwarded-For": "198.51.100.9"})
    await plain.add("ops-2")
    assert (await plain.sign_in(proxied, "ops-2", "wrong password here")).status_code == 401
    seen = await plain.pool.fetchval("SELECT client FROM operator_login_failures WHERE name = 'ops-2'")
    assert seen == "10.1.2.3"


async def test_strict_transport_security_is_sent_over_https_only(make_rig: MakeRig, clock: FakeClock) -> None:
    rig = await make_rig(clock, PAYCORE_CONSOLE_TRUSTED_PROXIES="10.0.0.0/8")
    over_tls = await rig.client().get("/login")
    assert over_tls.headers["strict-transport-security"] == "max-age=31536000"
    plain = await rig.client(base_url="http://console.test").get("/login")
    assert "strict-transport-security" not in plain.headers
    # Plain http to the console from a TLS-terminating proxy that says the client used https.
    terminated = rig.client(base_url="http://console.test", client_address=PROXY,
                            headers={"X-Forwarded-Proto": "https"})
    assert (await terminated.get("/login")).headers["strict-transport-security"] == "max-age=31536000"
    liar = rig.client(base_url="http://console.test", client_address=("192.0.2.50", 5000),
                      headers={"X-Forwarded-Proto": "https"})
    assert "strict-transport-security" not in (await liar.get("/login")).headers
    off = await make_rig(clock, PAYCORE_CONSOLE_HSTS_MAX_AGE_S="0")
    assert "strict-transport-security" not in (await off.client().get("/login")).headers
