"""The systemd unit: rendering, install-service, systemd-analyze verify/security, W^X check."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bot import service_unit
from bot.service_unit import (
    SYSTEM_CONFIG,
    find_executable,
    install_service,
    render_unit,
)
from tests.conftest import clear_config_env

REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI") == "true"


def _shared() -> Path:
    env = os.environ.get("MY_AGENT_SHARED")
    if env:
        return Path(env)
    rel = REPO / ".." / "shared"
    return rel if rel.is_dir() else Path("/work/shared")


def _analyze() -> str:
    exe = shutil.which("systemd-analyze")
    if exe is None:
        if IN_CI:
            pytest.fail("systemd-analyze missing (Debian package: systemd)")
        pytest.skip("systemd-analyze not installed (apt-get install systemd)")
    return exe


def _directives(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def test_repository_unit_is_the_rendered_default() -> None:
    committed = (REPO / "systemd" / "my-agent.service").read_text()
    assert committed == render_unit(config=SYSTEM_CONFIG)


def test_system_unit_directives() -> None:
    d = _directives(render_unit(config=SYSTEM_CONFIG))
    expected = {
        "After": "network-online.target time-sync.target",
        "Type": "notify",
        "NotifyAccess": "main",
        "WatchdogSec": "30",
        "Restart": "on-failure",
        # 74 too (session 40): a damaged state.db restarted into the same error
        "RestartPreventExitStatus": "74 78",
        "StateDirectory": "my-agent",
        "EnvironmentFile": "-/etc/my-agent/env",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "PrivateMounts": "yes",
        "ReadWritePaths": "%S/my-agent",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectControlGroups": "yes",
        "RestrictSUIDSGID": "yes",
        "LockPersonality": "yes",
        "RestrictRealtime": "yes",
        "RestrictNamespaces": "yes",
        "SystemCallArchitectures": "native",
        "CapabilityBoundingSet": "",
        "MemoryDenyWriteExecute": "yes",
        "UMask": "0077",
        "DynamicUser": "yes",
    }
    for key, value in expected.items():
        assert d.get(key) == [value], key
    assert "MY_AGENT_DATA_DIR=%S/my-agent" in d["Environment"]
    assert d["ExecStart"] == [f"{service_unit.DEFAULT_EXECUTABLE} run --config {SYSTEM_CONFIG}"]
    # systemd must wait longer than the daemon's own drain bound before SIGKILL.
    assert int(d["TimeoutStopSec"][0]) > service_unit.DRAIN_SECONDS
    assert d["WantedBy"] == ["multi-user.target"]


def test_user_unit_leaves_out_namespace_options() -> None:
    d = _directives(render_unit(user=True, executable=["/usr/bin/my-agent"]))
    assert d["ExecStart"] == ["/usr/bin/my-agent run"]
    assert d["EnvironmentFile"] == ["-%E/my-agent/env"]
    assert d["WantedBy"] == ["default.target"]
    for key in ("ProtectSystem", "ProtectHome", "PrivateTmp", "DynamicUser", "User"):
        assert key not in d
    assert d["NoNewPrivileges"] == ["yes"] and d["MemoryDenyWriteExecute"] == ["yes"]


def test_exec_start_quoting_and_home_paths() -> None:
    text = render_unit(executable=["/home/al ice/v%nv/bin/my-agent"], run_as="alice")
    d = _directives(text)
    assert d["ExecStart"] == ['"/home/al ice/v%%nv/bin/my-agent" run']
    assert d["ProtectHome"] == ["read-only"]  # the code lives in a home directory
    assert d["User"] == ["alice"] and "DynamicUser" not in d


def _verify(unit: Path, *extra: str, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(
        [_analyze(), *extra, "verify", str(unit)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    # verify exits 0 on unknown keys or bad values: any diagnostic is a failure here.
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr


def test_systemd_analyze_verify_system_unit(tmp_path: Path) -> None:
    unit = tmp_path / "my-agent.service"
    unit.write_text(render_unit(executable=find_executable(), config=SYSTEM_CONFIG))
    _verify(unit)


def test_systemd_analyze_verify_user_unit(tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    unit = tmp_path / "my-agent.service"
    unit.write_text(render_unit(user=True, executable=find_executable()))
    _verify(unit, "--user", env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)})


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    # The check above can fail: a unit whose executable is missing is rejected.
    unit = tmp_path / "my-agent.service"
    unit.write_text(render_unit(executable=[str(tmp_path / "nope" / "my-agent")]))
    with pytest.raises(AssertionError):
        _verify(unit)


def test_security_exposure_is_low(tmp_path: Path) -> None:
    unit = tmp_path / "my-agent.service"
    unit.write_text(render_unit(executable=find_executable(), config=SYSTEM_CONFIG))
    proc = subprocess.run(
        [_analyze(), "security", "--offline=true", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", proc.stdout)
    assert match, proc.stdout[-2000:] + proc.stderr
    # 1.5 before PrivateMounts=yes (session 21): a hardening option dropped shows here.
    assert float(match.group(1)) <= 1.4, proc.stdout[-3000:]


def test_install_service_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    result = install_service(True, executable=["/usr/bin/my-agent"])
    assert result.path == tmp_path / "cfg" / "systemd" / "user" / "my-agent.service"
    assert result.path.read_text() == result.text
    assert oct(result.path.stat().st_mode & 0o777) == "0o644"
    assert "ExecStart=/usr/bin/my-agent run\n" in result.text  # no config file yet
    joined = "\n".join(result.next_commands)
    assert "systemctl --user daemon-reload" in joined
    assert "systemctl --user enable --now my-agent.service" in joined
    assert "config.example.yaml" in joined and "enable-linger" in joined
    # Once the config exists, a second run points the unit at it.
    cfg = tmp_path / "cfg" / "my-agent" / "config.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("owner: {name: Test}\n")
    again = install_service(True, executable=["/usr/bin/my-agent"])
    assert f"ExecStart=/usr/bin/my-agent run --config {cfg}\n" in again.text
    assert "config.example.yaml" not in "\n".join(again.next_commands)


def test_install_service_system_to_output(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("{}\n")
    out = tmp_path / "out" / "my-agent.service"
    result = install_service(
        False, output=out, config=cfg, executable=["/home/bob/venv/bin/my-agent"]
    )
    assert result.path == out and out.is_file()
    d = _directives(out.read_text())
    assert d["ExecStart"] == [f"/home/bob/venv/bin/my-agent run --config {cfg}"]
    assert d["ProtectHome"] == ["read-only"]
    assert any("DynamicUser" in w for w in result.warnings)
    joined = "\n".join(result.next_commands)
    assert f"install -m 0644 {out} /etc/systemd/system/my-agent.service" in joined
    assert "systemctl enable --now my-agent.service" in joined
    assert "MY_AGENT_DATA_DIR=/var/lib/my-agent /home/bob/venv/bin/my-agent status" in joined


def test_install_service_missing_config_is_warned(tmp_path: Path) -> None:
    result = install_service(
        False,
        output=tmp_path / "u.service",
        config=tmp_path / "absent.yaml",
        executable=["/opt/my-agent/venv/bin/my-agent"],
    )
    assert any("status 78" in w for w in result.warnings)


def test_cli_main_prints_next_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    service_unit.add_arguments(parser)
    args = parser.parse_args(["--output", str(tmp_path / "x.service"), "--run-as", "agent"])
    assert service_unit.main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {tmp_path / 'x.service'}")
    assert "daemon-reload" in out
    assert "User=agent" in (tmp_path / "x.service").read_text()


def test_cli_main_unwritable_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    target = locked / "file-not-dir"
    target.write_text("")
    parser = argparse.ArgumentParser()
    service_unit.add_arguments(parser)
    # A path below a regular file cannot be created, whoever we are.
    args = parser.parse_args(["--output", str(target / "x.service")])
    assert service_unit.main(args) == 73  # EX_CANTCREAT, never a traceback
    assert "cannot write the unit" in capsys.readouterr().err


def test_find_executable_runs() -> None:
    argv = find_executable()
    assert Path(argv[0]).is_file() and os.access(argv[0], os.X_OK)


MDWE_CHECK = r"""
import ctypes, mmap, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN
    print("NO-MDWE", ctypes.get_errno()); sys.exit(3)
