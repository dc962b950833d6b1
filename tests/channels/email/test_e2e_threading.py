"""End to end, threading as clients in the wild do it: replies with In-Reply-To only,
References cut short, Outlook's prefixes, a changed subject, the owner answering from
another address of theirs, and forwards starting their own conversation."""

from __future__ import annotations

import asyncio
from email.message import EmailMessage
from pathlib import Path

from bot.config.model import AppConfig
from tests.channels.email.conftest import USER, PymapServer, SmtpServer, append
from tests.channels.email.helpers import text_of
from tests.channels.email.stack import (
    FRIEND,
    OWNER,
    Stack,
    failed_attempts,
    open_in_new_folder,
    open_with_friend,
    owner_mail,
    start_again,
    stop_stack,
    wait_ref,
)

WORK = "owner@work.example"  # the owner's other address


def two_addresses(config: AppConfig) -> None:
    config.owner.identities["email"] = [OWNER, WORK]


async def test_replies_from_real_clients_find_their_thread(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks, two_addresses)
    await append(pymap.port, folder, owner_mail(1, "Plan a trip to Lisbon.", subject="Trip"))
    [first] = await smtp.capture.wait_for(1)
    conv = await wait_ref(stack, "<e2e-1@example.org>")
    # From the owner's work address, In-Reply-To only, Outlook's German prefix.
    await append(
        pymap.port,
        folder,
        owner_mail(
            2, "Two nights.", subject="AW: Trip", sender=WORK, in_reply_to=first["Message-ID"]
        ),
    )
    second = (await smtp.capture.wait_for(2))[1]
    assert await wait_ref(stack, "<e2e-2@example.org>") == conv
    assert second["To"] == WORK
    assert second["In-Reply-To"] == "<e2e-2@example.org>"
    assert second["References"].split() == [first["Message-ID"], "<e2e-2@example.org>"]
    assert second["Subject"] == "Re: Trip"
    # References cut short by the client (root and last only), "RE[2]:", and a
    # subject changed on the way.
    await append(
        pymap.port,
        folder,
        owner_mail(
            3,
            "Make it Porto instead.",
            subject="RE[2]: Trip - now Porto",
            in_reply_to=second["Message-ID"],
            references=f"<e2e-1@example.org> {second['Message-ID']}",
        ),
    )
    third = (await smtp.capture.wait_for(3))[2]
    assert await wait_ref(stack, "<e2e-3@example.org>") == conv
    assert third["In-Reply-To"] == "<e2e-3@example.org>"
    assert third["References"].split() == [
        "<e2e-1@example.org>",
        second["Message-ID"],
        "<e2e-3@example.org>",
    ]
    assert third["Subject"] == "Re: Trip - now Porto"
    # References only (In-Reply-To lost), the newest unknown to us.
    await append(
        pymap.port,
        folder,
        owner_mail(
            4,
            "And a hotel.",
            subject="Re: Trip - now Porto",
            references=f"{third['Message-ID']} <unknown@elsewhere.example>",
        ),
    )
    await smtp.capture.wait_for(4)
    assert await wait_ref(stack, "<e2e-4@example.org>") == conv
    # The phone drops In-Reply-To and References and keeps the subject it shows, the
    # thread's new one: it joins by subject (session 39: only the first subject, "Trip",
    # was compared, and it started a new conversation).
    phone = owner_mail(5, "And a hotel near the river.", subject="Re: Trip - now Porto")
    await append(pymap.port, folder, phone)
    await smtp.capture.wait_for(5)
    assert await wait_ref(stack, "<e2e-5@example.org>") == conv
    # The owner forwards the assistant's answer to ask about it: a new topic, whose
    # forwarded text the model reads (bot/forwards.py).
    forward = owner_mail(
        6,
        "What is this about?\n\n---------- Forwarded message ---------\n"
        f"From: My Assistant <{first['From']}>\nSubject: {third['Subject']}\n\nPorto it is.",
        subject="Fwd: Re: Trip - now Porto",
        in_reply_to=third["Message-ID"],
        references=f"<e2e-1@example.org> {third['Message-ID']}",
    )
    await append(pymap.port, folder, forward)
    sixth = (await smtp.capture.wait_for(6))[5]
    new = await wait_ref(stack, "<e2e-6@example.org>")
    assert new != conv
    assert sixth["In-Reply-To"] == "<e2e-6@example.org>"
    assert sixth["References"] == "<e2e-6@example.org>"
    [turn] = [
        line
        for line in stack.services.store.read_lines(new)
        if line.get("type") == "turn" and line.get("role") == "user"
    ]
    # (kept apart from the owner's words since session 41, shown to the model labelled)
    assert turn["content"].endswith("What is this about?")
    assert "Porto it is." in turn["metadata"]["forwarded"]["text"]


BOB = "bob@plumbing.example"


def reply_all(config: AppConfig) -> None:
    config.channels.email.reply_all = True


