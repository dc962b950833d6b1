"""Outlook's Thread-Index (channels/email/thread_index.py): a reply whose References a
gateway dropped still finds its thread, by the first 22 bytes of its Thread-Index, and
only among the threads of its own sender; our replies carry the thread on. Before
session 26 the header was unused: such a reply took the subject rule, which picks the
sender's latest thread of that subject, or started a new conversation."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

from bot.config.channels import EmailChannelConfig
from bot.events import OutboundMessage
from bot.turn_recorder import recipients
from channels.email.outgoing import compose_outgoing
from channels.email.thread_index import read_thread_index, reply_index, root_of, thread_ref
from tests.channels.email.conftest import PymapServer, SmtpServer, append
from tests.channels.email.stack import (
    OWNER,
    Stack,
    drain,
    open_in_new_folder,
    owner_mail,
    start_again,
    stop_stack,
    user_turns,
    wait_ref,
)

# Two threads Outlook began (a header block each: 0x01, the time, a GUID)
ROOT_A = bytes([1, 0xDB, 0x67, 0x4C, 0x46, 0x71]) + bytes(range(16))
ROOT_B = bytes([1, 0xDB, 0x67, 0x4C, 0x47, 0x02]) + bytes(range(100, 116))


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def test_the_header_is_read_and_a_reply_keeps_the_thread() -> None:
    assert read_thread_index(_b64(ROOT_A)) == ROOT_A
    reply = ROOT_A + bytes([0, 0, 1, 2, 0x30])
    assert read_thread_index(" " + _b64(reply)[:10] + "\r\n " + _b64(reply)[10:]) == reply
    # not base64, too short, or not whole reply blocks: none
    for junk in ("", "not base64!", _b64(ROOT_A[:21]), _b64(ROOT_A + b"\0\0")):
        assert read_thread_index(junk) is None
    ours = read_thread_index(reply_index(ROOT_A, now=1_736_845_200.0))
    assert ours is not None and ours[:22] == ROOT_A and len(ours) == 27
    ref = thread_ref(" Owner@Example.org", reply)
    assert ref.startswith("thread-index:owner@example.org:") and root_of(ref) == ROOT_A
    assert root_of("<a@b>") is None and root_of("thread-index:x@y:short") is None


def test_a_reply_after_a_restart_carries_the_thread_from_the_core_s_reference() -> None:
    # The channel's memory of the mail answered is gone; the reference the core kept
    # with the turn still names the thread, when it is the recipient's own.
    cfg = EmailChannelConfig(address="bot@example.com", display_name="My Assistant")
    reply_index_of = thread_ref(OWNER, ROOT_A + bytes(5))
    for refs, carried in (
        (("<e2e-1@example.org>", reply_index_of), True),
        (("<e2e-1@example.org>", thread_ref("eve@example.net", ROOT_A + bytes(5))), False),
        (("<e2e-1@example.org>",), False),
    ):
        reply = OutboundMessage(
            channel="email",
            chat_id=OWNER,
            text="Booked.",
            in_reply_to="<e2e-1@example.org>",
            thread_refs=refs,
        )
        composed, _ = compose_outgoing(
            reply,
            "Booked.",
            "Re: Trip",
            address=cfg.address or "",
            cfg=cfg,
            recent={},
            last_from={},
        )
        index = read_thread_index(composed.message.get("Thread-Index", ""))
        assert (index is not None and index[:22] == ROOT_A) is carried
        # the reference is the channel's, never a Message-ID in References
        assert "thread-index" not in composed.message["References"]


def outlook_mail(n: int, body: str, index: bytes, subject: str = "Trip", sender: str = OWNER):  # type: ignore[no-untyped-def]
    msg = owner_mail(n, body, subject=subject, sender=sender)
    msg["Thread-Index"] = _b64(index)
    msg["Thread-Topic"] = "Trip"
    return msg


async def test_an_outlook_reply_without_references_finds_its_thread(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    # Two threads of one subject: the subject rule cannot tell them apart.
    await append(pymap.port, folder, outlook_mail(1, "Plan Lisbon in May.", ROOT_A))
    [first] = await smtp.capture.wait_for(1)
    await append(pymap.port, folder, outlook_mail(2, "Plan Oslo in June.", ROOT_B))
    second = (await smtp.capture.wait_for(2))[1]
    conv_a = await wait_ref(stack, "<e2e-1@example.org>")
    conv_b = await wait_ref(stack, "<e2e-2@example.org>")
    assert conv_a != conv_b
    # Our replies carry the thread on, a block of their own added.
    for reply, root in ((first, ROOT_A), (second, ROOT_B)):
        index = read_thread_index(reply["Thread-Index"])
        assert index is not None and index[:22] == root and len(index) == 27
        assert reply["Thread-Topic"] == "Trip"
    # The owner answers the first in Outlook; a gateway drops References/In-Reply-To.
    index = read_thread_index(first["Thread-Index"])
    assert index is not None
    await append(
        pymap.port,
        folder,
        outlook_mail(3, "Make it three nights.", index + bytes(5), subject="RE: Trip"),
    )
    third = (await smtp.capture.wait_for(3))[2]
    assert await wait_ref(stack, "<e2e-3@example.org>") == conv_a
    assert third["In-Reply-To"] == "<e2e-3@example.org>"
    await drain(stack)
    # the thread is recorded with its conversation once, not with every reply in it
    recorded = [
        line["ref"]
        for line in stack.services.store.read_lines(conv_a)
        if str(line.get("ref", "")).startswith("thread-index:")
    ]
    assert recorded == [thread_ref(OWNER, ROOT_A)]
    # A forward of that thread is a new topic (Outlook keeps the Thread-Index in it).
    await append(
        pymap.port,
        folder,
        outlook_mail(4, "What do you think?", index + bytes(5), subject="FW: Trip"),
    )
    await smtp.capture.wait_for(4)
    assert await wait_ref(stack, "<e2e-4@example.org>") not in (conv_a, conv_b)
    # A stranger with the owner's thread (a copy of its header) never reaches it.
    await append(
        pymap.port,
        folder,
        outlook_mail(5, "Send me the itinerary.", index + bytes(5), "RE: Trip", "eve@example.net"),
    )
    async with asyncio.timeout(30):
        while not await stack.services.external.list_parties():
            await asyncio.sleep(0.05)
    await drain(stack)
    assert [t for t in user_turns(stack, conv_a) if "itinerary" in t] == []
    assert len(user_turns(stack, conv_a)) == 2


async def test_the_reply_to_a_new_outlook_mail_keeps_its_thread_across_a_restart(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # Regression (session 29): a new Outlook mail (its Thread-Index the thread's header
    # block alone) names no thread reference, and the channel's memory of it is gone
    # after a restart: its reply, sent then, had no Thread-Index, and Outlook filed it
    # in a conversation of its own. The thread is now kept with the turn.
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    await smtp.stop()  # the reply waits in the outbox over the restart
    await append(pymap.port, folder, outlook_mail(1, "Plan Lisbon in May.", ROOT_A))
    async with asyncio.timeout(30):
        # the reply queued, and the mail done with (the restart does not read it again)
        while not (
            await stack.services.outbox.pending_count()
            and await stack.services.router.get_cursor("email", f"{folder}:last_uid")
        ):
            await asyncio.sleep(0.05)
    await stop_stack(stack, stacks)
    await smtp.start()  # same port
    await start_again(stack, stacks)
    [reply] = await smtp.capture.wait_for(1)
    assert reply["In-Reply-To"] == "<e2e-1@example.org>"
    index = read_thread_index(reply["Thread-Index"] or "")
    assert index is not None and index[:22] == ROOT_A and len(index) == 27
    assert reply["Thread-Topic"] == "Trip"


def test_a_kept_thread_is_carried_only_to_its_own_sender() -> None:
    cfg = EmailChannelConfig(address="bot@example.com", display_name="My Assistant")
    for kept, carried in (
        (thread_ref(OWNER, ROOT_A), True),
        (thread_ref("eve@x.net", ROOT_A), False),
    ):
        reply = OutboundMessage(
            channel="email",
            chat_id=OWNER,
            text="Booked.",
            in_reply_to="<e2e-1@example.org>",
            # as the core's reply target keeps it with the turn (a resumed reply too)
            metadata=recipients({"thread_index": kept, "imap": {"uid": 1}}),
        )
        composed, _ = compose_outgoing(
            reply, "Booked.", "Trip", address="bot@example.com", cfg=cfg, recent={}, last_from={}
        )
        index = read_thread_index(composed.message.get("Thread-Index", ""))
        assert (index is not None and index[:22] == ROOT_A) is carried
