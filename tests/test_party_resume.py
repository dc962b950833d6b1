"""A known party's messages left unanswered by a stop are answered after the restart
(bot/party_resume.py): once, in one answer, within a window, only while still known."""

from __future__ import annotations

import asyncio
import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.config import AppConfig
from bot.daemon import start_serving
from bot.events import iso, utcnow
from bot.parties import party_handle
from bot.party_resume import (
    RESUME_WINDOW_SECONDS,
    cut_messages,
    escalate_cut_messages,
    resume_known_parties,
)
from bot.services import close_services, open_services
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import ScriptedBrain, inbound

KIM = "7001"
PARTY = party_handle("telegram", KIM)


def _config(tmp_path: Path) -> AppConfig:
    return telegram_config(tmp_path, trust={"contacts": {"telegram": {KIM: "known"}}})


class Run:
    """One life of the daemon's core, with a recording Telegram channel."""

    def __init__(self, services: Any, brain: ScriptedBrain, telegram: RecordingChannel) -> None:
        self.s = services
        self.brain = brain
        self.telegram = telegram

    @classmethod
    async def start(cls, config: AppConfig, *, resume: bool = True, **at: Any) -> Run:
        brain = ScriptedBrain()
        services = await open_services(config, brain=brain)
        run = cls(services, brain, RecordingChannel("telegram"))
        services.channels["telegram"] = run.telegram  # wired, not started yet
        if resume:  # as bot/daemon.py does, before the channels
            await resume_known_parties(services, **at)
            await escalate_cut_messages(services, **at)
        await attach_channel(services, run.telegram)
        return run

    @classmethod
    async def restarted(cls, config: AppConfig, **at: Any) -> Run:
        """A start (resuming) and then everything it resumed done (settled)."""
        run = await cls.start(config, **at)
        await settle(run.s)
        return run

    async def kim(self, text: str, **fields: Any) -> None:
        await self.s.router.deliver(inbound(text, sender=KIM, sender_name="Kim", **fields))

    async def stop(self) -> None:
        """A stop that cuts the answers in progress (the drain's time is up)."""
        await self.s.replies.queue.drain(timeout=0.05)
        await shutdown_services(self.s)

    def replies(self) -> list[str]:
        return self.telegram.texts("reply")

    def to_kim(self) -> list[str]:
        return [m.text for m in self.telegram.sent if m.chat_id == KIM]


