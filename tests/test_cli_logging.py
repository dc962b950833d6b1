"""The daemon's log as the owner reads it: what :func:`bot.cli_common.setup_logging`
lets through from the libraries under the core."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.cli_common import setup_logging


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    levels = {name: logging.getLogger(name).level for name in logging.root.manager.loggerDict}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


async def test_a_brain_call_adds_no_http_request_line_to_the_log(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Regression: anthropic 2.x sends through httpx2, whose logger was not quieted like
    # httpx's: every model call (and every retry in an outage) put an INFO line
    # 'httpx2: HTTP Request: POST http://.../v1/messages "HTTP/1.1 200 OK"' in the
    # daemon's log, between the lines that say something.
    from anthropic import AsyncAnthropic

    setup_logging("INFO")
    async with FakeAnthropicAPI(fallback="echo") as api:
        client = AsyncAnthropic(base_url=api.base_url, api_key="test", max_retries=0)
        reply = await client.messages.create(
            model="claude-haiku-4-5",
            max_tokens=16,
            messages=[{"role": "user", "content": "hello"}],
        )
        await client.close()
    assert reply.content
    logging.getLogger("my_agent.test").info("the daemon's own line")
    err = capsys.readouterr().err
    assert "the daemon's own line" in err  # the log itself works
    assert "HTTP Request" not in err, err
