"""The subject of a mail reaches the model, labelled, once per thread: the model saw only
the body, and "Trip planning" / "Find me a train to Lisbon" lost what the train was for."""

from __future__ import annotations

from pathlib import Path

from bot.events import EMPTY_MESSAGE_LABEL, OutboundMessage
from bot.keyword_titles import keyword_title, keyword_topics
from channels.email.adapter import EmailChannel
from channels.email.inbound import subject_line
from tests.channels.email.conftest import FakeHost, PymapServer, SmtpServer, append, create_folder
from tests.channels.email.helpers import mail_id, text_of
from tests.channels.email.stack import (
    Stack,
    open_in_new_folder,
    open_with_friend,
    owner_mail,
    wait_ref,
)
from tests.channels.email.test_adapter import OWNER, mail, make_config, start


async def test_the_subject_is_a_labelled_first_line_when_it_says_something(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    folder = await create_folder(pymap.port)
    host = FakeHost()
    channel = await start(channels, make_config(tmp_path, pymap.port, smtp.port, folder), host)
    await append(pymap.port, folder, mail(1, subject="Trip planning", body="Find me a train."))
    [first] = await host.wait_for(1)
    assert first.text == "Subject: Trip planning\n\nFind me a train."
    assert first.subject == "Trip planning"  # threading still goes by the header
    assert "full_body" not in first.metadata  # nothing stripped: the text has the body
    sent = await channel.send(
        OutboundMessage(
            channel="email",
            chat_id=OWNER,
            text="Which day?",
            in_reply_to=first.message_ref,
            subject=first.subject,
        )
    )
    ours = sent.message_ref
    assert ours is not None
    replies = [
        # "Re:" the same subject: it only repeats the thread's, no line
        mail(2, subject="Re: Trip planning", body="Friday.", headers={"In-Reply-To": ours}),
        # a reply that changes the subject says something new
        mail(
            3,
            subject="RE: Trip planning - now Porto",
            body="Make it Porto.",
            headers={"In-Reply-To": ours},
        ),
        # a reply to a mail we do not know (sent before a restart): taken as a repeat
        mail(4, subject="Re: Budget", body="Fine.", headers={"In-Reply-To": "<old@x.com>"}),
        # a bare "Re:" says nothing, whatever the thread's subject was
        mail(9, subject="Re:", body="Sure.", headers={"In-Reply-To": ours}),
        # a command stays exactly what was typed
        mail(5, subject="Status please", body="/status"),
        # the body already starts with the subject: not twice
        mail(6, subject="Lunch on Friday?", body="Lunch on Friday? At one."),
        # a forward's subject says what it is
        mail(7, subject="Fwd: Invoice 42", body="Please pay this."),
        # the subject is the whole message: as before, without a label
        mail(8, subject="Book a table for 8 tonight", body=""),
    ]
    for item in replies:
        await append(pymap.port, folder, item)
    got = {mail_id(m.message_id): m.text for m in (await host.wait_for(9))[1:]}
    assert got == {
        "<m2@example.org>": "Friday.",
        "<m3@example.org>": "Subject: RE: Trip planning - now Porto\n\nMake it Porto.",
        "<m4@example.org>": "Fine.",
        "<m9@example.org>": "Sure.",
        "<m5@example.org>": "/status",
        "<m6@example.org>": "Lunch on Friday? At one.",
        "<m7@example.org>": "Subject: Fwd: Invoice 42\n\nPlease pay this.",
        "<m8@example.org>": "Book a table for 8 tonight",
    }


async def test_the_stored_turn_is_what_the_model_is_shown(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # With the real core: the subject line is in the stored turn (the model's context is
    # built from it, and search finds the mail by its subject), once per thread, and
    # threading still goes by the headers.
    folder, stack = await open_with_friend(pymap, smtp, tmp_path, stacks)
    await append(pymap.port, folder, owner_mail(1, "Find me a train.", subject="Lisbon trip"))
    [reply] = await smtp.capture.wait_for(1)
    answer = owner_mail(2, "Friday.", subject="Re: Lisbon trip", in_reply_to=reply["Message-ID"])
    await append(pymap.port, folder, answer)
    friend = owner_mail(3, "Dinner at eight?", subject="Friday", sender="friend@example.net")
    await append(pymap.port, folder, friend)
    await smtp.capture.wait_for(3)
    conv = await wait_ref(stack, "<e2e-1@example.org>")
    assert await wait_ref(stack, "<e2e-2@example.org>") == conv
    turns = [
        line["content"]
        for line in stack.services.store.read_lines(conv)
        if line.get("type") == "turn" and line.get("role") == "user"
    ]
    assert turns == ["Subject: Lisbon trip\n\nFind me a train.", "Friday."]
    page = await stack.services.search.search("Lisbon")
    assert conv in {r.conversation_id for r in page.results}
    [party] = await stack.services.external.list_parties()
    said = [m["content"] for m in await stack.services.external.messages(party.id)]
    assert "Subject: Friday\n\nDinner at eight?" in said


def test_the_label_is_no_keyword_of_the_conversation() -> None:
    # The "Subject" of the label was the title word and topic of every mail thread.
    turns = [
        ("user", "Subject: Lisbon trip\n\nFind me a train to Lisbon next Friday.", None),
        ("assistant", "There is one at nine.", None),
    ]
    assert "Subject" not in keyword_title(turns)
    assert "subject" not in keyword_topics(turns)
    assert "Lisbon" in keyword_title(turns)


async def test_the_label_recalls_nothing_in_the_offline_reply(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # The offline brain recalls by the message's words: "Subject", in every mail's turn,
    # recalled every earlier mail as related to the new one.
    folder, _ = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    await append(pymap.port, folder, owner_mail(1, "Feed the zebrafish.", subject="Pets"))
    await smtp.capture.wait_for(1)
    await append(pymap.port, folder, owner_mail(2, "Order the pelican cake.", subject="Party"))
    second = (await smtp.capture.wait_for(2))[1]
    assert "Nothing related turned up" in text_of(second)
    # the subject's own words are still recalled by
    await append(pymap.port, folder, owner_mail(3, "What do they eat?", subject="Pets"))
    third = (await smtp.capture.wait_for(3))[2]
    assert "zebrafish" in text_of(third)


def test_a_subject_the_text_only_begins_like_is_still_shown() -> None:
    # "Tax" over "Taxi to the airport at 6?" was taken for a text that starts with its
    # subject (the letters matched), and the model never saw what the mail was about.
    assert subject_line("Tax", "Taxi to the airport at 6?", None) == "Subject: Tax"
    assert subject_line("Train", "Trains to Porto?", None) == "Subject: Train"
    # a text that does start with it, as words, still gets no line
    assert subject_line("Taxi", "Taxi to the airport at 6?", None) is None
    assert subject_line("Taxi!", "Taxi! To the airport.", None) is None
    assert subject_line("Trip planning", "trip  planning: Lisbon", None) is None


async def test_the_owners_blank_mail_is_labelled_as_telegram_labels_it(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    # Regression: the owner's mail of no subject and a blank body was stored as an empty
    # user turn, where Telegram stores "[empty message]" for the same thing.
    folder = await create_folder(pymap.port)
    host = FakeHost()
    await start(channels, make_config(tmp_path, pymap.port, smtp.port, folder), host)
    await append(pymap.port, folder, mail(1, subject="", body="  \n\n \n"))
    # a third party's stays as it came (their file keeps what they sent)
    await append(pymap.port, folder, mail(2, sender="ann@example.org", subject="", body="\n"))
    got = {mail_id(m.message_id): m for m in await host.wait_for(2)}
    blank = got["<m1@example.org>"]
    assert blank.text == EMPTY_MESSAGE_LABEL
    # the rest of the mail is as before: no subject, its id and headers, no "full body"
    assert blank.subject is None and blank.message_ref == "<m1@example.org>"
    assert blank.sender_id == OWNER and blank.identity_verified
    assert blank.metadata["to"] and "full_body" not in blank.metadata
    assert got["<m2@example.org>"].text == ""
