"""The dashboard server over real sockets: authentication, origin checks, health and the
JSON API, against the real core with the offline brain."""

from __future__ import annotations

import json
import stat
import uuid

import aiohttp
import pytest

from bot.events import TO_ALL, TO_PARTY_ALONE, InboundMessage
from bot.search.results import RESULT_NOTES_CHARS
from tests.channels.web.conftest import Stack, login, start_stack, stop_stack
from tests.channels.web.test_web_static import dashboard_script_paths

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_token_file_is_private_and_stable(tmp_path) -> None:
    first = await start_stack(tmp_path / "d")
    try:
        path = first.config.data_dir / "web_token"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        token = first.channel.token
        assert len(token) >= 24 and path.read_text().strip() == token
    finally:
        await stop_stack(first)
    path.chmod(0o644)  # loosened by someone: tightened again, token kept
    second = await start_stack(tmp_path / "d")
    try:
        assert second.channel.token == token
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        await stop_stack(second)


async def test_login_survives_a_daemon_restart(tmp_path) -> None:
    first = await start_stack(tmp_path / "d")
    jar = aiohttp.CookieJar(unsafe=True)
    try:
        async with aiohttp.ClientSession(cookie_jar=jar) as s:
            await login(s, first)
    finally:
        await stop_stack(first)
    second = await start_stack(tmp_path / "d")
    try:
        async with aiohttp.ClientSession(cookie_jar=jar) as s:
            cookies = {c.key: c.value for c in jar}
            async with s.get(f"{second.url}/api/conversations", cookies=cookies) as r:
                assert r.status == 200
    finally:
        await stop_stack(second)


async def test_no_session_no_data(stack: Stack) -> None:
    # Seed a conversation so there is something to leak.
    await stack.deliver_telegram("secret plans for the weekend")
    async with aiohttp.ClientSession() as anon:
        async with anon.get(f"{stack.url}/", allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/login"
        for path in (
            "/api/conversations",
            "/api/search?q=secret",
            "/api/external",
            "/api/analytics",
            "/analytics/topics.svg",
            *dashboard_script_paths(),  # app.js and the modules it imports
        ):
            async with anon.get(f"{stack.url}{path}", allow_redirects=False) as r:
                body = await r.text()
                assert r.status in (401, 303), path
                assert "secret" not in body and "weekend" not in body
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await anon.ws_connect(f"{stack.url}/ws", headers={"Origin": stack.origin})
        assert err.value.status == 401
        # The login page and its assets are public, and carry no data.
        async with anon.get(f"{stack.url}/login") as r:
            assert r.status == 200 and "secret" not in await r.text()


async def test_dashboard_scripts_are_javascript_checked_again_at_each_load(
    stack: Stack, client
) -> None:
    # The dashboard's scripts are ES modules importing one another: a browser that kept
    # an old module from its cache beside a newer one (heuristic caching, no
    # Cache-Control) could import a name that is gone, and the whole page stopped.
    paths = dashboard_script_paths()
    assert "/static/app.js" in paths and len(paths) > 1
    for path in paths:
        async with client.get(f"{stack.url}{path}") as r:
            assert r.status == 200, path
            # a module served as anything else is refused by the browser
            assert r.content_type in ("text/javascript", "application/javascript"), path
            assert r.headers["Cache-Control"] == "no-cache", path
            validator = {"If-Modified-Since": r.headers["Last-Modified"]}
        async with client.get(f"{stack.url}{path}", headers=validator) as r:
            assert r.status == 304, path  # checked again, not sent again
            assert r.headers["Cache-Control"] == "no-cache", path


async def test_health_endpoints_are_open_and_dataless(stack: Stack) -> None:
    await stack.deliver_telegram("health check should not show this")
    async with aiohttp.ClientSession() as anon:
        async with anon.get(f"{stack.url}/healthz") as r:
            assert r.status == 200 and await r.json() == {"status": "ok"}
        async with anon.get(f"{stack.url}/readyz") as r:
            data = await r.json()
            assert r.status == 200 and data["ready"] is True
            assert "should not" not in await r.text()
    stack.services.ready = False
    async with aiohttp.ClientSession() as anon, anon.get(f"{stack.url}/readyz") as r:
        assert r.status == 503 and (await r.json())["ready"] is False
    stack.services.ready = True
    # Regression: ready while every message was refused (draining after SIGTERM) or not
    # stored (storage failing: held in memory, replies waiting to be written).
    router, replies = stack.services.router, stack.services.replies
    for trouble, undo in (
        (lambda: setattr(router, "accepting", False), lambda: setattr(router, "accepting", True)),
        (lambda: replies.storage_waiting.add("conv-x"), replies.storage_waiting.clear),
    ):
        trouble()
        try:
            async with aiohttp.ClientSession() as anon, anon.get(f"{stack.url}/readyz") as r:
                assert r.status == 503 and (await r.json())["ready"] is False
        finally:
            undo()
    async with aiohttp.ClientSession() as anon, anon.get(f"{stack.url}/readyz") as r:
        assert r.status == 200


async def test_login_sets_a_strict_httponly_cookie(stack: Stack) -> None:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
        async with s.post(f"{stack.url}/login", json={"token": "wrong"}) as r:
            assert r.status == 401
        async with s.post(
            f"{stack.url}/login", data={"token": stack.channel.token}, allow_redirects=False
        ) as r:
            assert r.status == 303 and r.headers["Location"] == "/"
            cookie = r.headers["Set-Cookie"]
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        async with s.get(f"{stack.url}/api/conversations") as r:
            assert r.status == 200
        async with s.post(
            f"{stack.url}/logout", headers={"Origin": stack.origin}, allow_redirects=False
        ) as r:
            assert r.status == 303
        async with s.get(f"{stack.url}/api/conversations") as r:
            assert r.status == 401


async def test_the_session_cookie_is_secure_behind_an_https_proxy(stack: Stack) -> None:
    # Regression: behind a TLS proxy the login arrives as plain HTTP, and the cookie
    # went out without Secure, so the browser would also send it over plain HTTP.
    for headers in (
        {"X-Forwarded-Proto": "https"},
        {"Forwarded": 'for=10.0.0.1;proto="https";host=agent.example.org'},
    ):
        async with (
            aiohttp.ClientSession() as s,
            s.post(f"{stack.url}/login", json={"token": stack.channel.token}, headers=headers) as r,
        ):
            assert r.status == 200
            assert "Secure" in r.headers["Set-Cookie"], headers
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{stack.url}/login", json={"token": stack.channel.token}) as r,
    ):
        assert "Secure" not in r.headers["Set-Cookie"]  # plain local HTTP keeps working


