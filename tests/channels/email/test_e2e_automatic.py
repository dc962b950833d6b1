"""End to end: automatic mail is recorded and never answered; what the assistant answers
on its own to a third party says that it is automatic (RFC 3834), so that their
auto-responder does not answer it in turn."""

from __future__ import annotations

import asyncio
from email.message import EmailMessage
from pathlib import Path

from tests.channels.email.conftest import USER, PymapServer, SmtpServer, append
from tests.channels.email.helpers import text_of
from tests.channels.email.stack import (
    FRIEND,
    OWNER,
    Stack,
    drain,
    open_with_friend,
    owner_mail,
    wait_ref,
)


def sent_to(smtp: SmtpServer, address: str) -> list[EmailMessage]:
    return [m for _, m in smtp.capture.messages if m["To"] == address]


async def test_exchange_out_of_office_replies_are_not_answered(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # Exchange's out-of-office reply carries no Auto-Submitted header, only
    # X-Auto-Response-Suppress and an "Automatic reply:" subject: a known contact's was
    # answered by the model, whose answer their Exchange answered again (a mail loop).
    folder, stack = await open_with_friend(pymap, smtp, tmp_path, stacks)
    await append(pymap.port, folder, owner_mail(1, "Plan the trip.", subject="Trip"))
    await append(
        pymap.port, folder, owner_mail(2, "Dinner on Friday?", subject="Dinner", sender=FRIEND)
    )
    await smtp.capture.wait_for(2)
    [to_owner] = sent_to(smtp, OWNER)
    [to_friend] = sent_to(smtp, FRIEND)
    away = "I am out of the office until Monday."
    owner_away = owner_mail(
        3, away, subject="Automatic reply: Re: Trip", in_reply_to=to_owner["Message-ID"]
    )
    friend_away = owner_mail(
        4,
        away,
        subject="Automatic reply: Re: Dinner",
        sender=FRIEND,
        in_reply_to=to_friend["Message-ID"],
    )
    # The owner's ordinary mail from Outlook may carry the header too: it is answered.
    outlook = owner_mail(5, "Also book a hotel.", subject="Hotel")
    for mail in (owner_away, friend_away, outlook):
        mail["X-Auto-Response-Suppress"] = "All"
        await append(pymap.port, folder, mail)
    conv = await wait_ref(stack, "<e2e-1@example.org>")
    assert await wait_ref(stack, "<e2e-3@example.org>") == conv  # recorded, in its thread
    await wait_ref(stack, "<e2e-5@example.org>")
    await smtp.capture.wait_for(3)
    async with asyncio.timeout(10):
        while True:
            [party] = await stack.services.external.list_parties()
            said = await stack.services.external.messages(party.id)
            if any(str(m["content"]).endswith(away) for m in said):
                break
            await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # time for any (wrong) answer to be generated and queued
    await drain(stack)
    assert len(sent_to(smtp, FRIEND)) == 1
    # the answers to the owner (an escalation of the friend's notice threads under none)
    assert [m["In-Reply-To"] for m in sent_to(smtp, OWNER) if m["In-Reply-To"]] == [
        "<e2e-1@example.org>",
        "<e2e-5@example.org>",
    ]


async def test_automatic_answers_to_a_third_party_say_so(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # Only acknowledgements carried Auto-Submitted: auto-replied; the model's answer to a
    # known contact and the answer to a stranger's command went out as if a person wrote
    # them, and their auto-responder answered. The owner's own words (/reply) are no
    # automatic mail, and neither are the replies to the owner.
    folder, stack = await open_with_friend(pymap, smtp, tmp_path, stacks)
    await append(
        pymap.port, folder, owner_mail(10, "Dinner on Friday?", subject="Dinner", sender=FRIEND)
    )
    await append(
        pymap.port,
        folder,
        owner_mail(11, "/help", subject="Help", sender="stranger@example.org", auth=None),
    )
    await smtp.capture.wait_for(2)
    [party] = [p for p in await stack.services.external.list_parties() if p.party_key == FRIEND]
    await append(
        pymap.port, folder, owner_mail(12, f"/reply {party.id} See you there!", subject="x")
    )
    await smtp.capture.wait_for(4)
    await drain(stack)
    [model_answer, relayed] = sent_to(smtp, FRIEND)
    [command_answer] = sent_to(smtp, "stranger@example.org")
    assert model_answer["Auto-Submitted"] == "auto-replied"
    assert command_answer["Auto-Submitted"] == "auto-replied"
    # and Exchange's own mark, which its out-of-office assistant heeds (session 29)
    for automatic in (model_answer, command_answer):
        assert automatic["X-Auto-Response-Suppress"] == "OOF, AutoReply"
    assert "See you there!" in text_of(relayed)
    assert relayed["Auto-Submitted"] is None and relayed["X-Auto-Response-Suppress"] is None
    assert all(m["Auto-Submitted"] is None for m in sent_to(smtp, OWNER))


async def test_mail_that_looped_back_through_our_mailbox_is_not_answered(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # A known contact's mail that a forwarding rule of our own mailbox sent round and
    # back (Exchange's X-MS-Exchange-Inbox-Rules-Loop, X-Loop, naming our address) was
    # answered like a new mail: each answer went round the loop again.
    folder, stack = await open_with_friend(pymap, smtp, tmp_path, stacks)
    exchange = owner_mail(20, "Dinner on Friday?", subject="Dinner", sender=FRIEND)
    exchange["X-MS-Exchange-Inbox-Rules-Loop"] = USER
    procmail = owner_mail(21, "Lunch on Monday?", subject="Lunch", sender=FRIEND)
    procmail["X-Loop"] = f"<{USER.upper()}>"
    elsewhere = owner_mail(22, "Tea on Sunday?", subject="Tea", sender=FRIEND)
    elsewhere["X-MS-Exchange-Inbox-Rules-Loop"] = "friend-old@example.net"  # not ours
    for mail in (exchange, procmail, elsewhere):
        await append(pymap.port, folder, mail)
    async with asyncio.timeout(10):
        while True:
            # The friend's record is made by the first of the three mails: it may not be
            # there yet (seen once the test IMAP server answered fast, session 29).
            parties = await stack.services.external.list_parties()
            said = await stack.services.external.messages(parties[0].id) if parties else []
            if sum(m["direction"] == "in" for m in said) == 3:
                assert len(parties) == 1
                break
            await asyncio.sleep(0.05)
    await smtp.capture.wait_for(1)
    await asyncio.sleep(1.0)  # time for any (wrong) answer to be generated and queued
    await drain(stack)
    [answer] = sent_to(smtp, FRIEND)
    assert answer["In-Reply-To"] == "<e2e-22@example.org>"


async def test_an_out_of_office_reply_without_any_header_is_not_answered(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # A vacation script (a hosting panel's, an old Exchange rule) that sets no header
    # at all, only its subject: the owner's was answered like the owner's own mail,
    # and the script answered that answer again (a mail loop, one turn a round).
    folder, stack = await open_with_friend(pymap, smtp, tmp_path, stacks)
    await append(pymap.port, folder, owner_mail(1, "Plan the trip.", subject="Trip"))
    [to_owner] = await smtp.capture.wait_for(1)
    away = owner_mail(
        2,
        "I am away until Monday, with limited access to e-mail.",
        subject="Out of Office: Re: Trip",
        in_reply_to=to_owner["Message-ID"],
    )
    await append(pymap.port, folder, away)
    # a person's reply that merely starts like one is answered
    later = owner_mail(
        3,
        "Please move everything to next week.",
        subject="Out of office next week: plans",
        in_reply_to=to_owner["Message-ID"],
    )
    await append(pymap.port, folder, later)
    conv = await wait_ref(stack, "<e2e-1@example.org>")
    assert await wait_ref(stack, "<e2e-2@example.org>") == conv  # recorded, in its thread
    await wait_ref(stack, "<e2e-3@example.org>")
    await smtp.capture.wait_for(2)
    await asyncio.sleep(1.0)  # time for any (wrong) answer to be generated and queued
    await drain(stack)
    assert [m["In-Reply-To"] for m in sent_to(smtp, OWNER)] == [
        "<e2e-1@example.org>",
        "<e2e-3@example.org>",
    ]
