"""Command menus after two reloads in quick succession (channels/telegram/menus.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from channels.telegram import menus as menus_module
from channels.telegram.menus import OwnerMenus


async def test_two_quick_reloads_leave_the_latest_owners_menus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first reload's refresh was still setting its scopes when the second began:
    both ran at once, the older finished last, and its owners' menus (and waiting list)
    stayed, with nothing stale left to set them right."""
    calls: list[tuple[list[str], list[str]]] = []
    first_may_finish = asyncio.Event()

    async def set_menus(bot: Any, owner_ids: Sequence[str], former: Sequence[str] = ()) -> set[str]:
        calls.append((list(owner_ids), list(former)))
        if len(calls) == 1:
            await first_may_finish.wait()  # Telegram slow to answer the first reload
        return set(owner_ids)

    monkeypatch.setattr(menus_module, "set_menus", set_menus)
    menus = OwnerMenus(bot=None, owner_ids=["1"])  # type: ignore[arg-type]
    menus.changed(["2"])
    first = asyncio.create_task(menus.refresh())
    await asyncio.sleep(0)
    menus.changed(["3"])
    second = asyncio.create_task(menus.refresh())
    await asyncio.sleep(0.05)
    first_may_finish.set()
    await asyncio.gather(first, second)
    assert calls[-1] == (["3"], ["1", "2"])  # the latest owners, both former ones cleared
    assert menus.waiting == {"3"} and menus.stale is None