async def test_the_owner_s_reply_all_to_another_s_thread_is_a_conversation_of_its_own(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # Regression (session 39): the owner's reply-all to Bob's own "Invoice" thread, the
    # assistant added in Cc, named references we never saw and took the subject rule:
    # it joined the owner's private "Invoice" conversation, and Bob read the answer
    # written with the lawyer's bill in its context.
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks, reply_all)
    await append(
        pymap.port,
        folder,
        owner_mail(1, "My lawyer's invoice: EUR 5,000. Pay it quietly.", subject="Invoice"),
    )
    await smtp.capture.wait_for(1)
    private = await wait_ref(stack, "<e2e-1@example.org>")
    mail = owner_mail(
        2,
        "Adding my assistant: please pay this.\n\nOn Mon, Bob wrote:\n> Invoice 77: EUR 240.",
        subject="Re: Invoice",
        in_reply_to="<bob-77@plumbing.example>",
        references="<bob-77@plumbing.example>",
    )
    mail.replace_header("To", f"Bob <{BOB}>")
    mail["Cc"] = f"My Assistant <{USER}>"
    await append(pymap.port, folder, mail)
    await smtp.capture.wait_for(2)
    joined = await wait_ref(stack, "<e2e-2@example.org>")
    assert joined != private
    assert BOB in smtp.capture.messages[1][0].rcpt_tos  # reply-all: Bob reads this one
    said = [line.get("content") for line in stack.services.store.read_lines(joined)]
    assert not any("lawyer" in str(text) for text in said)


HOME = "owner@home.example"  # where the owner's mail asks to be answered


def home_too(config: AppConfig) -> None:
    config.owner.identities["email"] = [OWNER, HOME]


async def test_the_owner_s_mail_is_never_answered_at_a_stranger_s_reply_to(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # The owner's signed mail, resent by someone who added a Reply-To of theirs (a DKIM
    # signature that leaves Reply-To out still passes): the answer, written with the
    # owner's context, went to them. It goes to the owner, the only one it is for.
    folder, _ = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    mail = owner_mail(65, "What is my salary again?", subject="Salary")
    mail["Reply-To"] = "Thief <thief@evil.example>"
    await append(pymap.port, folder, mail)
    [reply] = await smtp.capture.wait_for(1)
    assert reply["In-Reply-To"] == "<e2e-65@example.org>"
    assert reply["To"] == OWNER
    assert reply["Cc"] is None
    assert smtp.capture.messages[0][0].rcpt_tos == [OWNER]


async def test_a_reply_goes_to_the_reply_to_the_mail_names(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # The owner writes from one address and asks (Reply-To, RFC 5322 3.6.3) to be
    # answered at another of theirs, as every mail client would: the answer went to the
    # From, also after a restart (the channel's memory of the mail is gone then).
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks, home_too)
    first = owner_mail(60, "Plan a trip to Lisbon.", subject="Trip")
    first["Reply-To"] = f"Owner at home <{HOME}>"
    await append(pymap.port, folder, first)
    [reply] = await smtp.capture.wait_for(1)
    envelope = smtp.capture.messages[0][0]
    assert reply["To"] == HOME
    assert envelope.rcpt_tos == [HOME]
    assert reply["In-Reply-To"] == "<e2e-60@example.org>"
    conv = await wait_ref(stack, "<e2e-60@example.org>")
    # The SMTP server is down; the reply waits in the outbox across a restart.
    await smtp.stop()
    second = owner_mail(61, "Two nights.", subject="Re: Trip", in_reply_to=reply["Message-ID"])
    second["Reply-To"] = HOME
    await append(pymap.port, folder, second)
    assert await wait_ref(stack, "<e2e-61@example.org>") == conv
    # Queued and several failed attempts. Was a fixed 0.5 s after the turn was recorded,
    # which a busy machine could spend before the reply was even queued.
    await failed_attempts(stack, 3)
    assert await stack.services.outbox.pending_count() == 1
    await stop_stack(stack, stacks)
    await smtp.start()  # same port
    await start_again(stack, stacks)
    [_, again] = await smtp.capture.wait_for(2)
    assert again["In-Reply-To"] == "<e2e-61@example.org>"
    assert again["To"] == HOME
    assert smtp.capture.messages[1][0].rcpt_tos == [HOME]


FRIEND_HOME = "friend@home.example"  # where the known contact asks to be answered


def _says(mail: EmailMessage, words: str) -> bool:
    return words in str(text_of(mail))


async def test_a_third_party_is_answered_at_its_reply_to_after_a_restart(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # Regression: the core gave a party's messages no metadata, so only the channel's
    # in-memory copy of their mail knew its Reply-To: an answer sent after a restart (the
    # SMTP server down meanwhile), and the owner's /reply after one, went to the From.
    folder, stack = await open_with_friend(pymap, smtp, tmp_path, stacks)
    await smtp.stop()
    asked = owner_mail(70, "Dinner on Friday?", subject="Dinner", sender=FRIEND)
    asked["Reply-To"] = f"Friend at home <{FRIEND_HOME}>"
    await append(pymap.port, folder, asked)
    await failed_attempts(stack, 1)  # queued, and a failed attempt (was: a fixed 0.3 s)
    await stop_stack(stack, stacks)
    await smtp.start()  # same port
    stack = await start_again(stack, stacks)
    [answer] = await smtp.capture.wait_for(1)
    assert answer["In-Reply-To"] == "<e2e-70@example.org>"
    assert answer["To"] == FRIEND_HOME
    assert smtp.capture.messages[0][0].rcpt_tos == [FRIEND_HOME]
    # The owner's /reply, another restart later, goes there too.
    await stop_stack(stack, stacks)
    stack = await start_again(stack, stacks)
    [party] = await stack.services.external.list_parties()
    await append(pymap.port, folder, owner_mail(71, f"/reply {party.id} See you.", subject="x"))
    async with asyncio.timeout(30):
        while not (relayed := [m for _, m in smtp.capture.messages if _says(m, "See you.")]):
            await asyncio.sleep(0.05)
    [relayed] = relayed
    assert relayed["To"] == FRIEND_HOME
    assert relayed["In-Reply-To"] == "<e2e-70@example.org>"
