"""Secrets kept out of the log and the store (bot/redaction.py): the daemon's log
handler masks them in every line and traceback, and what is stored or told to the owner
goes through the same masking. Before session 40, aiohttp's error text (which names a
Bot API URL, ``/bot<token>/getMe``) put the bot token in the log and in state.db."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bot import redaction
from bot.cli_common import setup_logging
from bot.config import build_config
from bot.db import Database
from bot.events import OutboundMessage, SendResult
from bot.outbox import Outbox
from bot.schema import STATE_MIGRATIONS
from tests.conftest import RecordingChannel

TOKEN = "123456:TEST-token_abc"
SECRET = "TEST-token_abc"
URL = f"url='http://127.0.0.1:443/bot{TOKEN}/sendMessage'"


@pytest.fixture
def secrets() -> Iterator[redaction.Secrets]:
    # (tests/conftest.py puts the process's values back after each test)
    redaction.SECRETS.use([*redaction.token_forms(TOKEN), "sk-ant-KEY12345", "hunter22"])
    yield redaction.SECRETS


def _handler() -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    redaction.install([handler])
    logger = logging.getLogger("my_agent.test.redaction")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, out


def test_a_log_line_and_its_traceback_are_masked(secrets: redaction.Secrets) -> None:
    logger, out = _handler()
    try:
        logger.warning("Telegram polling failed (%s); retrying in %.1fs", URL, 1.5)
        try:
            try:
                raise ConnectionError(f"Bad status line {URL}")
            except ConnectionError as exc:
                raise RuntimeError("could not alert the owner") from exc
        except RuntimeError:
            logger.exception("the alert failed, password %s", "hunter22")
    finally:
        logger.handlers = []
    text = out.getvalue()
    assert SECRET not in text and "hunter22" not in text, text
    assert "/bot***/sendMessage" in text
    assert "retrying in 1.5s" in text and "Bad status line" in text
    assert "password ***" in text


def test_the_secret_part_alone_and_short_values_are_handled() -> None:
    secrets = redaction.Secrets()
    secrets.use([*redaction.token_forms(TOKEN), "abc", None, ""])
    # the token's colon escaped in a URL: masked whole (its percent-encoded form, session
    # 41), its secret part alone before
    assert secrets.mask("/bot123456%3ATEST-token_abc/getMe") == "/bot***/getMe"
    assert secrets.mask("/bot123456%3aTEST-token_abc/getMe") == "/bot123456%3a***/getMe"
    assert secrets.mask(f"/bot{TOKEN}/getMe") == "/bot***/getMe"
    assert secrets.mask("abc def") == "abc def"  # too short to mask: the log stays readable


def test_the_configs_secrets_are_the_token_the_api_key_and_the_mail_password() -> None:
    config = build_config(
        {
            "brain": {"provider": "anthropic", "api_key": "sk-ant-KEY12345"},
            "channels": {
                "web": {"enabled": False},
                "telegram": {"enabled": True, "token": TOKEN},
                "email": {"password": "hunter22"},
            },
        }
    )
    assert set(redaction.config_secrets(config)) == {TOKEN, SECRET, "sk-ant-KEY12345", "hunter22"}


def test_the_daemons_log_handler_masks(
    secrets: redaction.Secrets, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging("INFO")
    logging.getLogger("my_agent.test").warning("Telegram setup failed (%s)", URL)
    err = capsys.readouterr().err
    assert "Telegram setup failed" in err and SECRET not in err, err


@pytest.fixture
async def state(tmp_path: Path) -> AsyncIterator[Database]:
    db = await Database.open(tmp_path / "state.db", STATE_MIGRATIONS, synchronous="FULL")
    yield db
    await db.close()


async def test_the_outbox_stores_and_tells_a_failure_without_the_secret(
    state: Database, secrets: redaction.Secrets
) -> None:
    from bot.channel import PermanentSendError

    class Refusing(RecordingChannel):
        async def send(self, message: OutboundMessage) -> SendResult:
            self.attempts += 1
            raise PermanentSendError(f"HTTP Client says - TooManyRedirects: {URL}")

    told: list[str] = []

    async def on_failed(message: OutboundMessage, error: str) -> None:
        told.append(error)

    outbox = Outbox(state)
    outbox.on_failed(on_failed)
    channel = Refusing()
    await outbox.enqueue(OutboundMessage(channel="test", chat_id="c1", text="hello"))
    outbox.attach(channel)
    try:
        for _ in range(500):
            if told:
                break
            await asyncio.sleep(0.01)
    finally:
        await outbox.stop()
    rows = await state.fetchall("SELECT status, last_error FROM outbox")
    assert rows and rows[0][0] == "failed"
    assert SECRET not in rows[0][1] and "/bot***/sendMessage" in rows[0][1], rows
    assert told and SECRET not in told[0] and "TooManyRedirects" in told[0], told
