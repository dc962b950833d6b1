"""End to end, a third party's answer by e-mail carries the threading of the mail it
answers (In-Reply-To, the whole References chain, Outlook's Thread-Index), sent live,
after a restart that kept it waiting in the outbox, and made after a restart that found
it owed (bot/party_resume.py). Before session 30 the party's paths passed only the
Message-ID and Reply-To: live the channel's memory of the mail made up for it, after a
restart Outlook filed the answer in a conversation of its own and References named the
mail alone."""

from __future__ import annotations

import asyncio
import base64
from email.message import EmailMessage
from pathlib import Path

from bot.config.model import AppConfig
from bot.party_resume import resume_known_parties
from channels.email.thread_index import read_thread_index
from tests.channels.email.conftest import USER, PymapServer, SmtpServer, append
from tests.channels.email.helpers import text_of
from tests.channels.email.stack import (
    FRIEND,
    Stack,
    knows_friend,
    open_in_new_folder,
    open_with_friend,
    owner_mail,
    start_again,
    stop_stack,
)

ROOT = bytes([1, 0xDB, 0x67, 0x4C, 0x46, 0x71]) + bytes(range(16))  # Outlook's thread
CHAIN = "<start@example.net> <middle@example.net>"  # what the friend's mail answers
CAROL = "carol@example.net"
DAN = "dan@example.net"


def friends_outlook_reply(n: int, body: str) -> EmailMessage:
    """The known contact's Outlook reply in a thread of theirs: References, In-Reply-To
    and a Thread-Index one block longer than the thread's."""
    msg = owner_mail(
        n,
        body,
        subject="RE: Dinner",
        sender=FRIEND,
        in_reply_to="<middle@example.net>",
        references=CHAIN,
    )
    msg["Thread-Index"] = base64.b64encode(ROOT + bytes(5)).decode()
    msg["Thread-Topic"] = "Dinner"
    return msg


def assert_threaded(answer: EmailMessage, n: int) -> None:
    assert answer["In-Reply-To"] == f"<e2e-{n}@example.org>"
    assert answer["References"].split() == [*CHAIN.split(), f"<e2e-{n}@example.org>"]
    index = read_thread_index(answer["Thread-Index"] or "")
    assert index is not None and index[:22] == ROOT and len(index) == 27
    assert answer["Thread-Topic"] == "Dinner"


async def wait_pending(stack: Stack) -> None:
    async with asyncio.timeout(30):
        while not await stack.services.outbox.pending_count():
            await asyncio.sleep(0.05)


