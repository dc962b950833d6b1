"""``my-agent check-config`` on settings the daemon starts with but cannot use as they
are (bot/config/checks.py), and on an empty config file."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot import cli, exitcodes
from bot.config import ConfigError, load_config
from bot.config.checks import config_warnings
from tests.conftest import clear_config_env, raw_config


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_config_env(monkeypatch)


def _write(tmp_path: Path, raw: Any) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw), encoding="utf-8")
    return path


def _check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(["--config", str(path), "check-config"])
    out, err = capsys.readouterr()
    return status, out, err


def test_a_missing_embedding_model_folder_is_warned_about_by_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: check-config said OK, and the daemon then ran keyword-only (its one
    # warning in the journal being the only sign).
    missing = tmp_path / "no-model-here"
    path = _write(
        tmp_path, raw_config(tmp_path, embedding={"enabled": True, "model_path": str(missing)})
    )
    status, out, err = _check(path, capsys)
    assert status == exitcodes.OK and "configuration OK" in out
    assert f"warning: embedding.model_path: no model folder at {missing}" in err
    assert "keyword-only" in err
    empty = tmp_path / "empty-model"
    empty.mkdir()
    _write(tmp_path, raw_config(tmp_path, embedding={"enabled": True, "model_path": str(empty)}))
    assert "embedding.model_path: " in _check(path, capsys)[2]
    assert "no .onnx model" in _check(path, capsys)[2]
    (empty / "model.onnx").write_bytes(b"")
    # fastembed reads tokenizer.json beside it: "Could not find tokenizer.json" in the
    # journal was the one sign before session 39
    assert f"embedding.model_path: {empty} holds no tokenizer.json" in _check(path, capsys)[2]
    (empty / "tokenizer.json").write_text("{}")
    assert "embedding.model_path" not in _check(path, capsys)[2]


def test_an_embedding_model_name_fastembed_does_not_know_is_warned_about_by_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: `model_name: local/minilm-copy` (a local copy renamed) passed
    # check-config, and the daemon ran keyword-only with a journal warning naming the
    # model but not the key; `my-agent status` listed no problem.
    path = _write(
        tmp_path, raw_config(tmp_path, embedding={"enabled": True, "model_name": "local/minilm"})
    )
    status, out, err = _check(path, capsys)
    assert status == exitcodes.OK and "configuration OK" in out
    assert "warning: embedding.model_name: 'local/minilm' is not a model fastembed knows" in err
    assert "keyword-only" in err and "sentence-transformers/all-MiniLM-L6-v2" in err
    # fastembed compares names without case, and so does the check
    for name in ("sentence-transformers/all-MiniLM-L6-v2", "BAAI/BGE-small-en-v1.5"):
        _write(tmp_path, raw_config(tmp_path, embedding={"enabled": True, "model_name": name}))
        assert "embedding.model_name" not in _check(path, capsys)[2]
    # embeddings off: the name is never loaded, nothing to say
    _write(tmp_path, raw_config(tmp_path, embedding={"enabled": False, "model_name": "x/y"}))
    assert "embedding.model_name" not in _check(path, capsys)[2]


def test_a_model_folder_without_the_named_models_file_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: bge-small's name with MiniLM's folder passed check-config; bge-small
    # reads model_optimized.onnx, and every command then searched by keyword only.
    monkeypatch.delenv("MY_AGENT_EMBEDDING_MODEL_PATH", raising=False)
    folder = tmp_path / "minilm"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"")
    (folder / "tokenizer.json").write_text("{}")
    embedding = {"enabled": True, "model_path": str(folder)}
    path = _write(tmp_path, raw_config(tmp_path, embedding=embedding))
    assert "embedding.model_name" not in _check(path, capsys)[2]  # MiniLM reads model.onnx
    embedding["model_name"] = "BAAI/bge-small-en-v1.5"
    _write(tmp_path, raw_config(tmp_path, embedding=embedding))
    status, _, err = _check(path, capsys)
    assert status == exitcodes.OK
    assert "embedding.model_name: 'BAAI/bge-small-en-v1.5' reads model_optimized.onnx" in err
    assert "holds model.onnx" in err and "keyword-only" in err


def test_a_model_whose_file_is_in_an_onnx_subfolder_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 39): snowflake-arctic-embed-xs reads onnx/model.onnx, and a
    # folder laid out so (which the daemon loads) was said to hold no .onnx model file,
    # search keyword-only; only the folder's top level was looked at.
    monkeypatch.delenv("MY_AGENT_EMBEDDING_MODEL_PATH", raising=False)
    folder = tmp_path / "arctic"
    (folder / "onnx").mkdir(parents=True)
    (folder / "onnx" / "model.onnx").write_bytes(b"")
    (folder / "tokenizer.json").write_text("{}")
    embedding = {
        "enabled": True,
        "model_path": str(folder),
        "model_name": "snowflake/snowflake-arctic-embed-xs",
    }
    path = _write(tmp_path, raw_config(tmp_path, embedding=embedding))
    status, out, err = _check(path, capsys)
    assert status == exitcodes.OK and "configuration OK" in out
    assert "keyword-only" not in err, err
    # a model that reads its weights beside the file (onnx/model.onnx_data) without them
    embedding["model_name"] = "ibm-granite/granite-embedding-small-english-r2"
    _write(tmp_path, raw_config(tmp_path, embedding=embedding))
    err = _check(path, capsys)[2]
    assert "reads onnx/model.onnx_data beside onnx/model.onnx" in err and "keyword-only" in err
    (folder / "onnx" / "model.onnx_data").write_bytes(b"")
    assert "keyword-only" not in _check(path, capsys)[2]
    # MiniLM's folder given to a model of the subfolder's layout names both
    (folder / "onnx" / "model.onnx").rename(folder / "model.onnx")
    embedding["model_name"] = "snowflake/snowflake-arctic-embed-xs"
    _write(tmp_path, raw_config(tmp_path, embedding=embedding))
    assert "reads onnx/model.onnx from embedding.model_path" in _check(path, capsys)[2]


def test_the_daemon_degrades_to_keyword_search_on_a_missing_model_folder(
    tmp_path: Path,
) -> None:
    """Why the missing folder is a warning and not an error (exit 78): `run` starts."""
    from bot.embedding import EmbeddingService

    config = load_config(
        _write(
            tmp_path,
            raw_config(tmp_path, embedding={"enabled": True, "model_path": str(tmp_path / "x")}),
        ),
        env={},
    )
    service = EmbeddingService(config.embedding)
    try:
        assert asyncio.run(service.load()) is False
        assert "no model folder" in (service.unavailable_reason or "")
    finally:
        service.close()


def test_an_unresolvable_server_host_is_warned_about_by_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: a typo in the IMAP host passed check-config; the mail channel then
    # retried forever at run time. A warning, not an error: DNS may be down right now.
    real = socket.getaddrinfo

    def getaddrinfo(host: str, *args: Any, **kwargs: Any) -> Any:
        if host == "imap.typo.test":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setenv("EMAIL_PASSWORD", "secret")
    email = {
        "enabled": True,
        "address": "bot@mail.test",
        "imap": {"host": "imap.typo.test"},
        "smtp": {"host": "127.0.0.1"},
    }
    path = _write(tmp_path, raw_config(tmp_path, channels={"email": email}))
    status, out, err = _check(path, capsys)
    assert status == exitcodes.OK and "configuration OK" in out
    assert "warning: channels.email.imap.host: 'imap.typo.test' does not resolve" in err
    assert "smtp" not in err


def test_a_resolver_that_does_not_answer_is_waited_for_a_bounded_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    release = threading.Event()

    def hanging(host: str, *args: Any, **kwargs: Any) -> Any:
        release.wait(10)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    config = load_config(
        _write(tmp_path, raw_config(tmp_path, channels={"web": {"enabled": True}})), env={}
    )
    try:
        found = config_warnings(config, resolve_seconds=0.2)
    finally:
        release.set()
    assert found == ["channels.web.host: '127.0.0.1' did not resolve within 0.2 s (is DNS up?)"]


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_an_empty_config_file_is_refused_by_check_config_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    # Regression: an empty file (truncated by a full disk, an editor that died, a
    # redirection typo) ran the embedded default: every configured channel silently off.
    path = _write(tmp_path, text)
    for command in ("check-config", "run"):
        capsys.readouterr()
        assert cli.main(["--config", str(path), command]) == exitcodes.EX_CONFIG, command
        err = capsys.readouterr().err
        assert f"{path} is empty" in err, command
    with pytest.raises(ConfigError, match="is empty"):
        load_config(path, env={})


def test_a_file_of_comments_only_or_braces_means_the_defaults(tmp_path: Path) -> None:
    """Written on purpose: every key commented out, or ``{}``."""
    for text in ("# all defaults\n# data_dir: x\n", "{}\n"):
        config = load_config(_write(tmp_path, text), env={})
        assert config.channels.web.enabled and config.brain_provider() == "offline"


def test_a_channel_enabled_with_no_owner_identity_on_it_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: e-mail enabled with owner.identities.email left out passed
    check-config silently; the owner's first mail was then a stranger's, answered
    "It has been passed on" and escalated about themselves."""
    email = {
        "enabled": True,
        "address": "bot@example.com",
        "password": "secret",
        "imap": {"host": "127.0.0.1"},
        "smtp": {"host": "127.0.0.1"},
    }
    path = _write(tmp_path, raw_config(tmp_path, channels={"email": email}))
    status, out, err = _check(path, capsys)
    assert status == exitcodes.OK and "configuration OK" in out
    assert (
        "warning: owner.identities.email: empty while channels.email is enabled: everyone "
        "who writes there is a third party, you included (add your address)"
    ) in err
    assert "owner.identities.telegram" not in err  # not enabled
    raw = raw_config(tmp_path, channels={"email": email})
    raw["owner"] = {"identities": {"email": ["me@example.com"]}}
    _write(tmp_path, raw)
    assert "owner.identities" not in _check(path, capsys)[2]