try:
    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    print("W+X still allowed"); sys.exit(4)
except OSError:
    pass
from bot.db import select_driver
drv = select_driver()
from fastembed import TextEmbedding
model = TextEmbedding(model_name="sentence-transformers/all-MiniLM-L6-v2",
                      specific_model_path=sys.argv[1], threads=1)
vec = list(model.embed(["memory deny write execute"]))[0]
print("OK", drv.vec_available, vec.shape[0])
"""


def test_memory_deny_write_execute_keeps_onnxruntime_working(tmp_path: Path) -> None:
    """MemoryDenyWriteExecute=yes must not break embeddings or sqlite-vec.

    The kernel's PR_SET_MDWE (what systemd uses for that setting when available) is
    applied to a child process that then loads onnxruntime with the real model.
    """
    model = _shared() / "models" / "all-MiniLM-L6-v2-onnx"
    if not (model / "model.onnx").is_file():
        if IN_CI:
            pytest.fail(f"embedding model missing at {model}")
        pytest.skip(f"embedding model missing at {model}")
    proc = subprocess.run(
        [sys.executable, "-c", MDWE_CHECK, str(model)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TMPDIR": str(tmp_path)},
        timeout=120,
    )
    if proc.returncode == 3:
        pytest.skip("kernel without PR_SET_MDWE (Linux < 6.3)")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split()[-3:] == ["OK", "True", "384"]


def test_stop_timeout_exceeds_the_daemon_drain_bound() -> None:
    from bot import daemon

    d = _directives(render_unit(config=SYSTEM_CONFIG))
    # The daemon drains for DRAIN_SECONDS, then stops channels and closes the databases.
    assert daemon.DRAIN_SECONDS + 10 <= int(d["TimeoutStopSec"][0])


def test_an_interpreter_in_a_home_directory_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: a venv outside any home directory whose python links to pyenv's under
    # /root got ProtectHome=yes and no warning: the unit could not start.
    from bot import service_unit_text

    home = tmp_path / "home"
    monkeypatch.setattr(service_unit_text, "HOME_PREFIXES", (f"{home}/",))
    base = home / "alice" / ".pyenv" / "bin" / "python3.11"
    base.parent.mkdir(parents=True)
    base.write_text("")
    venv = tmp_path / "opt" / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(base)
    script = venv / "my-agent"
    script.write_text(f"#!{venv / 'python'}\nimport sys\n")
    result = install_service(
        False, output=tmp_path / "u.service", config=tmp_path / "c.yaml", executable=[str(script)]
    )
    assert _directives((tmp_path / "u.service").read_text())["ProtectHome"] == ["read-only"]
    assert any(str(base) in w and "home directory" in w for w in result.warnings)
    # and a config in /tmp, which the service's private /tmp hides
    assert any("PrivateTmp" in w for w in result.warnings) == str(tmp_path).startswith("/tmp/")


@pytest.mark.parametrize("user", [False, True])
def test_the_status_command_printed_reads_the_services_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user: bool
) -> None:
    # Regression: the printed `my-agent status` had no --config, so it read the embedded
    # default (or a .my_agent/config.yaml in the current directory): with the dashboard
    # moved to another port it probed 4321 and reported a healthy service as failing.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    cfg = tmp_path / "config.yaml"
    cfg.write_text("channels: {web: {port: 8080}}\n")
    result = install_service(
        user, output=tmp_path / "u.service", config=cfg, executable=["/opt/v/bin/my-agent"]
    )
    status = [c for c in result.next_commands if " status" in c and "systemctl" not in c]
    assert len(status) == 1 and status[0].endswith(f"/opt/v/bin/my-agent status --config {cfg}")
    # without a config file the service runs on the defaults, and so does status
    bare = install_service(user, output=tmp_path / "v.service", executable=["/opt/v/bin/my-agent"])
    assert [c for c in bare.next_commands if c.endswith("/opt/v/bin/my-agent status")]


@pytest.mark.parametrize("user", [False, True])
def test_the_env_files_directory_is_created_when_the_config_lives_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user: bool
) -> None:
    """Regression: with ``--config /srv/agent/config.yaml`` the commands printed went
    straight to ``install -m 0600 /dev/null /etc/my-agent/env``, which fails with "No such
    file or directory" on a machine where nothing had created /etc/my-agent."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    cfg = tmp_path / "srv" / "config.yaml"
    cfg.parent.mkdir()
    cfg.write_text("{}\n")
    result = install_service(
        user, output=tmp_path / "u.service", config=cfg, executable=["/opt/v/bin/my-agent"]
    )
    env_dir = (tmp_path / "cfg" / "my-agent") if user else Path("/etc/my-agent")
    made = [
        i for i, c in enumerate(result.next_commands) if c.endswith(f"install -d -m 0755 {env_dir}")
    ]
    filled = [i for i, c in enumerate(result.next_commands) if f"/dev/null {env_dir}/env" in c]
    assert made and filled and made[0] < filled[0], result.next_commands


