"""Configuration errors name the file line of their key, and a YAML true/false is no
number: both for ``check-config`` and ``run`` (exit 78, one line per problem)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot import cli
from bot.config import ConfigError, build_config, load_config
from bot.config.file import key_lines, line_of
from tests.conftest import clear_config_env


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_config_env(monkeypatch)


LONG_FILE = """\
# my config
brain:
  max_tokens: 2048
  request_timeout: 120
conversations:
  abbreviation_max_tokens: 400
channels:
  web:
    port: 4321
  telegram:
    enabled: true
    max_retry_after: -1
owner:
  identities:
    email: ["CHANGE_ME@example.org"]
"""


def test_each_problem_names_its_line_in_the_file(tmp_path: Path) -> None:
    # Regression: "channels.telegram.max_retry_after: ..." named no line, and in a long
    # file (config.example.yaml has 250) the owner searched which of the keys was meant.
    path = tmp_path / "config.yaml"
    path.write_text(LONG_FILE, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    where = {key: message.rpartition(" (")[2] for key, message in info.value.problems}
    assert where == {
        "owner.identities.email.0": f"{path}, line 15)",
        "channels.telegram.max_retry_after": f"{path}, line 12)",
        # listed beside them (session 38: said only once they were fixed)
        "channels.telegram.token": f"{path}, line 10)",
    }
    # a key left out: the line of the section that lacks it
    path.write_text(LONG_FILE.replace("-1", "5").replace("CHANGE_ME@", "me@"), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert info.value.lines() == [
        "channels.telegram.token: required when Telegram is enabled (or TELEGRAM_BOT_TOKEN) "
        f"({path}, line 10)"
    ]


def test_a_problem_of_the_environment_names_no_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("brain:\n  max_tokens: 5\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={"ANTHROPIC_API_KEY": "CHANGE_ME"})
    assert info.value.lines() == ["brain.api_key: ANTHROPIC_API_KEY still holds a placeholder"]


def test_key_lines_follow_lists_and_survive_an_endless_alias() -> None:
    lines = key_lines("a:\n  b:\n    - x\n    - y: 1\nc: &k [*k]\n")
    assert lines["a.b.1"] == 4 and lines["a.b.1.y"] == 4 and lines["c"] == 5
    assert line_of("a.b.7", lines) == 2  # an item not written: its list's key
    assert line_of("d.e", lines) is None
    assert key_lines("a: [\n") == {}


def test_run_with_a_wrong_key_exits_78_naming_key_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"data_dir: {tmp_path / 'data'}\nchannels:\n  web:\n    port: abc\n")
    assert cli.main(["run", "--config", str(path)]) == 78
    err = capsys.readouterr().err
    assert err.startswith("configuration error: channels.web.port: ")
    assert err.rstrip().endswith(f"({path}, line 4)") and "Traceback" not in err
    assert not (tmp_path / "data").exists()  # nothing started


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"channels": {"web": {"port": True}}}, "channels.web.port"),
        ({"brain": {"request_timeout": True}}, "brain.request_timeout"),
        ({"brain": {"thinking_budget_tokens": False}}, "brain.thinking_budget_tokens"),
        ({"brain": {"debounce_seconds": {"telegram": True}}}, "brain.debounce_seconds"),
        (
            {"models": {"prices": {"opus": {"input": True, "output": 1}}}},
            "models.prices.opus.input",
        ),
    ],
)
def test_true_or_false_is_no_number(raw: dict[str, object], key: str) -> None:
    # Regression: pydantic read true as 1: `port: true` (an `enabled: true` one line off)
    # passed check-config as port 1, `request_timeout: yes` as one second.
    with pytest.raises(ConfigError) as info:
        build_config(raw, env={})
    assert info.value.problems == [(key, "a number is needed here, not true/false")]


@pytest.mark.parametrize(
    "key",
    [
        "conversations.renaming_interval_turns",
        "conversations.naming_turn",
        "brain.max_tokens",
        "search.rrf_k",
        "channels.email.subject_thread_window_days",
    ],
)
def test_a_number_past_any_sensible_setting_is_refused(key: str) -> None:
    # Regression: `renaming_interval_turns: 99999999999999999999` passed check-config,
    # then the daemon's start failed with "Python int too large to convert to SQLite
    # INTEGER" (exit 70, which systemd restarts into the same error).
    section, *path, name = key.split(".")
    raw: dict[str, Any] = {}
    inner = raw.setdefault(section, {})
    for part in path:
        inner = inner.setdefault(part, {})
    inner[name] = 99999999999999999999
    with pytest.raises(ConfigError) as info:
        build_config(raw, env={})
    assert info.value.problems == [(key, "at most 1,000,000,000 here")]


def test_numbers_and_switches_still_pass() -> None:
    cfg = build_config(
        {
            "channels": {"web": {"enabled": False, "port": 4000}},
            "brain": {"request_timeout": 5, "debounce_seconds": {"telegram": 2}},
            "embedding": {"threads": None, "enabled": False},
        },
        env={},
    )
    assert cfg.channels.web.port == 4000 and cfg.channels.web.enabled is False
    assert cfg.brain.request_timeout == 5.0 and cfg.brain.debounce_seconds == {"telegram": 2.0}
