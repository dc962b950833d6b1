"""What ``my-agent check-config`` warns about in a valid configuration.

These settings are not errors: the daemon starts with them, but not as the owner
expects. A missing ``embedding.model_path`` makes search keyword-only (the daemon logs
it once and goes on); a server host name that does not resolve now may resolve later
(DNS can be down while the config is checked, and the mail channel keeps retrying).
Each warning is ``dotted.key: what is wrong``, like the errors of :mod:`bot.config`.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from bot.config import SECRET_VARS
from bot.config.model import AppConfig

# How long all host name look-ups together may take: a resolver that does not answer
# (no network) must not hold check-config for its own timeouts and retries (30 s+).
RESOLVE_SECONDS = 3.0


def config_warnings(cfg: AppConfig, resolve_seconds: float = RESOLVE_SECONDS) -> list[str]:
    """``dotted.key: message`` for each setting the daemon accepts but cannot use as is."""
    found = secret_warnings(cfg) + channel_warnings(cfg)
    found += data_dir_warnings(cfg.data_dir)
    found += _model_path_warnings(cfg)
    found += _model_name_warnings(cfg)
    found += _owner_warnings(cfg)
    found += _security_port_warnings(cfg)
    found += _host_warnings(_server_hosts(cfg), resolve_seconds)
    return found


def secret_warnings(cfg: AppConfig) -> list[str]:
    """A secret written in the config file: the daemon runs with it, but the file is
    meant to be readable (mode 0644) and is often copied or committed. ``run`` logs
    these too (no look-ups: cheap at every start)."""
    return [
        f"{key}: a secret in the config file, which every user may read: set "
        f"{SECRET_VARS[key]} in the secrets file (mode 0600) and remove it from the config"
        for key in cfg.secrets_in_file()
    ]


def channel_warnings(cfg: AppConfig) -> list[str]:
    """No channel enabled: the daemon starts, says ready and receives nothing, no
    dashboard either (before session 41 check-config said OK, "channels: " and nothing
    after it). ``run`` logs it too (no look-ups: cheap at every start)."""
    if cfg.channels.enabled():
        return []
    return [
        "channels: none is enabled: the daemon would run with nothing to receive messages "
        "on, not even the dashboard (set channels.web.enabled, .telegram or .email: true)"
    ]


def data_dir_warnings(data_dir: Path) -> list[str]:
    """A data directory this user cannot create or write (nothing is created here): on a
    read-only file system ``run`` waits for the disk, logging that it cannot open the
    store, and before session 40 check-config said "configuration OK" of it. Under
    another user (the service's) the answer may differ: the warning names this one."""
    path = data_dir.absolute()
    place = path
    while not place.exists() and place != place.parent:
        place = place.parent
    what = f"data_dir: {path}"
    if not place.is_dir():
        return [f"{what} cannot be created: {place} is not a directory"]
    if os.access(place, os.W_OK | os.X_OK):
        return []
    verb = "cannot be written" if place == path else f"cannot be created in {place}"
    try:
        read_only = bool(os.statvfs(place).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return [
            f"{what} {verb}: the file system is read-only (`run` waits for it to be "
            "writable); set data_dir (MY_AGENT_DATA_DIR) to a writable directory"
        ]
    return [f"{what} {verb}: permission denied for this user (uid {os.getuid()})"]


def _owner_warnings(cfg: AppConfig) -> list[str]:
    """A channel enabled with no owner identity on it: the owner's own messages there
    are a stranger's (escalated to the dashboard and answered "passed on"). check-config
    said OK, and the first sign was that reply."""
    found = []
    for channel, what in (("telegram", "numeric user id"), ("email", "address")):
        if getattr(cfg.channels, channel).enabled and not cfg.owner.identities.get(channel):
            found.append(
                f"owner.identities.{channel}: empty while channels.{channel} is enabled: "
                f"everyone who writes there is a third party, you included (add your {what})"
            )
    return found


# The well-known mail ports and what they speak (RFC 8314, RFC 6409, RFC 3501): a
# setting against them times out or fails at the handshake at every start. Other
# ports can be anything, so only these are checked.
_TLS_PORTS = {"imap": 993, "smtp": 465}
_PLAIN_PORTS = {"imap": (143,), "smtp": (25, 587)}


def _security_port_warnings(cfg: AppConfig) -> list[str]:
    """``security`` that does not fit a well-known port: the channel would find out at
    its third failed connection (channels/email/misconfig.py); check-config says it now."""
    email = cfg.channels.email
    if not email.enabled:
        return []
    found = []
    for name, server in (("imap", email.imap), ("smtp", email.smtp)):
        key = f"channels.email.{name}.security"
        if server.port == _TLS_PORTS[name] and server.security != "ssl":
            found.append(
                f"{key}: {server.security} while port {server.port} speaks TLS from the "
                "first byte: set it to ssl"
            )
        elif server.port in _PLAIN_PORTS[name] and server.security == "ssl":
            found.append(
                f"{key}: ssl while port {server.port} starts in plain text: set it to "
                f"starttls, or the port to {_TLS_PORTS[name]}"
            )
    return found


def _model_path_warnings(cfg: AppConfig) -> list[str]:
    """The daemon loads a local model folder when one is named (bot.embedding), and with
    none there it does not fall back to a download: search stays keyword-only."""
    path = cfg.embedding.model_path
    if not cfg.embedding.enabled or not path:
        return []
    key = "embedding.model_path"
    if os.environ.get("MY_AGENT_EMBEDDING_MODEL_PATH"):
        key += " (from MY_AGENT_EMBEDDING_MODEL_PATH)"
    folder = Path(path).expanduser()
    effect = "the daemon runs with keyword-only search"
    if not folder.is_dir():
        return [f"{key}: no model folder at {folder}: {effect}"]
    try:
        # some models' file is onnx/model.onnx (snowflake-arctic-embed, granite-embedding):
        # before session 39 only the top level was looked at, and such a folder, which
        # the daemon loads, was said to leave search keyword-only
        has_model = any(folder.rglob("*.onnx"))
        has_tokenizer = (folder / "tokenizer.json").is_file()
    except OSError as exc:
        return [f"{key}: {folder} cannot be read ({exc}): {effect}"]
    if not has_model:
        return [f"{key}: {folder} holds no .onnx model file: {effect}"]
    if not has_tokenizer:  # fastembed reads it from the top level, whatever the model
        return [f"{key}: {folder} holds no tokenizer.json: {effect}"]
    return []


def _model_name_warnings(cfg: AppConfig) -> list[str]:
    """fastembed loads only the models it knows by name (also from a local
    ``model_path``: the name says how to read the files). Another name left the daemon
    keyword-only, with check-config saying OK and `my-agent status` listing no problem;
    the one sign was a journal warning that named the model, not the key."""
    name = cfg.embedding.model_name
    if not cfg.embedding.enabled:
        return []
    try:
        from fastembed import TextEmbedding  # (0.4 s: here only, never in `run`'s start)

        supported = TextEmbedding.list_supported_models()
        known = [str(m["model"]) for m in supported]
    except Exception:  # no fastembed: the daemon says so itself, keyword-only
        return []
    for model in supported:
        if name.lower() == str(model["model"]).lower():
            extra = [str(f) for f in model.get("additional_files") or []]
            return _model_file_warnings(cfg, name, str(model.get("model_file") or ""), extra)
    like = [model for model in known if "minilm" in model.lower()][:3]
    return [
        f"embedding.model_name: {name!r} is not a model fastembed knows: the daemon runs "
        f"with keyword-only search (e.g. {', '.join(like) or known[0]})"
    ]


def _model_file_warnings(
    cfg: AppConfig, name: str, model_file: str, additional: list[str]
) -> list[str]:
    """The file fastembed reads for ``name`` from a local ``model_path`` (its description's
    ``model_file``, maybe in a subfolder: ``onnx/model.onnx``), and the ones it reads
    beside it (``additional_files``: the weights of ``onnx/model.onnx_data``): another
    model's folder (MiniLM's ``model.onnx`` for bge-small, which reads
    ``model_optimized.onnx``) passed, and every command then warned that the file
    "doesn't exist" and searched by keyword only."""
    folder = Path(cfg.embedding.model_path or "").expanduser()
    if not cfg.embedding.model_path or not model_file or not folder.is_dir():
        return []  # no folder: _model_path_warnings says so
    effect = "the daemon runs with keyword-only search"
    try:
        if (folder / model_file).is_file():
            missing = [f for f in additional if not (folder / f).is_file()]
            if not missing:
                return []
            return [
                f"embedding.model_name: {name!r} reads {', '.join(missing)} beside "
                f"{model_file}, and {folder} does not hold it: {effect}"
            ]
        found = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.onnx"))
    except OSError:
        return []
    if not found:
        return []  # "holds no .onnx model file" is said already
    return [
        f"embedding.model_name: {name!r} reads {model_file} from embedding.model_path, and "
        f"{folder} holds {', '.join(found)} (another model's files?): {effect}"
    ]


def _server_hosts(cfg: AppConfig) -> list[tuple[str, str]]:
    """(dotted key, host name) of every server the enabled channels connect to or bind."""
    channels = cfg.channels
    hosts: list[tuple[str, str]] = []
    if channels.web.enabled:
        hosts.append(("channels.web.host", channels.web.host))
    if channels.loopback.enabled:
        hosts.append(("channels.loopback.host", channels.loopback.host))
    if channels.email.enabled:
        hosts.append(("channels.email.imap.host", channels.email.imap.host))
        hosts.append(("channels.email.smtp.host", channels.email.smtp.host))
    if channels.telegram.enabled and channels.telegram.api_base:
        hosts.append(
            ("channels.telegram.api_base", urlsplit(channels.telegram.api_base).hostname or "")
        )
    if cfg.brain_provider() == "anthropic" and cfg.brain.base_url:
        hosts.append(("brain.base_url", urlsplit(cfg.brain.base_url).hostname or ""))
    return [(key, host) for key, host in hosts if host]


def _host_warnings(hosts: list[tuple[str, str]], seconds: float) -> list[str]:
    """Resolve every host at once on daemon threads, waiting at most ``seconds`` in all
    (a thread still inside getaddrinfo does not keep the process from exiting)."""
    results: dict[str, str | None] = {}

    def resolve(host: str) -> None:
        try:
            socket.getaddrinfo(host, None)
        except (OSError, UnicodeError) as exc:
            results[host] = str(exc) or type(exc).__name__
        else:
            results[host] = None

    threads = {}
    for host in {host for _, host in hosts}:
        thread = threading.Thread(target=resolve, args=(host,), daemon=True, name="resolve")
        thread.start()
        threads[host] = thread
    deadline = time.monotonic() + seconds
    for thread in threads.values():
        thread.join(max(0.0, deadline - time.monotonic()))
    found = []
    for key, host in hosts:
        if host not in results:
            found.append(f"{key}: {host!r} did not resolve within {seconds:g} s (is DNS up?)")
        elif results[host] is not None:
            found.append(f"{key}: {host!r} does not resolve ({results[host]})")
    return found