def test_run_as_a_user_this_machine_lacks_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: ``--run-as nosuchuser`` wrote the unit without a word, and systemd
    then failed every start with status 217/USER."""
    parser = argparse.ArgumentParser()
    service_unit.add_arguments(parser)
    for who, warned in (("no-such-user-qa20", True), ("root", False), ("0", False)):
        args = parser.parse_args(["--output", str(tmp_path / "x.service"), "--run-as", who])
        assert service_unit.main(args) == 0
        err = capsys.readouterr().err
        assert (f"there is no user {who!r} on this machine" in err) is warned, err
        assert ("217/USER" in err) is warned


def test_run_as_with_a_user_unit_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: ``install-service --user --run-as root`` ignored --run-as silently."""
    parser = argparse.ArgumentParser()
    service_unit.add_arguments(parser)
    out = tmp_path / "u.service"
    args = parser.parse_args(["--user", "--output", str(out), "--run-as", "root"])
    assert service_unit.main(args) == 64
    assert "--run-as is for the system unit" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("user", [False, True])
def test_a_program_in_tmp_is_warned_about(tmp_path: Path, user: bool) -> None:
    # Regression: a config under /tmp was warned about, a venv under /tmp was not, and
    # the service, with its private /tmp, failed to start (203/EXEC).
    result = install_service(
        user,
        output=tmp_path / "u.service",
        config=None,
        executable=["/tmp/try/venv/bin/my-agent"],
    )
    warned = [w for w in result.warnings if "/tmp/try/venv/bin/my-agent" in w]
    if user:  # a user unit has no private /tmp
        assert warned == []
    else:
        [warning] = warned
        assert "PrivateTmp" in warning and "203/EXEC" in warning


