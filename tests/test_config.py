"""Configuration: validation naming the dotted key (exit 78), placeholders from
config.example.yaml, the embedded default, and secrets from the environment."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot import cli
from bot.config import PLACEHOLDER_MARKERS, ConfigError, build_config, load_config
from tests.conftest import clear_config_env
from tests.support import REPO, VENV_PYTHON


def _write(tmp_path: Path, raw: Any, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_config_env(monkeypatch)


INVALID = [
    ({"brain": {"max_tokens": "lots"}}, "brain.max_tokens"),
    ({"brain": {"colour": "red"}}, "brain.colour"),
    ({"surprise": True}, "surprise"),
    ({"channels": {"telegram": {"enabled": True}}}, "channels.telegram.token"),
    ({"channels": {"telegram": {"enabled": True, "token": "nocolon"}}}, "channels.telegram.token"),
    ({"owner": {"timezone": "Mars/Olympus_Mons"}}, "owner.timezone"),
    ({"channels": {"web": {"port": 70000}}}, "channels.web.port"),
    ({"channels": {"email": {"enabled": True, "password": "x"}}}, "channels.email.address"),
    ({"trust": {"default_tier": "friend"}}, "trust.default_tier"),
    ({"trust": {"contacts": {"telegram": {"@x": "vip"}}}}, "trust.contacts.telegram.@x"),
    ({"trust": {"escalation_channel": "telegram"}}, "trust.escalation_channel"),
    ({"brain": {"provider": "anthropic"}}, "brain.api_key"),
    ({"models": {"default": "gpt"}}, "models.default"),
    # Regression: accepted, then every note and title call was refused (404 for the model
    # "haku") and the conversations got offline notes and titles for good, unannounced.
    ({"conversations": {"naming_model": "haku"}}, "conversations.naming_model"),
    ({"conversations": {"abbreviation_model": "gpt-4o"}}, "conversations.abbreviation_model"),
    ({"transcripts": {"fsync": "sometimes"}}, "transcripts.fsync"),
    # regression: "" was the current directory, which the daemon then chmodded to 0700
    ({"data_dir": ""}, "data_dir"),
    # Regression: accepted, then every owner message was answered "I can't reach the
    # language model right now": a config error read as an API outage
    ({"brain": {"base_url": "not a url"}}, "brain.base_url"),
    ({"brain": {"base_url": "ftp://x"}}, "brain.base_url"),
    ({"brain": {"base_url": "http://localhost:abc"}}, "brain.base_url"),
    ({"channels": {"telegram": {"api_base": "localhost:8081"}}}, "channels.telegram.api_base"),
    # regression: .inf passed check-config, then recovery failed (exit 74)
    (
        {"conversations": {"idle_timeout_seconds": float("inf")}},
        "conversations.idle_timeout_seconds",
    ),
    ({"channels": {"email": {"imap": {"timeout": float("inf")}}}}, "channels.email.imap.timeout"),
    # Regression: 1e12 passed, then every message logged an OverflowError (a timer past
    # year 9999) and no conversation was abbreviated when idle.
    ({"conversations": {"idle_timeout_seconds": 1e12}}, "conversations.idle_timeout_seconds"),
    (
        {"conversations": {"abbreviation_sweep_seconds": 1e12}},
        "conversations.abbreviation_sweep_seconds",
    ),
    # Regression: 1e12 passed, then a stranger's /start raised OverflowError in the
    # router (its answer's interval reached back past year 1), retried and given up on.
    ({"trust": {"escalation_interval_seconds": 1e12}}, "trust.escalation_interval_seconds"),
    # Regression: accepted, then every reply was refused by the API (budget < 1024).
    ({"brain": {"thinking_budget_tokens": 500}}, "brain.thinking_budget_tokens"),
    ({"brain": {"debounce_seconds": {"telegram": 90}}}, "brain.debounce_seconds.telegram"),
    # Regression: a username without "@" (or a display name) was accepted and matched no
    # one: the owner was a stranger to their own bot.
    ({"owner": {"identities": {"telegram": ["123", "olga"]}}}, "owner.identities.telegram.1"),
    ({"owner": {"identities": {"telegram": ["Olga Berg"]}}}, "owner.identities.telegram.0"),
    ({"trust": {"contacts": {"telegram": {"alice": "known"}}}}, "trust.contacts.telegram.alice"),
    # Regression: a group named by its title was accepted and never matched: the bot
    # ignored the group it was configured for.
    ({"channels": {"telegram": {"groups": [{"id": "Family"}]}}}, "channels.telegram.groups.0.id"),
    # Regression (session 39): 100000 passed, then onnxruntime made one OS thread each
    # and the model load never ended: keyword-only search, nothing said.
    ({"embedding": {"threads": 100000}}, "embedding.threads"),
    # Regression (session 41): config.example.yaml's hints, uncommented, were values:
    # the Anthropic brain with these words as its key (every reply a 401), a LOGIN as
    # "defaults to the address", the example's mailbox as the assistant's.
    ({"brain": {"api_key": "from ANTHROPIC_API_KEY (keep it out of this file)"}}, "brain.api_key"),
    ({"channels": {"telegram": {"token": "from TELEGRAM_BOT_TOKEN"}}}, "channels.telegram.token"),
    (
        {"channels": {"email": {"imap": {"username": "defaults to the address"}}}},
        "channels.email.imap.username",
    ),
    (
        {"channels": {"email": {"enabled": True, "address": "assistant@your-domain.example"}}},
        "channels.email.address",
    ),
]


def test_telegram_owner_identities_are_ids_or_usernames() -> None:
    cfg = build_config({"owner": {"identities": {"telegram": ["1001", "@Olga_B", " 42 "]}}}, env={})
    assert cfg.owner.identities["telegram"] == ["1001", "@Olga_B", " 42 "]
    with pytest.raises(ConfigError, match="did you mean '@olga'"):
        build_config({"owner": {"identities": {"telegram": ["olga"]}}}, env={})


def test_telegram_group_ids_may_be_written_as_numbers() -> None:
    # YAML reads an unquoted chat id as a number (it was refused as "not a string")
    groups = [{"id": -1001234567890}, {"id": "@family_chat"}]
    cfg = build_config({"channels": {"telegram": {"groups": groups}}}, env={})
    assert [g.id for g in cfg.channels.telegram.groups] == ["-1001234567890", "@family_chat"]


def test_trust_contacts_accept_every_configurable_channel() -> None:
    # Regression: owner.identities.loopback worked, trust.contacts.loopback was refused
    # as an unknown channel.
    cfg = build_config({"trust": {"contacts": {"loopback": {"x1": "known"}}}}, env={})
    assert cfg.trust.contacts["loopback"]
    with pytest.raises(ConfigError) as info:
        build_config({"trust": {"contacts": {"fax": {"x1": "known"}}}}, env={})
    assert info.value.key == "trust.contacts.fax"


def test_every_inconsistency_is_listed_at_once() -> None:
    # Regression: the checks between valid values (a channel enabled without its secret,
    # an escalation channel that is none) stopped at the first, one run per mistake.
    raw = {
        "channels": {"telegram": {"enabled": True}, "email": {"enabled": True}},
        "brain": {"provider": "anthropic"},
        "trust": {"escalation_channel": "fax"},
    }
    with pytest.raises(ConfigError) as info:
        build_config(raw, env={})
    assert [key for key, _ in info.value.problems] == [
        "channels.telegram.token",
        "channels.email.address",
        "channels.email.password",
        "brain.api_key",
        "trust.escalation_channel",
    ]
    assert info.value.key == "channels.telegram.token"  # the first, as before


def test_inconsistencies_are_listed_beside_invalid_values() -> None:
    # Regression: Telegram enabled without a token was said only once the bad port and
    # time zone beside it were fixed (a run per mistake again)
    raw = {
        "channels": {"web": {"port": 70000}, "telegram": {"enabled": True}},
        "owner": {"timezone": "Mars/Olympus_Mons"},
    }
    with pytest.raises(ConfigError) as info:
        build_config(raw, env={})
    assert sorted(key for key, _ in info.value.problems) == [
        "channels.telegram.token",
        "channels.web.port",
        "owner.timezone",
    ]
    # an invalid value is not also reported by the checks its default passes
    with pytest.raises(ConfigError) as info:
        build_config({"channels": {"telegram": {"enabled": True, "token": "nocolon"}}}, env={})
    assert [key for key, _ in info.value.problems] == ["channels.telegram.token"]


@pytest.mark.parametrize(
    ("raw", "key", "hint"),
    [
        ({"brian": {}}, "brian", " (did you mean brain?)"),
        ({"channels": {"web": {"prot": 1}}}, "channels.web.prot", " (did you mean port?)"),
        (
            {"channels": {"telegram": {"groups": [{"id": "-100123", "respnd": "always"}]}}},
            "channels.telegram.groups.0.respnd",
            " (did you mean respond?)",
        ),
        ({"owner": {"shoe_size": 44}}, "owner.shoe_size", ""),
    ],
)
def test_an_unknown_key_is_called_so_with_the_key_meant(
    raw: dict[str, Any], key: str, hint: str
) -> None:
    # Regression: a misspelt key was "Extra inputs are not permitted", pydantic's words,
    # which said neither that the key is unknown nor which one was meant.
    with pytest.raises(ConfigError) as info:
        build_config(raw, env={})
    assert info.value.key == key
    assert info.value.message == f"unknown key{hint}; config.example.yaml lists every key"


def test_owner_identities_on_an_unknown_channel_are_refused() -> None:
    # Regression: a misspelt channel under owner.identities passed check-config, and the
    # owner, matched on no channel, was handled as a third party there.
    with pytest.raises(ConfigError) as info:
        build_config({"owner": {"identities": {"telgram": ["123456789"]}}}, env={})
    assert info.value.key == "owner.identities.telgram"
    assert "unknown channel" in info.value.message
    cfg = build_config({"owner": {"identities": {"loopback": ["x1"]}}}, env={})
    assert cfg.owner.identities["loopback"] == ["x1"]


def test_numeric_telegram_ids_may_be_written_unquoted() -> None:
    # Regression: `telegram: [123456789]`, a number in YAML, was refused as "Input should
    # be a valid string"; so was a contact id written as a mapping key of digits.
    raw = yaml.safe_load(
        "owner:\n  identities:\n    telegram: [123456789, '@robin']\n"
        "trust:\n  contacts:\n    telegram:\n      987654321: known\n"
    )
    cfg = build_config(raw, env={})
    assert cfg.owner.identities["telegram"] == ["123456789", "@robin"]
    assert cfg.trust.contacts["telegram"] == {"987654321": "known"}
    with pytest.raises(ConfigError) as info:  # a yes/no is still no id
        build_config({"owner": {"identities": {"telegram": [True]}}}, env={})
    assert info.value.key == "owner.identities.telegram.0"


@pytest.mark.parametrize(("raw", "key"), INVALID)
def test_invalid_values_name_the_dotted_key(raw: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_config(raw, env={})
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}:")


@pytest.mark.parametrize(("raw", "key"), INVALID[:6])
def test_check_config_exits_78_naming_the_key(
    tmp_path: Path, raw: dict[str, Any], key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, raw)
    assert cli.main(["check-config", "--config", str(path)]) == 78
    err = capsys.readouterr().err
    assert f"configuration error: {key}:" in err


def test_check_config_names_every_wrong_key_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: only the first problem was reported, so a copied example with three
    # placeholders and a typo took four runs of check-config to put right.
    path = _write(
        tmp_path,
        "owner:\n  identities:\n    telegram: ['CHANGE_ME_id', '@CHANGE_ME_name']\n"
        "channels:\n  web:\n    port: abc\n    prot: 4321\n",
    )
    assert cli.main(["check-config", "--config", str(path)]) == 78
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "configuration error: owner.identities.telegram.0: still holds a placeholder from "
        f"config.example.yaml ({path}, line 3)",
        "configuration error: owner.identities.telegram.1: still holds a placeholder from "
        f"config.example.yaml ({path}, line 3)",
        "configuration error: channels.web.port: Input should be a valid integer, unable to "
        f"parse string as an integer ({path}, line 6)",
        "configuration error: channels.web.prot: unknown key (did you mean port?); "
        f"config.example.yaml lists every key ({path}, line 7)",
    ]
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert info.value.key == "owner.identities.telegram.0"  # the first, as before
    assert [key for key, _ in info.value.problems][2:] == ["channels.web.port", "channels.web.prot"]


@pytest.mark.parametrize(
    "text",
    ["brain: [unclosed", "- just\n- a list\n", "owner:\n  timezone: UTC\n   bad: indent\n"],
)
def test_unreadable_yaml_exits_78(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, text)
    assert cli.main(["check-config", "--config", str(path)]) == 78
    assert "configuration error" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "key", "lines"),
    [
        # a second block pasted below the first: YAML kept it alone, Telegram went off
        (
            "channels:\n  telegram:\n    enabled: true\n    token: '1:x'\n"
            "owner:\n  name: Robin\nchannels:\n  web:\n    port: 8080\n",
            "channels",
            "lines 1 and 7",
        ),
        (
            "channels:\n  web:\n    port: 4321\n    host: 0.0.0.0\n    port: 8080\n",
            "channels.web.port",
            "lines 3 and 5",
        ),
        (
            "owner:\n  identities:\n    - {telegram: ['1'], telegram: ['2']}\n",
            "owner.identities.0.telegram",
            "lines 3 and 3",
        ),
    ],
)
def test_a_key_given_twice_exits_78_naming_it(
    tmp_path: Path, text: str, key: str, lines: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: YAML keeps the last of two equal keys without a word, so check-config
    # said OK about a file the daemon then ran with half of.
    path = _write(tmp_path, text)
    assert cli.main(["check-config", "--config", str(path)]) == 78
    err = capsys.readouterr().err
    assert f"configuration error: {key}: given twice ({lines})" in err


def test_an_alias_inside_its_own_anchor_exits_78(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: the cyclic value it loads as ended validation in a RecursionError
    # traceback, exit 1, which systemd restarts (only 78 is not).
    path = _write(tmp_path, "owner:\n  identities:\n    telegram: &ids ['1', *ids]\n")
    assert cli.main(["check-config", "--config", str(path)]) == 78
    err = capsys.readouterr().err
    assert "configuration error: owner.identities.telegram.1: a YAML alias" in err


def test_config_file_not_in_utf8_exits_78(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: a Latin-1 file (an owner name with an umlaut) ended in a traceback
    # and exit 1, which systemd restarts forever, instead of exit 78.
    path = tmp_path / "config.yaml"
    path.write_bytes("owner:\n  name: J\u00fcrgen\n".encode("latin-1"))
    assert cli.main(["check-config", "--config", str(path)]) == 78
    assert "is not UTF-8 text" in capsys.readouterr().err


def test_missing_config_file_exits_78(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check-config", "--config", str(tmp_path / "nope.yaml")]) == 78
    assert "not found" in capsys.readouterr().err


def test_the_installed_command_exits_78(tmp_path: Path) -> None:
    """The real console script, as systemd would run it (RestartPreventExitStatus=78)."""
    path = _write(tmp_path, {"owner": {"timezone": "Nowhere/Special"}})
    exe = Path(sys.executable).with_name("my-agent")
    cmd = [str(exe)] if exe.exists() else [str(VENV_PYTHON), "-m", "bot.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MY_AGENT_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [*cmd, "check-config", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 78, done.stderr
    assert "owner.timezone" in done.stderr


# -- config.example.yaml ------------------------------------------------------------------
EXAMPLE = REPO / "config.example.yaml"


def _replace_placeholders(node: Any, path: str = "") -> Any:
    if isinstance(node, dict):
        return {k: _replace_placeholders(v, f"{path}.{k}") for k, v in node.items()}
    if isinstance(node, list):
        return [_replace_placeholders(v, path) for v in node]
    if isinstance(node, str) and any(m.lower() in node.lower() for m in PLACEHOLDER_MARKERS):
        if "email" in path or ("@" in node and "." in node.split("@")[-1]):
            return "robin@example.org"
        if "telegram" in path:
            return "@robin" if node.lstrip().startswith("@") else "123456789"
        return "a real value"
    return node


def test_example_config_is_rejected_until_placeholders_are_replaced() -> None:
    assert EXAMPLE.is_file(), "config.example.yaml is missing"
    with pytest.raises(ConfigError) as info:
        load_config(EXAMPLE, env={})
    assert "placeholder" in info.value.message
    raw = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert info.value.key  # names where the placeholder is
    node: Any = raw
    for part in info.value.key.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    assert any(m.lower() in str(node).lower() for m in PLACEHOLDER_MARKERS)

    config = build_config(_replace_placeholders(raw), env={})
    assert config.brain_provider() == "offline"
    assert config.owner.identities  # the example documents owner identities


HINTED = ("api_key", "token", "api_base", "address", "password", "username")


def test_the_examples_commented_keys_uncommented_are_empty_or_refused() -> None:
    """Regression (session 41): a key the example documents as ``# key: <hint>`` took the
    hint as its value once uncommented, and check-config said OK (``brain.api_key: from
    ANTHROPIC_API_KEY ...`` chose the Anthropic brain with those words as the key)."""
    text = EXAMPLE.read_text(encoding="utf-8")
    pattern = re.compile(rf"(?m)^(\s*)# ({'|'.join(HINTED)}):")
    assert len(pattern.findall(text)) == 7  # the lines this test is about: all of them
    uncommented = pattern.sub(r"\1\2:", text)
    raw = yaml.safe_load(uncommented)
    with pytest.raises(ConfigError) as info:
        build_config(raw, env={})
    assert "channels.email.address" in dict(info.value.problems)  # the example's mailbox
    config = build_config(_replace_placeholders(raw), env={})  # the owner's own values
    assert config.brain.api_key is None and config.brain_provider() == "offline"
    telegram, email = config.channels.telegram, config.channels.email
    assert telegram.token is None and telegram.api_base is None and email.password is None
    assert email.imap.username is None and email.smtp.username is None
    assert email.address == "robin@example.org"


def test_a_value_that_only_mentions_a_hint_word_is_kept() -> None:
    config = build_config(
        {"owner": {"name": "Fromm Default"}, "channels": {"email": {"display_name": "Defaults"}}},
        env={},
    )
    assert config.owner.name == "Fromm Default"


def test_example_config_documents_every_key() -> None:
    """Every key of the typed config appears in config.example.yaml (commented or not)."""
    from pydantic import BaseModel

    from bot.config import AppConfig

    text = EXAMPLE.read_text(encoding="utf-8")
    missing = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            if f"{name}:" not in text:
                missing.append(f"{prefix}{name}")
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, f"{prefix}{name}.")

    walk(AppConfig, "")
    assert missing == []


def test_placeholder_markers_are_rejected_anywhere() -> None:
    with pytest.raises(ConfigError) as info:
        build_config({"owner": {"identities": {"email": ["ok@x.org", "CHANGE_ME"]}}}, env={})
    assert info.value.key == "owner.identities.email.1"


# -- the embedded default -----------------------------------------------------------------
def test_no_config_file_means_the_embedded_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(None, env={})
    assert config.data_dir == Path(".my_agent")
    assert config.data_dir.resolve() == (tmp_path / ".my_agent").resolve()
    assert config.brain_provider() == "offline"
    assert config.channels.web.enabled
    assert (config.channels.web.host, config.channels.web.port) == ("127.0.0.1", 4321)
    assert not config.channels.telegram.enabled and not config.channels.email.enabled
    assert config.transcripts.fsync == "always"  # durable by default

    keyed = load_config(None, env={"ANTHROPIC_API_KEY": "sk-test"})
    assert keyed.brain_provider() == "anthropic"
    assert keyed.brain.api_key == "sk-test"


def test_default_locations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".my_agent").mkdir()
    _write(tmp_path / ".my_agent", {"owner": {"name": "Local"}})
    assert load_config(None, env={}).owner.name == "Local"
    other = _write(tmp_path, {"owner": {"name": "From env"}}, "other.yaml")
    monkeypatch.setenv("MY_AGENT_CONFIG", str(other))
    assert load_config(None, env={}).owner.name == "From env"


def test_check_config_without_a_file_uses_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["check-config"]) == 0
    out = capsys.readouterr().out
    assert "embedded default" in out and "brain offline" in out


def test_secrets_come_from_the_environment(tmp_path: Path) -> None:
    raw = {
        "channels": {
            "telegram": {"enabled": True},
            "email": {"enabled": True, "address": "bot@example.org"},
        },
        "embedding": {"model_path": "/from/file"},
    }
    env = {
        "TELEGRAM_BOT_TOKEN": "123456:ABC",
        "EMAIL_PASSWORD": "hunter2",
        "ANTHROPIC_API_KEY": "sk-env",
        "MY_AGENT_EMBEDDING_MODEL_PATH": "/from/env",
        "MY_AGENT_DATA_DIR": str(tmp_path / "state"),
    }
    config = build_config(raw, env=env)
    assert config.channels.telegram.token == "123456:ABC"
    assert config.channels.email.password == "hunter2"
    assert config.brain.api_key == "sk-env" and config.brain_provider() == "anthropic"
    assert config.embedding.model_path == "/from/env"
    assert config.data_dir == tmp_path / "state"
    # The caller's mapping is left alone (no secret written into it) ...
    assert raw["channels"]["telegram"] == {"enabled": True}
    assert raw["embedding"] == {"model_path": "/from/file"}
    # ... and without the variables the same file is incomplete, naming the key.
    with pytest.raises(ConfigError) as info:
        build_config(raw, env={})
    assert info.value.key == "channels.telegram.token"


def test_data_dir_tilde_is_the_home_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression (session 41): ``data_dir: ~/agent-data`` (or MY_AGENT_DATA_DIR=~/x from
    the systemd EnvironmentFile) meant a folder named "~" under the current directory,
    and check-config said OK of it."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    assert build_config({"data_dir": "~/agent-data"}, env={}).data_dir == home / "agent-data"
    from_env = build_config({}, env={"MY_AGENT_DATA_DIR": "~/x"})
    assert from_env.data_dir == home / "x"
    assert build_config({"data_dir": "a~b"}, env={}).data_dir == Path("a~b")
    config_file = _write(work, {"data_dir": "~/agent-data"})
    assert cli.main(["check-config", "--config", str(config_file)]) == 0
    out = capsys.readouterr().out
    assert f"data in {home / 'agent-data'}," in out and "/~/" not in out


def test_data_dir_tilde_without_a_home_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError) as info:
        build_config({"data_dir": "~no-such-user-s41/x"}, env={})
    assert info.value.key == "data_dir"


def test_process_environment_is_read_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-process")
    assert build_config({}).brain_provider() == "anthropic"
    assert build_config({"brain": {"provider": "offline"}}).brain_provider() == "offline"


@pytest.mark.parametrize("blank", ["", " ", "\t", " \n"])
def test_blank_secrets_in_the_environment_are_missing(blank: str) -> None:
    # Regression: `ANTHROPIC_API_KEY= ` (an EnvironmentFile line left blank) chose the
    # Anthropic brain with a key of one space: every reply failed with 401 instead of
    # the labelled offline brain; `EMAIL_PASSWORD= ` passed check-config.
    env = {var: blank for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}
    env["MY_AGENT_EMBEDDING_MODEL_PATH"] = blank
    cfg = build_config({}, env)
    assert cfg.brain_provider() == "offline"
    assert cfg.brain.api_key is None and cfg.brain.base_url is None
    assert cfg.embedding.model_path is None
    mail = {"channels": {"email": {"enabled": True, "address": "a@example.com"}}}
    with pytest.raises(ConfigError) as raised:
        build_config(mail, {"EMAIL_PASSWORD": blank})
    assert raised.value.key == "channels.email.password"
    telegram = {"channels": {"telegram": {"enabled": True}}}
    with pytest.raises(ConfigError) as raised:
        build_config(telegram, {"TELEGRAM_BOT_TOKEN": blank})
    assert raised.value.key == "channels.telegram.token"
    assert "required" in str(raised.value)


def test_blank_secrets_in_the_file_are_missing_and_set_ones_are_trimmed() -> None:
    cfg = build_config({"brain": {"api_key": "  "}, "embedding": {"model_path": " "}}, {})
    assert cfg.brain_provider() == "offline" and cfg.embedding.model_path is None
    with pytest.raises(ConfigError) as raised:
        build_config(
            {"channels": {"email": {"enabled": True, "address": "a@x.org", "password": " "}}}, {}
        )
    assert raised.value.key == "channels.email.password"
    # the newline of an environment file written with `echo`: not part of the key
    cfg = build_config({}, {"ANTHROPIC_API_KEY": "sk-ant-123\n"})
    assert cfg.brain.api_key == "sk-ant-123"
    cfg = build_config({"channels": {"telegram": {"token": " 1:abc "}}}, {})
    assert cfg.channels.telegram.token == "1:abc"


def test_placeholders_in_keys_and_in_the_environment_are_refused() -> None:
    # Regression: a placeholder was looked for in values only. A contact copied as
    # `"CHANGE_ME@x.org": known` and an environment file left with
    # `ANTHROPIC_API_KEY=CHANGE_ME` (a key sent on every reply, each one refused with 401)
    # both passed check-config.
    with pytest.raises(ConfigError) as raised:
        build_config({"trust": {"contacts": {"email": {"CHANGE_ME@x.org": "known"}}}}, {})
    assert raised.value.key == "trust.contacts.email.CHANGE_ME@x.org"
    assert "placeholder" in str(raised.value)
    with pytest.raises(ConfigError) as raised:
        build_config({}, {"ANTHROPIC_API_KEY": "CHANGE_ME"})
    assert raised.value.key == "brain.api_key"
    assert "ANTHROPIC_API_KEY still holds a placeholder" in str(raised.value)
    telegram = {"channels": {"telegram": {"enabled": True}}}
    with pytest.raises(ConfigError) as raised:
        build_config(telegram, {"TELEGRAM_BOT_TOKEN": "<your bot token>"})
    assert raised.value.key == "channels.telegram.token"
    assert "placeholder" in str(raised.value)


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("a: [\n", "line 2, column 1", "expected the node content, but found '<stream end>'"),
        ("a: b: c\n", "line 1, column 5", "mapping values are not allowed here"),
    ],
)
def test_invalid_yaml_is_one_line_naming_line_and_column(
    tmp_path: Path, text: str, where: str, what: str
) -> None:
    """Regression: the YAML error was PyYAML's own text over four lines (the parser's
    context, "in '<unicode string>'", a copy of the line, a caret), though check-config
    lists "every error, one line each"."""
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    [line] = err.value.lines()
    assert "\n" not in line and "<unicode string>" not in line
    assert line == f"{path} is not valid YAML at {where}: {what}"


def test_a_validators_message_comes_without_pydantics_value_error_prefix() -> None:
    """Regression: ``owner.timezone: Value error, unknown time zone 'Mars/Olympus'``."""
    with pytest.raises(ConfigError) as err:
        build_config({"owner": {"timezone": "Mars/Olympus"}}, env={})
    assert err.value.lines() == ["owner.timezone: unknown time zone 'Mars/Olympus'"]


def test_a_bad_value_from_the_environment_names_its_variable(tmp_path: Path) -> None:
    # Regression: TELEGRAM_BOT_TOKEN=abc was reported against the file's `telegram:`
    # line ("c.yaml, line 5"), and the file held no token
    path = tmp_path / "c.yaml"
    path.write_text("channels:\n  telegram:\n    enabled: true\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={"TELEGRAM_BOT_TOKEN": "abc"})
    assert info.value.key == "channels.telegram.token"
    assert str(info.value).endswith("(from TELEGRAM_BOT_TOKEN)") and "line" not in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={"TELEGRAM_BOT_TOKEN": "1:x", "ANTHROPIC_BASE_URL": "nope"})
    assert "brain.base_url" in str(info.value) and "(from ANTHROPIC_BASE_URL)" in str(info.value)


def test_prices_given_for_one_model_keep_the_others_defaults() -> None:
    # Regression (session 39): setting sonnet's price alone replaced the whole table,
    # and every haiku call (notes, titles, compression) cost nothing from then on.
    from bot.config import AppConfig

    config = AppConfig.model_validate(
        {"models": {"prices": {"sonnet": {"input": 2.5, "output": 12}}}}
    )
    prices = {alias: (p.input, p.output) for alias, p in config.models.prices.items()}
    assert prices == {"opus": (5.0, 25.0), "sonnet": (2.5, 12.0), "haiku": (1.0, 5.0)}


def _mail_with_ca(ca: str, security: str = "ssl") -> dict[str, Any]:
    tls = {"security": security, "tls_ca_file": ca}
    return {
        "owner": {"identities": {"email": ["me@example.org"]}},
        "channels": {
            "email": {"enabled": True, "address": "bot@example.org", "imap": tls, "smtp": tls}
        },
    }


def test_a_tls_ca_file_that_cannot_be_loaded_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression (session 41): a missing tls_ca_file passed check-config, and the daemon
    # logged "IMAP session ended (FileNotFoundError ...)" for good, naming neither.
    missing = tmp_path / "no-such-ca.pem"
    with pytest.raises(ConfigError) as info:
        build_config(_mail_with_ca(str(missing)), env={"EMAIL_PASSWORD": "pw"})
    assert [key for key, _ in info.value.problems] == [
        "channels.email.imap.tls_ca_file",
        "channels.email.smtp.tls_ca_file",
    ]
    assert all(f"{missing} cannot be read" in message for _, message in info.value.problems)
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigError) as info:
        build_config(_mail_with_ca(str(garbage)), env={"EMAIL_PASSWORD": "pw"})
    assert "holds no PEM certificate" in info.value.message and str(garbage) in info.value.message
    # exit 78 from check-config, naming the key, the file and its line
    config_file = _write(tmp_path, _mail_with_ca(str(missing)))
    monkeypatch.setenv("EMAIL_PASSWORD", "pw")
    assert cli.main(["check-config", "--config", str(config_file)]) == 78
    said = capsys.readouterr().err
    assert f"channels.email.imap.tls_ca_file: {missing} cannot be read" in said
    assert f"({config_file}, line " in said


def test_a_tls_ca_file_is_checked_only_where_it_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certifi = pytest.importorskip("certifi")
    env = {"EMAIL_PASSWORD": "pw"}
    assert build_config(_mail_with_ca(certifi.where()), env=env).channels.email.enabled
    missing = str(tmp_path / "no-such-ca.pem")
    build_config(_mail_with_ca(missing, security="none"), env=env)  # never loaded
    build_config(_mail_with_ca(missing), env={}, secrets=False)  # conversations, search
    # a leading ~ is the home directory, as for data_dir
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "ca.pem").write_bytes(Path(certifi.where()).read_bytes())
    config = build_config(_mail_with_ca("~/ca.pem"), env=env)
    assert config.channels.email.imap.tls_ca_file == str(tmp_path / "ca.pem")


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        ("owner:\n#  identities:\n#    telegram: ['123456789']\n", "owner", 1),
        ("channels:\n  web:\n#    port: 4321\n", "channels.web", 2),
        ("owner:\n  identities:\n", "owner.identities", 2),
    ],
)
def test_a_section_with_every_key_commented_out_is_named_as_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, key: str, line: int
) -> None:
    # Regression (session 42): `owner:` with every key under it commented out (YAML's
    # null) was pydantic's "Input should be a valid dictionary or instance of
    # OwnerConfig", a class name, not what to do.
    name = key.rpartition(".")[2]
    with pytest.raises(ConfigError) as info:
        build_config(yaml.safe_load(text), env={})
    assert info.value.key == key
    assert info.value.message == (
        f"the section is empty (YAML reads `{name}:` with nothing under it, e.g. every key "
        f"commented out, as null): give it a key, or remove the `{name}:` line to take "
        "the defaults"
    )
    path = _write(tmp_path, text)
    assert cli.main(["check-config", "--config", str(path)]) == 78
    err = capsys.readouterr().err
    assert f"configuration error: {key}: the section is empty" in err
    assert f"line {line})" in err and "instance of" not in err