async def test_login_attempts_are_rate_limited(stack: Stack) -> None:
    limit = stack.config.channels.web.login_attempts_per_minute
    async with aiohttp.ClientSession() as s:
        for _ in range(limit):
            async with s.post(f"{stack.url}/login", json={"token": "guess"}) as r:
                assert r.status == 401
        # Even the right token is refused while the client is limited.
        async with s.post(f"{stack.url}/login", json={"token": stack.channel.token}) as r:
            assert r.status == 429 and int(r.headers["Retry-After"]) >= 1
        async with s.post(f"{stack.url}/login", data={"token": "x"}, allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/login?error=rate"


async def test_a_foreign_page_cannot_use_up_the_owners_login_attempts(stack: Stack) -> None:
    # Regression: POST /login skipped the origin check, so any web page the owner had
    # open could post guesses to it from the owner's own browser (counted as 127.0.0.1,
    # the owner's address) and keep the owner locked out of the dashboard's login.
    limit = stack.config.channels.web.login_attempts_per_minute
    async with aiohttp.ClientSession() as s:
        for headers in (
            {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
            {"Origin": "null", "Sec-Fetch-Site": "cross-site"},  # a sandboxed frame
        ):
            for _ in range(limit + 1):
                async with s.post(
                    f"{stack.url}/login",
                    data={"token": "guess"},
                    headers=headers,
                    allow_redirects=False,
                ) as r:
                    assert r.status == 403
        # the right token from a foreign page does not log that page in either
        async with s.post(
            f"{stack.url}/login",
            json={"token": stack.channel.token},
            headers={"Origin": "http://evil.example"},
        ) as r:
            assert r.status == 403 and "Set-Cookie" not in r.headers
        # the owner's own login page still logs in at once
        async with s.post(
            f"{stack.url}/login",
            data={"token": stack.channel.token},
            headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"},
            allow_redirects=False,
        ) as r:
            assert r.status == 303 and r.headers["Location"] == "/"


async def test_behind_a_local_proxy_one_guesser_does_not_lock_the_owner_out(stack: Stack) -> None:
    # Regression: behind the reverse proxy every browser arrived from 127.0.0.1, so a
    # stranger's guesses used up the owner's attempts too.
    limit = stack.config.channels.web.login_attempts_per_minute
    guesser = {"X-Forwarded-For": "203.0.113.9"}
    async with aiohttp.ClientSession() as s:
        for _ in range(limit):
            async with s.post(f"{stack.url}/login", json={"token": "guess"}, headers=guesser) as r:
                assert r.status == 401
        async with s.post(f"{stack.url}/login", json={"token": "guess"}, headers=guesser) as r:
            assert r.status == 429
        # the guesser cannot pick a fresh key by writing an earlier entry itself
        forged = {"X-Forwarded-For": "10.9.9.9, 203.0.113.9"}
        async with s.post(f"{stack.url}/login", json={"token": "guess"}, headers=forged) as r:
            assert r.status == 429
        owner = {"Forwarded": 'for="198.51.100.7";proto=https'}
        async with s.post(
            f"{stack.url}/login", json={"token": stack.channel.token}, headers=owner
        ) as r:
            assert r.status == 200


async def test_websocket_origin_and_host_checked(stack: Stack, client) -> None:
    for origin in ("http://evil.example", "null", f"{stack.origin}.evil.example"):
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await client.ws_connect(f"{stack.url}/ws", headers={"Origin": origin})
        assert err.value.status == 403
    with pytest.raises(aiohttp.WSServerHandshakeError):
        await client.ws_connect(f"{stack.url}/ws")  # no Origin at all
    # A rebinding DNS name pointing at 127.0.0.1 is refused outright.
    async with client.get(f"{stack.url}/healthz", headers={"Host": "attacker.example"}) as r:
        assert r.status == 421
    # Writes from a foreign page are refused even with a valid session.
    async with client.post(
        f"{stack.url}/api/external/p0000000/tier",
        json={"tier": "known"},
        headers={"Origin": "http://evil.example"},
    ) as r:
        assert r.status == 403
    # "Origin: null" (a sandboxed frame, or our own form under no-referrer) is ours only
    # when the browser's own Sec-Fetch-Site says so.
    for site in (None, "cross-site", "same-site"):
        headers = {"Origin": "null", **({"Sec-Fetch-Site": site} if site else {})}
        async with client.post(
            f"{stack.url}/api/external/p0000000/tier", json={"tier": "known"}, headers=headers
        ) as r:
            assert r.status == 403, site


async def test_pages_carry_a_strict_csp(stack: Stack, client) -> None:
    async with client.get(f"{stack.url}/") as r:
        assert r.status == 200
        csp = r.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert r.headers["X-Frame-Options"] == "DENY"
        # regression: the dashboard page was cacheable, so Back after Log out showed it
        assert r.headers["Cache-Control"] == "no-store"
        html = await r.text()
        assert "http://" not in html and "https://" not in html  # no CDN


async def test_refusals_and_redirects_carry_the_security_headers(stack: Stack, client) -> None:
    # Regression: responses raised rather than returned (the redirect to /login, an
    # unknown path, a directory, a wrong method) went out without CSP, X-Frame-Options,
    # nosniff or Referrer-Policy.
    async with aiohttp.ClientSession() as anon:
        answers = [await anon.get(f"{stack.url}{p}", allow_redirects=False) for p in ("/", "/x")]
    answers += [
        await client.get(f"{stack.url}/nothing-here"),
        await client.get(f"{stack.url}/static/"),
        await client.put(f"{stack.url}/api/conversations", headers={"Origin": stack.origin}),
    ]
    assert [r.status for r in answers] == [303, 303, 404, 403, 405]
    for r in answers:
        r.release()
        assert r.headers["X-Frame-Options"] == "DENY", r.url
        assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        assert r.headers["Referrer-Policy"] == "no-referrer"


async def test_conversation_api_and_search(stack: Stack, client) -> None:
    await stack.deliver_telegram("the zeppelin maintenance schedule is on Thursday")
    async with client.get(f"{stack.url}/api/conversations") as r:
        convs = (await r.json())["conversations"]
    tg = next(c for c in convs if c["channel"] == "telegram")
    assert tg["readOnly"] is True and tg["label"] == "Hanan"
    assert "identityKey" not in tg and "identity_key" not in tg
    async with client.get(f"{stack.url}/api/conversations/{tg['id']}") as r:
        data = await r.json()
        assert data["turns"][0]["content"].startswith("the zeppelin")
    async with client.get(f"{stack.url}/api/conversations/conv-nope") as r:
        assert r.status == 404
    async with client.get(f"{stack.url}/api/search", params={"q": "zeppelin"}) as r:
        page = await r.json()
    assert page["results"][0]["conversation_id"] == tg["id"]
    assert 1 in page["results"][0]["matched_turns"]
    async with client.get(f"{stack.url}/api/search", params={"q": 'AND "( NEAR *'}) as r:
        assert r.status == 200  # hostile FTS syntax is only ever searched for


async def test_search_results_carry_bounded_notes(stack: Stack, client) -> None:
    # Regression (session 40): offline notes written before held a pasted blob whole
    # (1 MB), and every /api/search hit (and `my-agent search --json`) returned them.
    manager = stack.services.conversations
    conv = await manager.create("web")
    await manager.append_turn(conv.id, "user", "the zeppelin hangar keys are with Ruth")
    await manager.set_abbreviation(conv.id, "Key points: zeppelin hangar. " + "QUJD" * 250_000)
    async with client.get(f"{stack.url}/api/search", params={"q": "zeppelin"}) as r:
        (hit,) = (await r.json())["results"]
    notes = hit["abbreviation"]
    assert notes.startswith("Key points: zeppelin hangar. QUJD") and notes.endswith("…")
    assert len(notes) == RESULT_NOTES_CHARS


async def test_conversation_api_pages_past_turn_10000(stack: Stack, client) -> None:
    # Regression: before=, around= (and offset=) were capped at 10,000, so any later
    # page of a long conversation was the page before turn 10,000 instead.
    manager = stack.services.conversations
    conv = await manager.create("web")
    await manager.append_turn(conv.id, "user", "an early question")
    for n in range(15_000, 15_004):
        await manager.append_turn(conv.id, "user", f"question {n}", turn_number=n)
    url = f"{stack.url}/api/conversations/{conv.id}"
    async with client.get(url, params={"before": "15003"}) as r:
        numbers = [t["turnNumber"] for t in (await r.json())["turns"]]
    assert numbers == [1, 15_000, 15_001, 15_002]
    async with client.get(url, params={"around": "15001", "limit": "1"}) as r:
        around = await r.json()
    assert [t["turnNumber"] for t in around["turns"]] == [15_001]
    # and on from there, a page at a time, to the end
    assert around["hasNewer"]
    params = {"newerThan": str(around["newerThan"]), "limit": "1"}
    async with client.get(url, params=params) as r:
        newer = await r.json()
    assert [t["turnNumber"] for t in newer["turns"]] == [15_002]
    params["newerThan"] = str(newer["newerThan"])
    async with client.get(url, params=params) as r:
        last = await r.json()
    assert [t["turnNumber"] for t in last["turns"]] == [15_003]
    assert not last["hasNewer"] and last["newerThan"] is None
    # A position that is not a number: a JSON error naming it (it was "not a number").
    for key in ("before", "around", "newerThan", "limit"):
        async with client.get(url, params={key: "ten"}) as r:
            assert r.status == 400
            assert (await r.json()) == {"error": f"{key} is not a number: 'ten'"}
    async with client.get(f"{url}/turns/x", params={"role": "user"}) as r:
        assert r.status == 400
    # past SQLite's largest integer: nothing there, as just below it (it was a 500)
    for offset in (2**63 - 1, 2**63, 10**30):
        async with client.get(f"{stack.url}/api/conversations", params={"offset": offset}) as r:
            assert r.status == 200 and (await r.json())["conversations"] == []
    async with client.get(url, params={"before": str(10**30)}) as r:
        assert r.status == 200


async def test_external_panel_api_trust_and_reply(stack: Stack, client) -> None:
    await stack.services.router.deliver(
        InboundMessage(
            channel="telegram",
            sender_id="777",
            sender_name="Stranger Danger",
            text="hello, who is this?",
            message_id=f"tg-{uuid.uuid4().hex[:6]}",
            chat_id="777",
        )
    )
    async with client.get(f"{stack.url}/api/external") as r:
        parties = (await r.json())["parties"]
    party = next(p for p in parties if p["name"] == "Stranger Danger")
    assert party["tier"] == "untrusted" and party["escalations"]
    assert party["messages"][0]["content"] == "hello, who is this?"
    async with client.post(
        f"{stack.url}/api/external/{party['id']}/tier",
        json={"tier": "known"},
        headers={"Origin": stack.origin},
    ) as r:
        assert r.status == 200
    async with client.post(
        f"{stack.url}/api/external/{party['id']}/tier", json={"tier": "owner"}
    ) as r:
        assert r.status == 400
    async with client.post(
        f"{stack.url}/api/external/{party['id']}/tier", data="tier=blocked"
    ) as r:
        assert r.status == 415  # form posts (cross-site capable) are not accepted
    async with client.post(
        f"{stack.url}/api/external/{party['id']}/reply",
        json={"text": "It is the assistant of the owner."},
    ) as r:
        assert r.status == 200
    async with client.post(f"{stack.url}/api/external/pffffff/reply", json={"text": "x"}) as r:
        assert r.status == 404
    async with client.get(f"{stack.url}/api/external") as r:
        party = next(p for p in (await r.json())["parties"] if p["id"] == party["id"])
    assert party["tier"] == "known" and party["escalations"] == []
    assert party["messages"][-1] == {
        **party["messages"][-1],
        "direction": "out",
        "content": "It is the assistant of the owner.",
    }


async def test_a_dashboard_reply_is_sent_once_to_the_party_alone(stack: Stack, client) -> None:
    # Regression (session 40): the dashboard's Reply had no dedup key (a POST sent again
    # went twice), and with e-mail reply_all it went to everyone the party's mail went to,
    # as the owner's /reply did.
    await stack.deliver_telegram("who is this?", sender_id="779", name="Eve")
    party = next(p for p in await stack.services.external.list_parties() if p.party_key == "779")
    url = f"{stack.url}/api/external/{party.id}/reply"
    for _ in range(2):  # the same reply posted twice (a retry after a lost answer)
        async with client.post(url, json={"text": "Who are you?", "ref": "r1abc"}) as r:
            assert r.status == 200
            assert (await r.json())["sent"] == f"Sent to {party.label}."
    async with client.post(url, json={"text": "x", "ref": "no spaces please"}) as r:
        assert r.status == 400
    rows = await stack.services.state.fetchall("SELECT dedup_key, payload FROM outbox")
    mine = [(key, json.loads(payload)) for key, payload in rows if "to-party" in str(key)]
    assert [key for key, _ in mine] == ["web:r1abc:to-party"]
    assert mine[0][1]["metadata"][TO_PARTY_ALONE] is True
    history = await stack.services.external.history(party)
    assert [m["content"] for m in history if m.get("direction") == "out"] == ["Who are you?"]


async def test_a_dashboard_reply_to_all_goes_to_everyone_on_their_mail(
    stack: Stack, client
) -> None:
    # Regression (session 41): the dashboard's Reply went to the party alone, with no
    # way to answer everyone their mail went to; "all" (its "to all" box) does.
    stack.services.config.channels.email.address = "assistant@bot.example"
    await stack.services.router.deliver(
        InboundMessage(
            channel="email",
            sender_id="eve@stranger.example",
            sender_name="Eve",
            text="Is Robin free?",
            message_id="<w1@stranger.example>#sha256:1",
            chat_id="eve@stranger.example",
            message_ref="<w1@stranger.example>",
            metadata={"to": ["assistant@bot.example"], "cc": ["Dan@Press.example"]},
        )
    )
    eve = await stack.services.external.find("eve@stranger.example")
    assert eve is not None
    url = f"{stack.url}/api/external/{eve.id}/reply"
    async with client.post(url, json={"text": "x", "ref": "r2abc", "all": "yes"}) as r:
        assert r.status == 400
    for _ in range(2):  # posted twice: queued once, as any dashboard reply
        async with client.post(url, json={"text": "Off sick", "ref": "r3abc", "all": True}) as r:
            assert r.status == 200
            assert (await r.json())["sent"] == (
                f"Sent to {eve.label} and to everyone else their message went to: "
                "dan@press.example."
            )
    rows = await stack.services.state.fetchall("SELECT dedup_key, payload FROM outbox")
    mine = [(key, json.loads(payload)) for key, payload in rows if "to-party" in str(key)]
    assert [key for key, _ in mine] == ["web:r3abc:to-party"]
    assert mine[0][1]["metadata"][TO_ALL] is True
    assert TO_PARTY_ALONE not in mine[0][1]["metadata"]


async def test_external_party_counts_messages_both_ways(stack: Stack, client) -> None:
    # Regression: messageCount was the party's incoming messages only, so an exchange of
    # two messages each way was shown as "2 messages".
    for text in ("are you there?", "hello again"):
        await stack.services.router.deliver(
            InboundMessage(
                channel="telegram",
                sender_id="778",
                sender_name="Counted",
                text=text,
                message_id=f"tg-{uuid.uuid4().hex[:6]}",
                chat_id="778",
            )
        )
    party = next(p for p in await stack.services.external.list_parties() if p.party_key == "778")
    for text in ("Yes.", "Hello."):
        await stack.services.router.send_to_party(party, text, kind="reply")
    async with client.get(f"{stack.url}/api/external") as r:
        shown = next(p for p in (await r.json())["parties"] if p["id"] == party.id)
    directions = [m["direction"] for m in shown["messages"]]
    assert directions.count("in") == 2 and directions.count("out") >= 2
    assert shown["messagesIn"] == 2
    assert shown["messagesOut"] == directions.count("out")
    assert shown["messageCount"] == len(directions)


async def test_external_parties_show_the_tier_that_applies_now(stack: Stack, client) -> None:
    # Regression: the dashboard showed a party's stored tier, as of their last message:
    # a contact the owner took off trust.contacts still read "known" (the model no
    # longer answers them), one added there still "untrusted", until they wrote again.
    trust = stack.services.config.trust
    trust.contacts["telegram"] = {"781": "known", "@bea": "known"}
    for sender, aliases in (("781", ()), ("782", ("@bea",)), ("783", ())):
        await stack.services.router.deliver(
            InboundMessage(
                channel="telegram",
                sender_id=sender,
                sender_aliases=aliases,
                text="hello",
                message_id=f"tg-{uuid.uuid4().hex[:6]}",
                chat_id=sender,
            )
        )

    async def shown() -> dict[str, tuple[str, str]]:
        async with client.get(f"{stack.url}/api/external") as r:
            parties = (await r.json())["parties"]
        return {p["identity"]: (p["tier"], p["tierSource"]) for p in parties}

    assert await shown() == {
        "781": ("known", "config"),
        "782": ("known", "config"),  # by the @username their message carried
        "783": ("untrusted", "default"),
    }
    # What a reload does with the changed file (bot/daemon_stop.py): nobody wrote since.
    stack.services.config.trust = trust.model_copy(
        update={"contacts": {"telegram": {"@bea": "known", "783": "blocked"}}}
    )
    assert await shown() == {
        "781": ("untrusted", "default"),
        "782": ("known", "config"),
        "783": ("blocked", "config"),
    }


async def test_unauthenticated_login_page_redirects_when_logged_in(stack: Stack) -> None:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
        await login(s, stack)
        async with s.get(f"{stack.url}/login", allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/"


async def test_the_login_page_says_where_the_token_is_under_systemd_too(stack: Stack) -> None:
    # Regression: it said the token "is printed when the daemon starts": under systemd it
    # is not (the journal is readable by a whole group), and the page named no path.
    async with aiohttp.ClientSession() as s, s.get(f"{stack.url}/login") as r:
        page = await r.text()
    assert "sudo cat /var/lib/my-agent/web_token" in page and ".my_agent/web_token" in page
    assert "on a terminal" in page


async def test_search_filters_reach_the_engine(stack: Stack, client) -> None:
    await stack.deliver_telegram("the quokka enclosure needs shade")
    conv = await stack.services.conversations.create("web")
    await stack.services.conversations.append_turn(conv.id, "user", "quokka photos please")
    async with client.get(f"{stack.url}/api/search", params={"q": "quokka"}) as r:
        assert {x["channel"] for x in (await r.json())["results"]} == {"web", "telegram"}
    params = {"q": "quokka", "channel": "telegram"}
    async with client.get(f"{stack.url}/api/search", params=params) as r:
        assert {x["channel"] for x in (await r.json())["results"]} == {"telegram"}
    params = {"q": "quokka", "to": "2000-01-01"}
    async with client.get(f"{stack.url}/api/search", params=params) as r:
        assert (await r.json())["results"] == []
    async with client.get(f"{stack.url}/api/search", params={"q": "quokka", "cursor": "x"}) as r:
        assert r.status == 400
    params = {"q": "quokka", "channel": " Telegram "}  # channel names in any case
    async with client.get(f"{stack.url}/api/search", params=params) as r:
        assert {x["channel"] for x in (await r.json())["results"]} == {"telegram"}
    # Regression: a date that is not one was compared as text and found nothing, silently.
    for key, bad in (("from", "2026-13-01"), ("to", "yesterday")):
        async with client.get(f"{stack.url}/api/search", params={"q": "quokka", key: bad}) as r:
            assert r.status == 400
            error = (await r.json())["error"]
            assert error.startswith(f"{key} is not an ISO date") and bad in error
    # Regression: a reversed range named the search engine's date_from / date_to, not
    # this API's own parameters.
    params = {"q": "quokka", "from": "2026-03-10", "to": "2026-03-01"}
    async with client.get(f"{stack.url}/api/search", params=params) as r:
        assert r.status == 400
        assert (await r.json())["error"] == "from 2026-03-10 is after to 2026-03-01"


async def test_search_dates_are_the_owners_days_and_a_channel_is_checked(
    stack: Stack, client, monkeypatch
) -> None:
    # Regression: /api/search read a bare date as a UTC day (/search, `my-agent search`
    # and the recall tool read the owner's), and an unknown channel matched nothing,
    # read as "never talked about it".
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    now = datetime.now(UTC)
    zone = "Pacific/Kiritimati" if now.hour >= 12 else "Etc/GMT+12"  # another day there
    owner_day = now.astimezone(ZoneInfo(zone)).date().isoformat()
    assert owner_day != now.date().isoformat()
    config = stack.services.config
    owner = config.owner.model_copy(update={"timezone": zone})
    monkeypatch.setattr(stack.services, "config", config.model_copy(update={"owner": owner}))
    conv = await stack.services.conversations.create("web")
    await stack.services.conversations.append_turn(conv.id, "user", "the wombat burrow")
    params = {"q": "wombat", "from": owner_day, "to": owner_day}
    async with client.get(f"{stack.url}/api/search", params=params) as r:
        assert [x["conversation_id"] for x in (await r.json())["results"]] == [conv.id]
    async with client.get(f"{stack.url}/api/search", params={"q": "wombat", "channel": "tg"}) as r:
        assert r.status == 400
        assert (await r.json())["error"].startswith("channel: 'tg' is not a channel")


async def test_conversations_and_search_refuse_an_unknown_channel_alike(
    stack: Stack, client
) -> None:
    # Regression: /api/conversations?channel=sms listed nothing (200, as if there were no
    # conversations there) while /api/search answered 400; and both listed "loopback",
    # an ingress for scripts and tests, among the channels to use.
    await stack.deliver_telegram("the marmot census")
    said = "channel: 'sms' is not a channel (one of web, telegram, email)"
    for path, params in (("conversations", {}), ("search", {"q": "marmot"})):
        async with client.get(f"{stack.url}/api/{path}", params=params | {"channel": "sms"}) as r:
            assert r.status == 400
            assert (await r.json())["error"] == said
    params = {"channel": " Telegram "}
    async with client.get(f"{stack.url}/api/conversations", params=params) as r:
        assert [c["channel"] for c in (await r.json())["conversations"]] == ["telegram"]


async def test_search_within_one_conversation(stack: Stack, client) -> None:
    # Regression: conversation= was ignored (every conversation searched), so an id that
    # names none answered with everything instead of saying so.
    first = await stack.services.conversations.create("web")
    await stack.services.conversations.append_turn(first.id, "user", "the heron nest")
    second = await stack.services.conversations.create("web")
    await stack.services.conversations.append_turn(second.id, "user", "a heron at dusk")
    async with client.get(f"{stack.url}/api/search", params={"q": "heron"}) as r:
        assert {x["conversation_id"] for x in (await r.json())["results"]} == {
            first.id,
            second.id,
        }
    params = {"q": "heron", "conversation": second.id}
    async with client.get(f"{stack.url}/api/search", params=params) as r:
        assert [x["conversation_id"] for x in (await r.json())["results"]] == [second.id]
    params = {"q": "heron", "conversation": "conv-nope"}
    async with client.get(f"{stack.url}/api/search", params=params) as r:
        assert r.status == 404
        assert (await r.json())["error"] == "conversation: no conversation 'conv-nope'"


async def test_a_new_forwarded_address_per_guess_does_not_escape_the_limit(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: from 127.0.0.1 (no proxy there) a process wrote a new X-Forwarded-For
    # per try and was never limited, filling the limiter's table (scanned on every try
    # past 10,000 clients) and the log (a warning per try). Every client a local peer
    # names now shares the peer's ceiling, and a refused client is told once a minute.
    limit = stack.config.channels.web.login_attempts_per_minute
    statuses: list[int] = []
    async with aiohttp.ClientSession() as s:
        for i in range(limit * 20 + 5):
            forged = {"X-Forwarded-For": f"198.18.{i // 250}.{i % 250}"}
            async with s.post(f"{stack.url}/login", json={"token": "guess"}, headers=forged) as r:
                statuses.append(r.status)
    assert statuses[: limit * 20] == [401] * (limit * 20)
    assert statuses[limit * 20 :] == [429] * 5
    told = [r for r in caplog.records if "rate limited" in r.getMessage()]
    assert 1 <= len(told) <= 5  # one per refused client (each here refused once)


async def test_external_pages_list_every_party_the_waiting_ones_first(stack: Stack, client) -> None:
    # Regression (session 41): /api/external listed the 200 most recently active parties
    # and no more, so the longest-waiting escalations (of parties quiet since) could not
    # be reached from the dashboard while its badge counted them. Pages (limit, offset,
    # total) list everyone; parties with a pending escalation come first.
    for n in range(5):
        await stack.deliver_telegram(f"hello {n}", sender_id=f"90{n}", name=f"Party {n}")
    parties = {p.party_key: p for p in await stack.services.external.list_parties()}
    for key in ("901", "902", "903", "904"):  # all answered but the oldest
        await stack.services.external.resolve_escalations(parties[key].id, "replied")
    pages = []
    for offset in (0, 2, 4):
        async with client.get(
            f"{stack.url}/api/external", params={"limit": 2, "offset": offset}
        ) as r:
            assert r.status == 200
            pages.append(await r.json())
    assert [page["total"] for page in pages] == [5, 5, 5]
    assert [page["hasMore"] for page in pages] == [True, True, False]
    listed = [p for page in pages for p in page["parties"]]
    # the rest newest first (within a millisecond, by id: the order is total)
    now = await stack.services.external.list_parties()
    rest = sorted((p for p in now if p.party_key != "900"), key=lambda p: p.id)
    rest.sort(key=lambda p: p.updated, reverse=True)
    assert [p["identity"] for p in listed] == ["900", *(p.party_key for p in rest)]
    assert [e["text"] for e in listed[0]["escalations"]] and not listed[1]["escalations"]
    async with client.get(f"{stack.url}/api/external", params={"limit": "all"}) as r:
        assert r.status == 400