@pytest.mark.parametrize("user", [False, True])
def test_the_next_commands_are_quoted_for_the_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user: bool
) -> None:
    """Regression: with a space in --output, --config, the venv or $HOME, the printed
    commands split at it when pasted (`bash: /opt/qa: No such file or directory`)."""
    import shlex

    spaced = tmp_path / "my files"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(spaced / "cfg"))
    cfg = spaced / "srv" / "config.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("{}\n")
    out = spaced / "u.service"
    exe = "/opt/my venv/bin/my-agent"
    result = install_service(user, output=out, config=cfg, executable=[exe])
    words = [shlex.split(c, comments=True) for c in result.next_commands]
    assert ["install", "-m", "0644", str(out)] == next(w for w in words if str(out) in w)[-5:-1]
    status = next(w for w in words if "status" in w and w[0] != "systemctl")
    assert status[-4:] == [exe, "status", "--config", str(cfg)]
    if user:
        env_dir = spaced / "cfg" / "my-agent"
        assert ["install", "-d", "-m", "0755", str(env_dir)] in words


def _a_store(root: Path) -> Path:
    (root / "conversations").mkdir(parents=True)
    (root / "conversations" / "conv-01M8JJMH0HS3022X2ZHTEARK6G.jsonl").write_text("{}\n")
    return root


@pytest.mark.parametrize("user", [False, True])
def test_a_store_the_unit_will_not_use_is_warned_about_with_how_to_move_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user: bool
) -> None:
    """Regression (session 41): ``install-service --config F`` where F's ``data_dir``
    held the owner's conversations said nothing, and the service, whose
    MY_AGENT_DATA_DIR=%S/my-agent wins over data_dir, started on an empty store."""
    clear_config_env(monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    store = _a_store(tmp_path / "my store")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"data_dir: {store}\n")
    result = install_service(
        user, output=tmp_path / "u.service", config=cfg, executable=["/opt/v/bin/my-agent"]
    )
    [warning] = [w for w in result.warnings if "holds a store" in w]
    target = tmp_path / "state" / "my-agent" if user else Path("/var/lib/my-agent")
    assert f"{store} holds a store" in warning and f"MY_AGENT_DATA_DIR={target}" in warning
    assert f"cp -a '{store}/.' {target}/" in warning
    assert ("chown -R root:root /var/lib/my-agent/" in warning) is not user
    if user:  # the commands it gives do move it (a system unit's need root)
        commands = warning.split("if the service runs): ")[1].split(" (docs/")[0]
        subprocess.run(commands, shell=True, check=True)
        assert (target / "conversations").is_dir()
        moved = install_service(
            user, output=tmp_path / "u.service", config=cfg, executable=["/opt/v/bin/my-agent"]
        )
        assert "(it holds a store already: keep one)" in " ".join(moved.warnings)
        cfg.write_text(f"data_dir: {target}\n")  # the service's own directory: nothing to say
        same = install_service(
            user, output=tmp_path / "u.service", config=cfg, executable=["/opt/v/bin/my-agent"]
        )
        assert not [w for w in same.warnings if "holds a store" in w]


def test_the_current_directorys_store_and_an_invalid_config_are_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clear_config_env(monkeypatch)
    monkeypatch.chdir(tmp_path)
    out, exe = tmp_path / "u.service", ["/opt/v/bin/my-agent"]
    quiet = install_service(False, output=out, config=None, executable=exe)
    assert not [w for w in quiet.warnings if "store" in w]  # nothing stored: nothing said
    _a_store(tmp_path / ".my_agent")
    told = install_service(False, output=out, config=None, executable=exe)
    assert [w for w in told.warnings if f"{tmp_path / '.my_agent'} holds a store" in w]
    cfg = tmp_path / "config.yaml"
    cfg.write_text("brain: {max_tokens: lots}\n")
    wrong = install_service(False, output=out, config=cfg, executable=exe)
    assert [w for w in wrong.warnings if "brain.max_tokens" in w and "status 78" in w]