async def test_a_message_cut_by_a_stop_is_answered_once_after_the_restart(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    first = await Run.start(config)
    first.brain.gate = asyncio.Event()  # the model is slow: the stop comes first
    await first.kim("are you open on sunday?", message_id="k1")
    await first.brain.started.wait()
    await first.stop()
    assert first.replies() == []

    second = await Run.restarted(config)
    assert second.replies() == ["re: are you open on sunday?"]
    request = second.brain.requests[0]
    assert (request.profile, request.conversation_id) == ("restricted", None)
    assert request.scope == config.trust.known_scope
    assert second.telegram.of_kind("reply")[0].in_reply_to == "k1"
    await shutdown_services(second.s)

    third = await Run.restarted(config)  # answered: never again
    assert third.replies() == [] and third.brain.requests == []
    await shutdown_services(third.s)


async def test_several_unanswered_messages_get_one_answer(tmp_path: Path) -> None:
    config = _config(tmp_path)
    first = await Run.start(config)
    await first.kim("hello", message_id="k1")
    await settle(first.s)
    first.s.replies.queue.accepting = False  # stopping: queued answers are not taken
    await first.kim("are you open on sunday?", message_id="k2")
    await first.kim("/status", message_id="k3")  # a command: answered as one, at once
    await first.kim("or monday?", message_id="k4")
    await first.stop()
    assert first.replies() == ["re: hello"]

    second = await Run.restarted(config)
    assert second.replies() == ["re: are you open on sunday?\nor monday?"]
    assert second.telegram.of_kind("reply")[0].in_reply_to == "k4"
    history = [(h.role, h.content) for h in second.brain.requests[0].history]
    assert history == [("user", "hello"), ("assistant", "re: hello"), ("user", "/status")]
    await shutdown_services(second.s)


async def test_a_message_answered_before_the_stop_gets_nothing_after(tmp_path: Path) -> None:
    config = _config(tmp_path)
    first = await Run.start(config)
    await first.kim("are you open on sunday?", message_id="k1")
    await settle(first.s)
    await first.stop()
    assert first.replies() == ["re: are you open on sunday?"]

    second = await Run.restarted(config)
    assert second.replies() == [] and second.brain.requests == []
    await shutdown_services(second.s)


async def test_an_answer_queued_but_not_sent_is_not_made_again(tmp_path: Path) -> None:
    config = _config(tmp_path)
    first = await Run.start(config)
    first.telegram.failing = True  # queued, never sent before the stop
    await first.kim("are you open on sunday?", message_id="k1")
    while not first.telegram.attempts:
        await asyncio.sleep(0.01)
    await first.stop()

    second = await Run.restarted(config)
    assert second.brain.requests == []  # the outbox sends the answer it holds
    assert second.replies() == ["re: are you open on sunday?"]
    await shutdown_services(second.s)


async def test_an_answer_in_the_party_file_counts_without_its_outbox_row(
    tmp_path: Path,
) -> None:
    """A lost or replaced state.db does not make a restart answer everything again."""
    config = _config(tmp_path)
    first = await Run.start(config)
    await first.kim("are you open on sunday?", message_id="k1")
    await settle(first.s)
    await first.s.state.execute("DELETE FROM outbox")
    await first.stop()

    second = await Run.restarted(config)
    assert second.brain.requests == []
    await shutdown_services(second.s)


async def test_a_message_older_than_the_window_is_not_answered(tmp_path: Path) -> None:
    config = _config(tmp_path)
    first = await Run.start(config)
    first.s.replies.queue.accepting = False
    await first.kim("are you open on sunday?", message_id="k1")
    await first.stop()

    later = utcnow() + timedelta(seconds=RESUME_WINDOW_SECONDS + 60)
    second = await Run.restarted(config, now=later)
    assert second.brain.requests == [] and second.replies() == []
    await shutdown_services(second.s)


async def test_a_party_blocked_meanwhile_is_not_answered(tmp_path: Path) -> None:
    config = _config(tmp_path)
    first = await Run.start(config)
    first.s.replies.queue.accepting = False
    await first.kim("are you open on sunday?", message_id="k1")
    await first.s.external.set_tier(PARTY, "blocked")  # the owner's /block
    await first.stop()

    second = await Run.restarted(config)
    assert second.brain.requests == [] and second.replies() == []
    await shutdown_services(second.s)


async def test_a_party_taken_off_the_contacts_meanwhile_is_not_answered(
    tmp_path: Path,
) -> None:
    # Regression: the config's "known" stayed in the party's record after the owner
    # took them off trust.contacts, and the restart answered what the stop had cut.
    first = await Run.start(_config(tmp_path))
    first.s.replies.queue.accepting = False
    await first.kim("are you open on sunday?", message_id="k1")
    await first.stop()

    second = await Run.restarted(telegram_config(tmp_path))  # no contacts any more
    assert second.brain.requests == [] and second.replies() == []
    await shutdown_services(second.s)


async def test_messages_from_before_the_party_was_known_are_not_answered(
    tmp_path: Path,
) -> None:
    """Untrusted, they were acknowledged and escalated: a /trust later does not make a
    restart answer them."""
    config = _config(tmp_path)
    first = await Run.start(config)
    lee = party_handle("telegram", "7002")  # not a contact: untrusted
    await first.s.router.deliver(inbound("hi, is this Robin's assistant?", sender="7002"))
    await settle(first.s)
    await first.s.external.set_tier(lee, "known")  # the owner's /trust
    not_for_us = inbound("Auto-reply: away", sender="7002", addressed=False)
    await first.s.router.deliver(not_for_us)  # (an out-of-office reply) gets none
    await first.stop()

    second = await Run.restarted(config)
    assert second.brain.requests == [] and second.replies() == []
    await shutdown_services(second.s)


async def test_an_album_cut_by_a_stop_is_answered_once(tmp_path: Path) -> None:
    config = _config(tmp_path)
    first = await Run.start(config)
    await first.kim("my flat", message_id="k1", metadata={"media_group": "a1"})
    await first.kim(
        "the kitchen", message_id="k2", metadata={"media_group": "a1", "album_part": True}
    )
    await first.stop()  # while the album was collected in memory
    assert first.brain.requests == []

    second = await Run.restarted(config)
    assert second.replies() == ["re: my flat\nthe kitchen"]
    await shutdown_services(second.s)

    third = await Run.restarted(config)
    assert third.brain.requests == []
    await close_services(third.s)


async def test_an_answer_a_crash_kept_from_the_outbox_is_queued_from_the_file(
    tmp_path: Path,
) -> None:
    # The answer is written to the party's file, then queued: a crash between the two
    # left it counted as answered (the file says so) and never sent.
    config = _config(tmp_path)
    first = await Run.start(config)
    await first.kim("are you open on sunday?", message_id="k0")
    await settle(first.s)
    first.telegram.failing = True  # the row is written but not sent: as if it never was
    sent = first.telegram.attempts
    await first.kim("and on monday?", message_id="k1")
    while first.telegram.attempts == sent:
        await asyncio.sleep(0.01)
    assert await first.s.outbox.has_key("telegram:k1:reply")
    await first.s.state.execute("DELETE FROM outbox WHERE dedup_key = 'telegram:k1:reply'")
    await first.stop()
    assert first.replies() == ["re: are you open on sunday?"]

    second = await Run.restarted(config)
    assert second.brain.requests == []  # not made again: queued from the file
    assert second.replies() == ["re: and on monday?"]
    assert second.telegram.of_kind("reply")[0].in_reply_to == "k1"
    await shutdown_services(second.s)

    third = await Run.restarted(config)  # queued now: never again
    assert third.replies() == [] and third.brain.requests == []
    await shutdown_services(third.s)


async def test_a_first_answer_a_crash_kept_from_an_empty_outbox_is_queued(
    tmp_path: Path,
) -> None:
    # Regression (session 42): with no outbox row at all (a new state.db, or one made
    # anew) nothing was queued from the file, so a kill between a contact's very first
    # answer's file line and its row lost that answer for good.
    config = _config(tmp_path)
    first = await Run.start(config)
    first.telegram.failing = True  # the row is written but not sent: as if it never was
    await first.kim("are you open on sunday?", message_id="k0")
    while first.telegram.attempts == 0:
        await asyncio.sleep(0.01)
    await first.s.state.execute("DELETE FROM outbox")
    await first.stop()

    second = await Run.restarted(config)
    assert second.brain.requests == []  # not made again: queued from the file
    assert second.replies() == ["re: are you open on sunday?"]
    await shutdown_services(second.s)

    third = await Run.restarted(config)  # queued now: never again
    assert third.replies() == [] and third.brain.requests == []
    await shutdown_services(third.s)


async def test_an_empty_outbox_queues_no_answer_from_before_state_db(tmp_path: Path) -> None:
    """A state.db made anew (lost) sends none of the answers written before it."""
    config = _config(tmp_path)
    first = await Run.start(config)
    await first.kim("are you open on sunday?", message_id="k0")
    await settle(first.s)
    assert first.replies() == ["re: are you open on sunday?"]
    await first.stop()
    await asyncio.sleep(0.01)  # (the answer's stamp before the new state.db's first open)
    for path in config.data_dir.glob("state.db*"):
        path.unlink()  # lost

    second = await Run.restarted(config)
    assert second.replies() == [] and second.brain.requests == []
    await shutdown_services(second.s)


async def test_an_answer_kept_from_the_outbox_after_the_clock_was_set_back_is_queued(
    tmp_path: Path,
) -> None:
    # As above, but the clock ran two hours ahead when the first answer's row was
    # written, and was set right before the second: that answer is stamped before the
    # newest row, and a scan by time missed it (it was never sent).
    config = _config(tmp_path)
    first = await Run.start(config)
    await first.kim("are you open on sunday?", message_id="k0")
    await settle(first.s)
    ahead = iso(utcnow() + timedelta(hours=2))
    await first.s.state.execute("UPDATE outbox SET created = ?", (ahead,))
    first.telegram.failing = True
    sent = first.telegram.attempts
    await first.kim("and on monday?", message_id="k1")
    while first.telegram.attempts == sent:
        await asyncio.sleep(0.01)
    await first.s.state.execute("DELETE FROM outbox WHERE dedup_key = 'telegram:k1:reply'")
    await first.stop()

    second = await Run.restarted(config)
    assert second.brain.requests == []
    assert second.replies() == ["re: and on monday?"]
    await shutdown_services(second.s)


async def test_an_untrusted_partys_album_cut_by_a_stop_is_escalated_once(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    first = await Run.start(config)
    for n, caption in enumerate(("my flat", "the kitchen"), 1):
        metadata: dict[str, Any] = {"media_group": "u1"} | ({"album_part": True} if n > 1 else {})
        await first.s.router.deliver(
            inbound(caption, sender="7009", message_id=f"u{n}", metadata=metadata)
        )
    await first.stop()  # while the album was collected in memory
    assert first.telegram.of_kind("escalation") == []

    second = await Run.restarted(config)
    # Before, it was recorded and never escalated (nor acknowledged).
    (escalation,) = second.telegram.of_kind("escalation")
    assert "my flat" in escalation.text and "the kitchen" in escalation.text
    assert len(second.telegram.of_kind("acknowledgement")) == 1
    await shutdown_services(second.s)

    third = await Run.restarted(config)
    assert third.telegram.sent == []
    await close_services(third.s)


def test_only_an_album_nothing_followed_is_cut() -> None:
    def photo(n: int, group: str = "a") -> dict[str, Any]:
        return {"type": "message", "direction": "in", "album": group, "messageRef": f"p{n}",
                "timestamp": f"2026-03-01T10:00:0{n}.000Z"}  # fmt: skip

    escalation = {"type": "event", "event": "escalation", "timestamp": "2026-03-01T09:00:00Z"}
    ack = {"type": "message", "direction": "out", "kind": "acknowledgement"}
    message = {"type": "message", "direction": "in", "messageRef": "m"}
    assert cut_messages([escalation, photo(1), photo(2)]) == (
        [photo(1), photo(2)],
        "2026-03-01T09:00:00Z",  # the rate limit as of the album
    )
    # two albums, or an album and the message queued behind it: neither was handled
    assert cut_messages([photo(1), photo(2, "b")]) == ([photo(1), photo(2, "b")], None)
    assert cut_messages([photo(1), message]) == ([photo(1), message], None)
    assert cut_messages([photo(1), ack]) == ([], None)  # handled
    assert cut_messages([photo(1), {**escalation, "timestamp": "x"}])[0] == []
    command = {**message, "content": "/help"}
    bounce = {**message, "addressed": False}
    assert cut_messages([command, bounce]) == ([], None)  # neither is acknowledged


async def _cut_before_its_escalation(config: AppConfig) -> Run:
    """A run (stopped) in which a stranger's message was recorded and the process died
    before its acknowledgement and escalation."""
    first = await Run.start(config)

    async def crash(*args: Any, **kwargs: Any) -> None:
        return None  # the process died right after the message was recorded

    first.s.router.strangers._acknowledge_and_escalate = crash
    await first.s.router.deliver(inbound("is the flat still free?", sender="7009", message_id="x1"))
    await first.stop()
    return first


async def test_an_untrusted_partys_message_cut_before_its_escalation_is_escalated_at_start(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    first = await _cut_before_its_escalation(config)
    assert first.telegram.sent == []

    second = await Run.restarted(config)
    # Before, only a cut album was escalated at start: the message was recorded and the
    # owner never heard of it.
    (escalation,) = second.telegram.of_kind("escalation")
    assert "is the flat still free?" in escalation.text
    await second.s.router.deliver(inbound("hello?", sender="7009", message_id="x2"))
    await settle(second.s)
    assert len(second.telegram.of_kind("escalation")) == 1  # rate-limited, as always
    await shutdown_services(second.s)

    # the message the rate limit held back is held back at the next start too
    third = await Run.restarted(config)
    assert third.telegram.sent == []
    await close_services(third.s)


@pytest.mark.parametrize("listed", ["known", "blocked"])
async def test_a_stranger_listed_in_the_config_since_their_cut_message(
    tmp_path: Path, listed: str
) -> None:
    # Regression (session 30): with the tier as the config has it now, a stranger the
    # owner listed as a contact before the restart was neither escalated (not untrusted
    # now) nor answered (not known when they wrote): the owner never heard of it.
    await _cut_before_its_escalation(_config(tmp_path))

    contacts = {"telegram": {KIM: "known", "7009": listed}}
    second = await Run.restarted(telegram_config(tmp_path, trust={"contacts": contacts}))
    escalations = second.telegram.of_kind("escalation")
    if listed == "known":
        (escalation,) = escalations
        assert "is the flat still free?" in escalation.text
    else:
        assert escalations == []  # blocked since: nothing about them
    assert second.replies() == [] and second.brain.requests == []
    await shutdown_services(second.s)


async def test_a_crash_at_the_escalation_is_made_good_at_start_even_after_an_acknowledgement(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    first = await Run.start(config)

    async def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the process died here")

    first.s.router.strangers.escalate = crash
    with pytest.raises(RuntimeError):
        await first.s.router.deliver(
            inbound("can I view the flat?", sender="7009", message_id="y1")
        )
    await first.stop()
    assert first.telegram.of_kind("escalation") == []

    second = await Run.restarted(config)
    # The acknowledgement used to go first: its line in the party's file hid the missed
    # escalation from the start's check, and the owner never heard of the message.
    (escalation,) = second.telegram.of_kind("escalation")
    assert "can I view the flat?" in escalation.text
    assert len(second.telegram.of_kind("acknowledgement")) == 1
    await shutdown_services(second.s)


async def test_a_stop_during_the_start_leaves_the_owed_answer_to_the_next_start(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    first = await Run.start(config)
    first.brain.gate = asyncio.Event()
    await first.kim("are you open on sunday?", message_id="k1")
    await first.brain.started.wait()
    await first.stop()

    stop = asyncio.Event()
    stop.set()  # a SIGTERM while the daemon starts
    cut = await Run.start(config, resume=False)
    assert await resume_known_parties(cut.s, stop=stop) == 0
    assert await escalate_cut_messages(cut.s, stop=stop) == 0
    await settle(cut.s)
    assert cut.replies() == [] and cut.brain.requests == []
    await shutdown_services(cut.s)

    second = await Run.restarted(config)  # found again
    assert second.replies() == ["re: are you open on sunday?"]
    await shutdown_services(second.s)


async def _serve(config: AppConfig, stop: asyncio.Event | None = None) -> Run:
    """A start as the daemon makes it (bot.daemon.start_serving: the stores' generations
    read once, the parties' answers, the owner's re-queue, which marks them), settled."""
    brain = ScriptedBrain()
    services = await open_services(config, brain=brain)
    run = Run(services, brain, RecordingChannel("telegram"))
    services.channels["telegram"] = run.telegram
    await start_serving(services, [run.telegram], stop)
    if stop is None:
        await settle(services)
    return run


def _copy_state(source: Path, target: Path) -> None:
    target.mkdir(exist_ok=True)
    for old in target.glob("state.db*"):
        old.unlink()
    for path in source.glob("state.db*"):
        shutil.copy2(path, target / path.name)


def _ago(**delta: float) -> str:
    return iso(utcnow() - timedelta(**delta))


def _notices(run: Run) -> list[str]:
    return [m.text for m in run.telegram.sent if m.chat_id != KIM and "not sent again" in m.text]


async def test_an_older_state_db_put_back_sends_no_answer_to_a_contact_again(
    tmp_path: Path,
) -> None:
    """state.db restored from a backup under the party files written since: its outbox
    lacks the rows of the answers sent since, and before session 40 each after the last
    one it held was taken for one a crash cut from its row and sent to Kim again."""
    config = _config(tmp_path)
    first = await _serve(config)
    await first.kim("are you open on sunday?", message_id="k1")
    await first.s.router.deliver(inbound("remind me of the dentist", message_id="o1"))
    await settle(first.s)
    await first.s.state.execute("UPDATE outbox SET created = ?", (_ago(hours=2),))
    await shutdown_services(first.s)
    _copy_state(config.data_dir, tmp_path / "backup")  # last night's backup

    second = await _serve(config)
    for ref, text in (("k2", "and on monday?"), ("k3", "and on tuesday?")):
        await second.kim(text, message_id=ref)
        await settle(second.s)
    # in a conversation of its own, none of whose replies the older outbox has a row for
    await second.s.router.deliver(inbound("/new and of the vet", message_id="o2"))
    await settle(second.s)
    assert "re: and of the vet" in second.telegram.texts()
    # an hour ago: after the backup, before the start's last ten minutes (the rows set
    # aside for Kim, made first, made the owner's scan look at those only)
    await second.s.index_db.execute(
        "UPDATE turns SET timestamp = ? WHERE conversation_id IN"
        " (SELECT conversation_id FROM turns WHERE content = 'and of the vet')",
        (_ago(hours=1),),
    )
    assert second.to_kim() == ["re: and on monday?", "re: and on tuesday?"]
    await shutdown_services(second.s)
    _copy_state(tmp_path / "backup", config.data_dir)  # put back

    third = await _serve(config)
    assert third.to_kim() == []  # nothing goes to Kim again
    assert third.brain.requests == []
    for ref in ("k2", "k3"):  # recorded, never to be sent: the next start finds them
        assert await third.s.outbox.has_key(f"telegram:{ref}:reply")
    assert _notices(third) == [
        "Replies not sent again at start: state.db is older than the conversations (put "
        "back from a backup?), so whether the 1 reply written since it was saved reached "
        "their chats is not known. They are in the conversations; none was sent a second "
        "time.\nNor were the 2 answers to known contacts written since then: whether they "
        "reached them is not known. They are in the contacts' records; none was sent a "
        "second time."
    ]
    # a crash after this start is still a crash's: the answer's row is lost
    await third.kim("and on wednesday?", message_id="k4")
    await settle(third.s)
    await third.s.state.execute("DELETE FROM outbox WHERE dedup_key = 'telegram:k4:reply'")
    await shutdown_services(third.s)

    fourth = await _serve(config)
    assert fourth.to_kim() == ["re: and on wednesday?"]
    assert fourth.brain.requests == [] and _notices(fourth) == []  # told once
    await shutdown_services(fourth.s)


async def test_with_the_stores_marked_an_answer_a_crash_kept_from_the_outbox_is_queued(
    tmp_path: Path,
) -> None:
    """The generations equal (each start marks them): a missing row is a crash's."""
    config = _config(tmp_path)
    first = await _serve(config)
    await first.kim("are you open on sunday?", message_id="k1")
    await first.kim("and on monday?", message_id="k2")
    await settle(first.s)
    await first.s.state.execute("DELETE FROM outbox WHERE dedup_key = 'telegram:k2:reply'")
    await shutdown_services(first.s)

    second = await _serve(config)
    assert second.to_kim() == ["re: and on monday?"]
    assert second.brain.requests == [] and _notices(second) == []
    await shutdown_services(second.s)


async def test_a_stop_while_starting_on_an_older_state_db_leaves_it_older(
    tmp_path: Path,
) -> None:
    """A SIGTERM during the start sets nothing aside, and the generations stay as they
    were: the next start still finds state.db older, and sends nothing again."""
    config = _config(tmp_path)
    first = await _serve(config)
    await first.kim("are you open on sunday?", message_id="k1")
    await settle(first.s)
    await shutdown_services(first.s)
    _copy_state(config.data_dir, tmp_path / "backup")
    second = await _serve(config)
    await second.kim("and on monday?", message_id="k2")
    await settle(second.s)
    await shutdown_services(second.s)
    _copy_state(tmp_path / "backup", config.data_dir)

    stop = asyncio.Event()
    stop.set()  # a SIGTERM while the daemon starts
    cut = await _serve(config, stop)
    assert not await cut.s.outbox.has_key("telegram:k2:reply")
    await close_services(cut.s)

    third = await _serve(config)
    assert third.to_kim() == []
    assert await third.s.outbox.has_key("telegram:k2:reply")
    assert len(_notices(third)) == 1
    await shutdown_services(third.s)


async def test_a_cut_messages_time_that_is_none_does_not_stop_the_start(tmp_path: Path) -> None:
    # Regression (session 42): the time of an untrusted party's cut message, unreadable
    # in their file (edited by hand), raised ValueError out of the start's escalations:
    # the daemon did not start as long as the line was there. Escalated as of now.
    config = _config(tmp_path)
    await _cut_before_its_escalation(config)
    path = config.external_dir / f"{party_handle('telegram', '7009')}.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[-1]["type"] == "message"
    lines[-1]["timestamp"] = "garbage"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))

    second = await Run.start(config, resume=False)
    try:  # (closed whatever it raised: a run left open hung the tests after it)
        assert await escalate_cut_messages(second.s) == 1
        await settle(second.s)
        (escalation,) = second.telegram.of_kind("escalation")
        assert "is the flat still free?" in escalation.text
    finally:
        await shutdown_services(second.s)
