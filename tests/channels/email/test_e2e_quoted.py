"""End to end: what the model is shown of a mail the owner answers that the conversation
never held (a thread the assistant is brought into, a third party's mail in a reply-all
thread) and of an escalation the owner answers in its thread. Real pymap and aiosmtpd,
the real core, the real Anthropic SDK against the fake Messages API (session 39)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.brain.others_words import QUOTED_LABEL
from bot.config.model import AppConfig
from tests.channels.email.conftest import PymapServer, SmtpServer, append
from tests.channels.email.stack import (
    OWNER,
    Stack,
    open_in_new_folder,
    owner_mail,
    wait_ref,
)

BOB = "bob@else.example"
BOB_SAYS = (
    "On Mon, 13 Jan 2025 at 17:40, Bob Example <bob@else.example> wrote:\n"
    "> Hi! How about dinner at Trattoria Luca, Friday 24 January at 19:30?\n"
    "> I booked a table for four under my name."
)


@pytest.fixture
async def model() -> AsyncIterator[FakeAnthropicAPI]:
    async with FakeAnthropicAPI(fallback="echo") as api:
        yield api


def on_the_model(model: FakeAnthropicAPI, reply_all: bool = False) -> Callable[[AppConfig], None]:
    def adjust(config: AppConfig) -> None:
        config.brain.provider = "anthropic"
        config.brain.base_url = model.base_url
        config.brain.api_key = "test-key"
        config.channels.email.reply_all = reply_all

    return adjust


def asked_with(model: FakeAnthropicAPI, words: str) -> str:
    """The last request to the model whose messages hold ``words``: all of it, as text."""
    found = [r for r in model.requests if words in json.dumps(r.body["messages"])]
    assert found, f"no request to the model holds {words!r}"
    return json.dumps(found[-1].body, ensure_ascii=False)


def user_lines(stack: Stack, conv: str) -> list[Mapping[str, Any]]:
    return [
        line
        for line in stack.services.store.read_lines(conv)
        if line.get("type") == "turn" and line.get("role") == "user"
    ]


async def test_the_mail_the_owner_brings_the_assistant_into_is_shown_to_the_model(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    stacks: list[Stack],
    model: FakeAnthropicAPI,
) -> None:
    # The owner answers Bob's "Dinner Friday" and adds the assistant in Cc: before
    # session 39 the model got "Please put this in my calendar" alone, Bob's proposal
    # stripped as a quote and the subject taken for a repeat of a thread it never saw.
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks, on_the_model(model))
    mail = owner_mail(
        1,
        f"Adding my assistant. Please put this in my calendar and confirm with Bob.\n\n{BOB_SAYS}",
        subject="Re: Dinner Friday",
        in_reply_to="<bob-1@else.example>",
        references="<bob-1@else.example>",
    )
    mail.replace_header("To", f"Bob Example <{BOB}>")
    mail["Cc"] = "My Assistant <bot@example.com>"
    await append(pymap.port, folder, mail)
    await smtp.capture.wait_for(1)
    given = asked_with(model, "Please put this in my calendar")
    assert "Trattoria Luca, Friday 24 January at 19:30" in given
    assert QUOTED_LABEL in given  # labelled as others' words
    assert "Subject: Re: Dinner Friday" in given
    assert "/reply <id> <text>" in given  # the system prompt says what quotes are
    # The turn holds the owner's words; Bob's are kept beside them, not as the owner's
    # (search indexes the turn's content).
    [turn] = user_lines(stack, await wait_ref(stack, "<e2e-1@example.org>"))
    assert "Trattoria" not in turn["content"]
    assert "Trattoria Luca" in turn["metadata"]["quoted"]


async def test_a_third_partys_mail_the_owner_answers_in_a_reply_all_thread_is_shown(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    stacks: list[Stack],
    model: FakeAnthropicAPI,
) -> None:
    # Bob (a stranger: his mail goes to the third-party flow) counter-proposes; the
    # owner answers Bob's mail "Fine by me, please book it". It joined the right
    # conversation, but Bob's words were only in the stripped quote.
    folder, stack = await open_in_new_folder(
        pymap, smtp, tmp_path, stacks, on_the_model(model, reply_all=True)
    )
    first = owner_mail(1, "Please find a dinner slot for Bob and me next week.", subject="Dinner")
    first["Cc"] = f"Bob <{BOB}>"
    await append(pymap.port, folder, first)
    [answer] = await smtp.capture.wait_for(1)
    conv = await wait_ref(stack, "<e2e-1@example.org>")
    bob = owner_mail(
        50,
        "Saturday 1 February, 20:00 at Trattoria Luca instead?",
        subject="Re: Dinner",
        sender=BOB,
        in_reply_to=answer["Message-ID"],
        references=f"<e2e-1@example.org> {answer['Message-ID']}",
    )
    bob.replace_header("Message-ID", "<bob-1@else.example>")
    bob["Cc"] = OWNER
    await append(pymap.port, folder, bob)
    await smtp.capture.wait_for(3)  # Bob's acknowledgement, the owner's escalation
    reply = owner_mail(
        3,
        "Fine by me, please book it.\n\nOn Sun, 19 Jan 2025, Bob <bob@else.example> wrote:\n"
        "> Saturday 1 February, 20:00 at Trattoria Luca instead?",
        subject="Re: Dinner",
        in_reply_to="<bob-1@else.example>",
        references=f"<e2e-1@example.org> {answer['Message-ID']} <bob-1@else.example>",
    )
    reply.replace_header("To", f"Bob <{BOB}>")
    reply["Cc"] = "My Assistant <bot@example.com>"
    await append(pymap.port, folder, reply)
    await smtp.capture.wait_for(4)
    assert await wait_ref(stack, "<e2e-3@example.org>") == conv
    given = asked_with(model, "please book it")
    assert "Saturday 1 February, 20:00 at Trattoria Luca" in given
    assert QUOTED_LABEL in given


async def test_a_quote_of_a_mail_the_conversation_holds_is_not_shown_again(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    stacks: list[Stack],
    model: FakeAnthropicAPI,
) -> None:
    # The owner's answer to the assistant's own mail quotes it: the model has it in the
    # conversation already, and the turn does not keep it twice (full_body has it).
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks, on_the_model(model))
    await append(pymap.port, folder, owner_mail(1, "Find me a train to Lisbon."))
    [answer] = await smtp.capture.wait_for(1)
    await append(
        pymap.port,
        folder,
        owner_mail(
            2,
            "The earlier one, please.\n\nOn Tue, 14 Jan 2025, My Assistant <bot@example.com> "
            "wrote:\n> echo: Find me a train to Lisbon.",
            subject="Re: Trip planning",
            in_reply_to=answer["Message-ID"],
            references=f"<e2e-1@example.org> {answer['Message-ID']}",
        ),
    )
    await smtp.capture.wait_for(2)
    given = asked_with(model, "The earlier one, please.")
    assert QUOTED_LABEL not in given
    [_, turn] = user_lines(stack, await wait_ref(stack, "<e2e-2@example.org>"))
    assert "quoted" not in turn["metadata"]
    assert "full_body" in turn["metadata"]


async def test_the_owners_answer_to_an_escalation_is_given_with_the_escalation(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    stacks: list[Stack],
    model: FakeAnthropicAPI,
) -> None:
    # "Tell them I'm not interested", in the escalation's thread: before session 39 the
    # model got that sentence and a title, never the stranger's message (an event, not a
    # turn, and its quote stripped), nor that a party is answered with /reply.
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks, on_the_model(model))
    await append(
        pymap.port,
        folder,
        owner_mail(
            1,
            "Hello, I'd like to sell you my used Volvo XC90. Call me at 555-0199.",
            subject="Car offer",
            sender="seller@else.example",
        ),
    )
    await smtp.capture.wait_for(2)  # the seller's acknowledgement, the escalation
    escalation = next(m for e, m in smtp.capture.messages if OWNER in e.rcpt_tos)
    quoted = escalation.get_body(("plain",)).get_content().replace("\n", "\n> ")
    await append(
        pymap.port,
        folder,
        owner_mail(
            2,
            f"Tell them I'm not interested.\n\nOn Tue, My Assistant wrote:\n> {quoted}",
            subject="Re: " + escalation["Subject"],
            in_reply_to=escalation["Message-ID"],
            references=escalation["Message-ID"],
        ),
    )
    await smtp.capture.wait_for(3)
    conv = await wait_ref(stack, "<e2e-2@example.org>")
    assert (await stack.services.conversations.require(conv)).identity_key == f"email:{OWNER}"
    given = asked_with(model, "not interested")
    assert "used Volvo XC90" in given
    assert "/reply <id> <text>" in given
    party = escalation.get_body(("plain",)).get_content().split("(id ")[1].split(")")[0]
    assert f"/reply {party} <text>" in given
    # the escalation mail it quotes is the conversation's own: shown once, as the event
    assert QUOTED_LABEL not in given
