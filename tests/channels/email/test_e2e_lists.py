"""A mailing list's copy of a mail we had directly: the owner writes to a list and Cc's
the assistant, and the list sends its own copy too (same Message-ID, the list's subject
tag and footer, List-Id). Before session 25 the copy became a second conversation ("[team]
Offsite", the owner's words recorded again), and a stranger's list mail was recorded
twice in their file. Real pymap + aiosmtpd and the real core."""

from __future__ import annotations

from email.message import EmailMessage
from pathlib import Path

from tests.channels.email.conftest import PymapServer, SmtpServer, append, create_folder
from tests.channels.email.helpers import text_of
from tests.channels.email.stack import (
    OWNER,
    Stack,
    close_stack,
    drain,
    e2e_config,
    open_in_new_folder,
    open_stack,
    owner_mail,
    user_turns,
    wait_ref,
)

LIST = "team@lists.example.org"
FOOTER = "\n\n--\nteam mailing list\nhttps://lists.example.org/team\n"


def posted(n: int, body: str, subject: str, *, sender: str = OWNER) -> EmailMessage:
    """The mail as its sender posted it: to the list, the assistant in Cc."""
    msg = owner_mail(n, body, subject=subject, sender=sender)
    del msg["To"]
    msg["To"] = LIST
    msg["Cc"] = "bot@example.com"
    return msg


def list_copy(n: int, body: str, subject: str, *, sender: str = OWNER) -> EmailMessage:
    """The list's copy of :func:`posted`: its tag, its footer, its headers."""
    msg = posted(n, body + FOOTER, f"[team] {subject}", sender=sender)
    msg["List-Id"] = "Team <team.lists.example.org>"
    msg["Precedence"] = "list"
    return msg


async def conversation_count(stack: Stack) -> int:
    return len(await stack.services.conversations.list(channel="email", limit=100))


async def test_the_list_copy_of_a_mail_we_had_is_not_recorded_again(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    await append(pymap.port, folder, posted(1, "The offsite moves to March.", "Offsite"))
    await smtp.capture.wait_for(1)
    conv = await wait_ref(stack, "<e2e-1@example.org>")
    await append(pymap.port, folder, list_copy(1, "The offsite moves to March.", "Offsite"))
    # The next mail is answered once the copy before it was handled (UID order).
    await append(pymap.port, folder, owner_mail(2, "And the budget?", subject="Budget"))
    await smtp.capture.wait_for(2)
    await wait_ref(stack, "<e2e-2@example.org>")
    await drain(stack)
    assert user_turns(stack, conv) == ["Subject: Offsite\n\nThe offsite moves to March."]
    assert await conversation_count(stack) == 2  # Offsite, Budget: no "[team] Offsite"
    assert [m["In-Reply-To"] for _, m in smtp.capture.messages] == [
        "<e2e-1@example.org>",
        "<e2e-2@example.org>",
    ]


async def test_a_list_copy_first_or_after_a_restart_joins_the_same_conversation(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # The list was quicker: its copy is recorded (not answered, list mail), then the
    # direct copy joins that conversation and is answered.
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    await append(pymap.port, folder, list_copy(3, "Lunch on Friday?", "Lunch"))
    conv = await wait_ref(stack, "<e2e-3@example.org>")
    await append(pymap.port, folder, posted(3, "Lunch on Friday?", "Lunch"))
    [reply] = await smtp.capture.wait_for(1)
    assert reply["In-Reply-To"] == "<e2e-3@example.org>"
    assert len(user_turns(stack, conv)) == 2
    assert await conversation_count(stack) == 1
    # A restart between the two copies: the channel's memory is gone, the core's
    # Message-IDs are not.
    await drain(stack)
    folder = await create_folder(pymap.port)
    config = e2e_config(tmp_path / "second", pymap.port, smtp.port, folder)
    stack = await open_stack(config)
    await append(pymap.port, folder, posted(4, "Minutes attached.", "Minutes"))
    await smtp.capture.wait_for(2)
    minutes = await wait_ref(stack, "<e2e-4@example.org>")
    await close_stack(stack)
    stack = await open_stack(config)
    stacks.append(stack)
    await append(pymap.port, folder, list_copy(4, "Minutes attached.", "Minutes"))
    await append(pymap.port, folder, owner_mail(5, "Thanks.", subject="Other"))
    await smtp.capture.wait_for(3)
    await wait_ref(stack, "<e2e-5@example.org>")
    assert len(user_turns(stack, minutes)) == 2  # recorded in its thread, not answered
    assert await conversation_count(stack) == 2  # Minutes, Other


async def test_a_stranger_s_list_mail_is_recorded_and_escalated_once(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    await append(pymap.port, folder, owner_mail(6, "Hello.", subject="Hi"))
    await smtp.capture.wait_for(1)
    carol = "carol@example.net"
    await append(pymap.port, folder, posted(7, "Anyone for lunch?", "Lunch", sender=carol))
    await append(pymap.port, folder, list_copy(7, "Anyone for lunch?", "Lunch", sender=carol))
    await append(pymap.port, folder, owner_mail(8, "Anything new?", subject="News"))
    await wait_ref(stack, "<e2e-8@example.org>")
    await drain(stack)
    escalations = [m for _, m in smtp.capture.messages if "/trust" in text_of(m)]
    assert len(escalations) == 1
    [party] = await stack.services.external.list_parties()
    said = [m["content"] for m in await stack.services.external.messages(party.id)]
    assert [s for s in said if "lunch" in s] == ["Subject: Lunch\n\nAnyone for lunch?"]
