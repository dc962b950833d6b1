"""End to end, a known contact's blank mail (no subject, a body of blank lines) through
the real core and the real Anthropic SDK against the fake Messages API, which refuses
empty text with a 400 as the API does."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.brain.context import EMPTY_MESSAGE
from bot.config.model import AppConfig
from tests.channels.email.conftest import PymapServer, SmtpServer, append
from tests.channels.email.stack import FRIEND, Stack, good_auth, knows_friend, open_in_new_folder


async def test_a_known_contacts_blank_mail_is_answered_not_refused_by_the_api(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # The party's message went to the model as {"role": "user", "content": ""}: the API
    # answered 400 and the contact got "Sorry, I can't help with that." for any mail
    # with an empty subject and body (a forgotten attachment, a blank reply).
    async with FakeAnthropicAPI(fallback="echo") as model:

        def adjust(config: AppConfig) -> None:
            knows_friend(config)
            config.brain.provider = "anthropic"
            config.brain.base_url = model.base_url
            config.brain.api_key = "test-key"

        folder, _ = await open_in_new_folder(pymap, smtp, tmp_path, stacks, adjust)
        raw = (
            f"From: Friend <{FRIEND}>\r\nTo: bot@example.com\r\n"
            f"Authentication-Results: {good_auth('example.net')}\r\n"
            "Message-ID: <blank-1@example.net>\r\n"
            f"Date: {format_datetime(datetime.now(UTC))}\r\n"  # (on time: no late label)
            "Subject: \r\nContent-Type: text/plain\r\n\r\n  \r\n\r\n"
        ).encode()
        await append(pymap.port, folder, raw)
        [answer] = await smtp.capture.wait_for(1, timeout=30)
        await asyncio.sleep(0.2)
    assert FRIEND in answer["To"]
    assert answer.get_body(("plain",)).get_content().strip() == f"echo: {EMPTY_MESSAGE}"
    [request] = model.requests
    assert request.body["messages"] == [{"role": "user", "content": EMPTY_MESSAGE}]
    # what the contact sent is kept as it came, in the party's file
    [file] = (tmp_path / "external").glob("*.jsonl")
    lines = [json.loads(line) for line in file.read_text().splitlines()]
    said = [(ln["direction"], ln["content"]) for ln in lines if ln.get("type") == "message"]
    assert said == [("in", ""), ("out", f"echo: {EMPTY_MESSAGE}")]
