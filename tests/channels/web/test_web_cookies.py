"""The session cookie is the instance's own: two daemons on one host (a test instance
beside the real one, on another port) keep their logins apart, and a login made under
the name every instance shared before session 26 is carried over once, not lost."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from yarl import URL

from channels.web.auth import LEGACY_COOKIE_NAME
from tests.channels.web.conftest import login, start_stack, stop_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def status_of(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(f"{url}/api/conversations?limit=1") as r:
        return r.status


async def test_two_daemons_on_one_host_do_not_log_each_other_out(tmp_path: Path) -> None:
    # Regression: cookies are per host, not per port. Both daemons named their cookie
    # my_agent_session, so logging in to the second replaced the first one's session.
    first = await start_stack(tmp_path / "real")
    second = await start_stack(tmp_path / "test")
    try:
        assert first.channel.port != second.channel.port
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
            await login(s, first)
            await login(s, second)  # the same browser, the other port
            assert await status_of(s, first.url) == 200
            assert await status_of(s, second.url) == 200
            async with s.post(
                f"{second.url}/logout", headers={"Origin": second.origin}, allow_redirects=False
            ) as r:
                assert r.status == 303
            assert await status_of(s, second.url) == 401
            assert await status_of(s, first.url) == 200
    finally:
        await stop_stack(second)
        await stop_stack(first)


async def test_the_name_is_stable_across_restarts_and_ports(tmp_path: Path) -> None:
    first = await start_stack(tmp_path / "d")
    name = first.channel.cookie_name
    await stop_stack(first)
    again = await start_stack(tmp_path / "d")
    try:
        assert again.channel.cookie_name == name
        assert name.startswith(LEGACY_COOKIE_NAME + "_")
    finally:
        await stop_stack(again)


async def test_a_login_under_the_old_shared_name_is_carried_over(tmp_path: Path) -> None:
    ours = await start_stack(tmp_path / "ours")
    other = await start_stack(tmp_path / "other")
    try:
        sid = ours.channel.sessions.create()  # a login made before the upgrade
        jar = aiohttp.CookieJar(unsafe=True)
        jar.update_cookies({LEGACY_COOKIE_NAME: sid}, URL(ours.url))
        async with aiohttp.ClientSession(cookie_jar=jar) as s:
            # The other daemon does not know that session: it asks for a login and
            # leaves the cookie alone for the daemon it belongs to.
            async with s.get(f"{other.url}/", allow_redirects=False) as r:
                assert r.status == 303
                assert LEGACY_COOKIE_NAME not in r.cookies
            async with s.get(f"{ours.url}/") as r:
                assert r.status == 200
                assert r.cookies[ours.channel.cookie_name].value == sid
                assert r.cookies[LEGACY_COOKIE_NAME].value == ""  # deleted
            names = {c.key for c in jar}
            assert names == {ours.channel.cookie_name}
            assert await status_of(s, ours.url) == 200  # still logged in, new name only
    finally:
        await stop_stack(other)
        await stop_stack(ours)