def test_a_secret_in_the_config_file_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: an API key written in config.yaml (mode 0644, readable by every user,
    often copied or committed) passed check-config and `run` without a word; the secrets
    belong in the environment file (mode 0600)."""
    path = _write(tmp_path, raw_config(tmp_path, brain={"api_key": "sk-ant-in-the-file"}))
    status, out, err = _check(path, capsys)
    assert status == exitcodes.OK and "configuration OK" in out
    assert (
        "warning: brain.api_key: a secret in the config file, which every user may read: "
        "set ANTHROPIC_API_KEY in the secrets file (mode 0600) and remove it from the config"
    ) in err
    assert "sk-ant-in-the-file" not in err  # the warning does not repeat the secret
    # With the key in the environment too, the file still holds it; without it there,
    # nothing to warn about.
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-the-environment")
    assert "brain.api_key: a secret" in _check(path, capsys)[2]  # the file holds it still
    path.write_text(yaml.safe_dump(raw_config(tmp_path)), encoding="utf-8")
    assert "brain.api_key" not in _check(path, capsys)[2]


def test_run_logs_the_secret_in_the_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run` warns in the journal at every start, not only check-config."""
    telegram = {"enabled": True, "token": "123:in-the-file"}
    raw = raw_config(tmp_path, channels={"telegram": telegram})
    raw["owner"] = {"identities": {"telegram": ["1"]}}
    path = _write(tmp_path, raw)

    async def stopped(*_args: Any, **_kwargs: Any) -> int:
        return exitcodes.OK

    class Exited(BaseException):
        pass

    def fake_exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr("bot.daemon.run_daemon", stopped)
    monkeypatch.setattr(os, "_exit", fake_exit)  # `run` ends in os._exit (bot.cli)
    capsys.readouterr()
    with pytest.raises(Exited) as exited:
        cli.main(["--config", str(path), "run"])
    assert exited.value.args == (exitcodes.OK,)
    err = capsys.readouterr().err
    assert "WARNING my_agent.cli: channels.telegram.token: a secret in the config file" in err
    assert "TELEGRAM_BOT_TOKEN in the secrets file" in err
    assert "123:in-the-file" not in err