async def test_a_contacts_answer_keeps_the_thread_live_and_across_a_restart(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, stack = await open_with_friend(pymap, smtp, tmp_path, stacks)
    await append(pymap.port, folder, friends_outlook_reply(80, "Friday at eight?"))
    [live] = await smtp.capture.wait_for(1)
    assert_threaded(live, 80)
    # The SMTP server is down: the answer waits in the outbox over a restart, and the
    # channel's memory of the mail it answers is gone when it goes.
    await smtp.stop()
    await append(pymap.port, folder, friends_outlook_reply(81, "Or Saturday?"))
    await wait_pending(stack)
    await stop_stack(stack, stacks)
    await smtp.start()  # same port
    await start_again(stack, stacks)
    [_, waited] = await smtp.capture.wait_for(2)
    assert_threaded(waited, 81)


async def test_an_owed_answer_made_after_a_restart_keeps_the_thread(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, stack = await open_with_friend(pymap, smtp, tmp_path, stacks)
    stack.services.replies.queue.accepting = False  # stopping: the answer is not made
    await append(pymap.port, folder, friends_outlook_reply(82, "Friday at eight?"))
    async with asyncio.timeout(30):
        while not await stack.services.external.list_parties():
            await asyncio.sleep(0.05)
    await stop_stack(stack, stacks)
    again = await start_again(stack, stacks)
    # as bot/daemon.py does at start: the contact's message is owed an answer
    assert await resume_known_parties(again.services) == 1
    [owed] = await smtp.capture.wait_for(1)
    assert_threaded(owed, 82)


def answers_all(config: AppConfig) -> None:
    """:data:`FRIEND` is a known contact, and a reply goes to all a mail's recipients."""
    knows_friend(config)
    assert config.channels.email is not None
    config.channels.email.reply_all = True


def friends_mail_to_us_and_carol(n: int, body: str) -> EmailMessage:
    """The known contact's mail to us, Carol in To beside us and Dan in Cc."""
    msg = owner_mail(n, body, subject="Dinner", sender=FRIEND)
    msg.replace_header("To", f"My Assistant <{USER}>, Carol <{CAROL}>")
    msg["Cc"] = f"Dan <{DAN}>"
    return msg


def recipients_of(mail: EmailMessage) -> tuple[list[str], list[str]]:
    return (
        [a.addr_spec for a in mail["To"].addresses],
        [a.addr_spec for a in mail["Cc"].addresses] if mail["Cc"] else [],
    )


async def test_an_owed_answer_made_after_a_restart_goes_to_all_as_the_live_one(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # Regression: the party's file kept no To/Cc, and the channel's memory of the mail is
    # gone after a restart: a contact's answer owed then went to the sender alone where
    # the live one (reply_all) went to Carol and Dan too.
    folder, stack = await open_in_new_folder(
        pymap, smtp, tmp_path, stacks, answers_all, answers_known=True
    )
    await append(pymap.port, folder, friends_mail_to_us_and_carol(83, "Friday at eight?"))
    [live] = await smtp.capture.wait_for(1)
    assert recipients_of(live) == ([FRIEND, CAROL], [DAN])
    stack.services.replies.queue.accepting = False  # stopping: the next is not answered
    await append(pymap.port, folder, friends_mail_to_us_and_carol(84, "Or Saturday?"))
    [party] = await stack.services.external.list_parties()
    async with asyncio.timeout(30):
        while len(await stack.services.external.history(party)) < 3:
            await asyncio.sleep(0.05)
    await stop_stack(stack, stacks)
    again = await start_again(stack, stacks)
    assert await resume_known_parties(again.services) == 1
    [_, owed] = await smtp.capture.wait_for(2)
    assert owed["In-Reply-To"] == "<e2e-84@example.org>"
    assert recipients_of(owed) == recipients_of(live)
    envelopes = [sorted(e.rcpt_tos) for e, _ in smtp.capture.messages]
    assert envelopes == [sorted([FRIEND, CAROL, DAN])] * 2


async def test_the_owners_reply_to_a_strangers_mail_goes_to_them_alone(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # Regression (session 40): with reply_all, the owner's /reply to a stranger's mail
    # went to everyone the stranger put in To and Cc (Carol, Dan), while the escalation
    # and the confirmation named the stranger alone.
    def replies_to_all(config: AppConfig) -> None:
        assert config.channels.email is not None
        config.channels.email.reply_all = True

    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks, replies_to_all)
    eve = "eve@stranger.example"
    mail = owner_mail(85, "Is the owner free next week?", subject="Next week", sender=eve)
    mail.replace_header("From", f"Eve <{eve}>")
    mail.replace_header("To", f"My Assistant <{USER}>, Carol <{CAROL}>")
    mail["Cc"] = f"Dan <{DAN}>"
    await append(pymap.port, folder, mail)
    async with asyncio.timeout(30):
        while not await stack.services.external.pending_escalations():
            await asyncio.sleep(0.05)
    [party] = await stack.services.external.list_parties()
    await append(pymap.port, folder, owner_mail(86, f"/reply {party.id} I am off sick"))
    async with asyncio.timeout(30):
        while not any("off sick" in text_of(m) for _, m in smtp.capture.messages):
            await asyncio.sleep(0.05)
    [(envelope, sent)] = [(e, m) for e, m in smtp.capture.messages if "off sick" in text_of(m)]
    assert recipients_of(sent) == ([eve], [])
    assert envelope.rcpt_tos == [eve]
    assert sent["In-Reply-To"] == "<e2e-85@example.org>"  # still in her thread


async def test_the_owners_replyall_goes_to_the_stranger_and_everyone_on_their_mail(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # Regression (session 41): the owner had no way to answer everyone on a stranger's
    # mail; /replyall does, as a mail client's reply-all (reply_all off: it is asked).
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    eve = "eve@stranger.example"
    mail = owner_mail(87, "Is the owner free next week?", subject="Next week", sender=eve)
    mail.replace_header("From", f"Eve <{eve}>")
    mail.replace_header("To", f"My Assistant <{USER.upper()}>, Carol <{CAROL}>")
    mail["Cc"] = f"Dan <{DAN}>, Carol again <{CAROL.upper()}>"
    await append(pymap.port, folder, mail)
    async with asyncio.timeout(30):
        while not await stack.services.external.pending_escalations():
            await asyncio.sleep(0.05)
    [party] = await stack.services.external.list_parties()
    await append(pymap.port, folder, owner_mail(88, f"/replyall {party.id} I am off sick"))
    async with asyncio.timeout(30):
        while not any("and to everyone else" in text_of(m) for _, m in smtp.capture.messages):
            await asyncio.sleep(0.05)
    [(envelope, sent)] = [(e, m) for e, m in smtp.capture.messages if "off sick" in text_of(m)]
    assert recipients_of(sent) == ([eve, CAROL], [DAN])
    assert sorted(envelope.rcpt_tos) == sorted([eve, CAROL, DAN])  # not ourselves
    assert sent["In-Reply-To"] == "<e2e-87@example.org>"  # in her thread
    assert sent["Subject"] == "Re: Next week"
    [confirmation] = [m for _, m in smtp.capture.messages if "and to everyone" in text_of(m)]
    assert f"everyone else their message went to: {CAROL}, {DAN}." in text_of(confirmation)
