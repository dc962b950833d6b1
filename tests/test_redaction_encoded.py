"""A secret masked in the forms a protocol gives it (bot/redaction.py): base64 (SMTP
``AUTH LOGIN`` and ``AUTH PLAIN``, HTTP Basic) and percent-encoded. Before session 41
only the value as written was masked: a debug line or an error echoing an SMTP login
showed the mail password to anyone who decodes base64."""

from __future__ import annotations

import base64
import logging

import pytest

from bot import redaction
from bot.cli_common import setup_logging
from bot.config import build_config

USER = "robin@example.org"
LOGIN = "robin"
PASSWORD = "p@ss word/1+hunter22?>"  # its base64 holds a "/": URL-safe base64 differs


def b64(data: str) -> str:
    return base64.b64encode(data.encode()).decode()


def _config() -> redaction.Secrets:
    config = build_config(
        {
            "channels": {
                "web": {"enabled": False},
                "email": {"address": USER, "password": PASSWORD, "smtp": {"username": LOGIN}},
            },
        }
    )
    secrets = redaction.Secrets()
    secrets.use(redaction.config_secrets(config))
    return secrets


@pytest.mark.parametrize(
    "line",
    [
        f"send: 'AUTH PLAIN {b64(chr(0) + USER + chr(0) + PASSWORD)}'",  # IMAP's login
        f"AUTH PLAIN {b64(chr(0) + LOGIN + chr(0) + PASSWORD)}",  # SMTP's (smtp.username)
        f"AUTH PLAIN {b64(LOGIN + chr(0) + LOGIN + chr(0) + PASSWORD)}",
        f"reply: b'334 VXNlcm5hbWU6' send: '{b64(PASSWORD)}'",  # AUTH LOGIN
        f"Authorization: Basic {b64(LOGIN + ':' + PASSWORD)}",
        f"url={base64.urlsafe_b64encode(PASSWORD.encode()).decode()}",
        "https://example.org/login?password=p%40ss%20word%2F1%2Bhunter22%3F%3E",
        "password=p%40ss+word%2F1%2Bhunter22%3F%3E",
    ],
)
def test_a_logins_encoded_forms_are_masked(line: str) -> None:
    masked = _config().mask(line)
    assert "***" in masked, masked
    for form in (b64(PASSWORD)[:-4], "hunter22", "word%2F1", "aHVudGVyMjI"):
        assert form not in masked, masked
    # no more of the encoded password is left than the few characters at its edges,
    # which mix in its neighbours' bits
    assert len(masked) <= len(line) - len(b64(PASSWORD)) + 3 + 4, masked


@pytest.mark.parametrize("before", ["", "x", "xy"])
def test_the_password_inside_any_base64_is_masked_at_each_alignment(before: str) -> None:
    # A composite not foreseen (another user name, a JSON body): base64 codes 3 bytes as
    # 4 characters, so the password is coded differently for each of its 3 offsets.
    line = b64(f"{before}{{'user': 'someone', 'pass': '{PASSWORD}'}}")
    masked = _config().mask(line)
    assert masked.count("***") == 1 and len(masked) < len(line) - 20, masked


def test_ordinary_lines_and_short_secrets_stay_readable() -> None:
    secrets = redaction.Secrets()
    secrets.use(["abcd1", "hunter22"])
    line = "INFO my_agent.telegram: reply sent to chat 12345 (412 chars) YWJjZDE"
    assert secrets.mask(line) == line.replace("YWJjZDE", "***")  # base64 of "abcd1"
    # a 5-character secret has no 8-character run of its own inside longer base64:
    # nothing shorter is masked there, or any base64 blob in the log came out garbled
    blob = b64("xyabcd1 and more")
    assert secrets.mask(blob) == blob
    assert secrets.mask("hunter2 aHVudGVyMjI=") == "hunter2 ***="


def test_the_longest_form_wins_where_several_start() -> None:
    pattern = redaction.trie_pattern(["ab", "abc", "abd", "x"])
    assert pattern == "(?:ab(?:c|d)?|x)"
    secrets = redaction.Secrets()
    token = "123456:TEST-token_abc"
    secrets.use(redaction.token_forms(token))
    assert secrets.mask(f"/bot{token}/getMe TEST-token_abc") == "/bot***/getMe ***"
    assert redaction.trie_pattern(["a" * 5000]) == "a" * 5000  # no recursion per character


def test_the_daemons_log_handler_masks_an_echoed_login(
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = build_config(
        {"channels": {"web": {"enabled": False}, "email": {"address": USER, "password": PASSWORD}}}
    )
    redaction.use_config(config)  # (tests/conftest.py puts the process's values back)
    setup_logging("DEBUG")
    plain = b64(f"\0{USER}\0{PASSWORD}")
    logging.getLogger("my_agent.test").debug("send: %r", f"AUTH PLAIN {plain}\r\n")
    logging.getLogger("my_agent.test").warning(
        "SMTP refused the login (535 5.7.8 %s: bad credentials)", b64(PASSWORD)
    )
    err = capsys.readouterr().err
    assert "AUTH PLAIN ***" in err and "535 5.7.8 ***" in err, err
    assert plain[:-4] not in err and b64(PASSWORD)[:-4] not in err, err