def test_mail_security_that_does_not_fit_a_well_known_port_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: ``security: none`` at IMAP port 993 (or ``ssl`` at SMTP port 587)
    passed check-config; the daemon found out only at its third failed connection."""
    email = {
        "enabled": True,
        "address": "bot@example.com",
        "password": "secret",
        "imap": {"host": "127.0.0.1", "port": 993, "security": "none"},
        "smtp": {"host": "127.0.0.1", "port": 587, "security": "ssl"},
    }
    raw = raw_config(tmp_path, channels={"email": email})
    raw["owner"] = {"identities": {"email": ["me@example.com"]}}
    status, out, err = _check(_write(tmp_path, raw), capsys)
    assert status == exitcodes.OK and "configuration OK" in out
    assert (
        "warning: channels.email.imap.security: none while port 993 speaks TLS from the "
        "first byte: set it to ssl"
    ) in err
    assert (
        "warning: channels.email.smtp.security: ssl while port 587 starts in plain text: "
        "set it to starttls, or the port to 465"
    ) in err
    # Fitting settings, and ports that are not the well-known ones, are left alone.
    email["imap"] = {"host": "127.0.0.1", "port": 143, "security": "starttls"}
    email["smtp"] = {"host": "127.0.0.1", "port": 2525, "security": "ssl"}
    raw = raw_config(tmp_path, channels={"email": email})
    raw["owner"] = {"identities": {"email": ["me@example.com"]}}
    assert ".security" not in _check(_write(tmp_path, raw), capsys)[2]


def test_a_data_dir_that_cannot_be_created_on_a_read_only_disk_is_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression (session 40): check-config said "configuration OK" of a data_dir on a
    # read-only file system, and `run` then waited for ever, unable to open the store.
    # (A read-only mount needs root: the file system's answers are the test's.)
    place = tmp_path / "mnt"
    place.mkdir()
    raw = raw_config(tmp_path)
    raw["data_dir"] = str(place / "agent")
    real_access, real_statvfs = os.access, os.statvfs
    monkeypatch.setattr(os, "access", lambda p, m: Path(p) != place and real_access(p, m))

    def statvfs(p: Any) -> Any:
        st = real_statvfs(p)
        return type("St", (), {"f_flag": st.f_flag | os.ST_RDONLY})() if Path(p) == place else st

    monkeypatch.setattr(os, "statvfs", statvfs)
    status, out, err = _check(_write(tmp_path, raw), capsys)
    assert status == exitcodes.OK and "configuration OK" in out
    assert (
        f"warning: data_dir: {place / 'agent'} cannot be created in {place}: the file "
        "system is read-only"
    ) in err, err
    assert not (place / "agent").exists()  # checked, not created


def test_a_data_dir_under_a_file_or_not_writable_is_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bot.config.checks import data_dir_warnings

    assert data_dir_warnings(tmp_path / "new" / "agent") == []  # it can be created
    (tmp_path / "file").write_text("x")
    [under_file] = data_dir_warnings(tmp_path / "file" / "agent")
    assert under_file.endswith(f"cannot be created: {tmp_path / 'file'} is not a directory")
    monkeypatch.setattr(os, "access", lambda p, m: False)
    [denied] = data_dir_warnings(tmp_path)
    assert denied == (
        f"data_dir: {tmp_path} cannot be written: permission denied for this user "
        f"(uid {os.getuid()})"
    )


def test_no_channel_enabled_is_warned_about_by_check_config_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (session 41): every channel disabled passed check-config ("channels: "
    and nothing after it), and the daemon ran with nothing to receive messages on."""
    path = _write(tmp_path, raw_config(tmp_path, channels={"web": {"enabled": False}}))
    status, out, err = _check(path, capsys)
    assert status == exitcodes.OK and out.rstrip().endswith("channels: none")
    assert "warning: channels: none is enabled" in err

    async def stopped(*_args: Any, **_kwargs: Any) -> int:
        return exitcodes.OK

    class Exited(BaseException):
        pass

    def fake_exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr("bot.daemon.run_daemon", stopped)
    monkeypatch.setattr(os, "_exit", fake_exit)  # `run` ends in os._exit (bot.cli)
    with pytest.raises(Exited):
        cli.main(["--config", str(path), "run"])
    assert "WARNING my_agent.cli: channels: none is enabled" in capsys.readouterr().err
    # one channel is enough: the web dashboard, say
    web = _write(tmp_path, raw_config(tmp_path, channels={"web": {"enabled": True}}))
    assert "channels: none" not in _check(web, capsys)[2]
