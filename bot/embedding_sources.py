"""Where the embedding model can come from, asked before it is loaded.

A local model folder (:func:`resolve_model_path`: the ``MY_AGENT_EMBEDDING_MODEL_PATH``
environment variable, else ``embedding.model_path``); whether a model cache holds
anything at all (:func:`cache_empty`); and, before a download is tried, whether
fastembed's model hub answers (:func:`hub_unreachable`: ``HF_ENDPOINT``, through
huggingface_hub's own HTTP session, so a proxy is honoured). On a machine that cannot
reach the hub, fastembed's retries printed six ERROR lines over about 40 s before our
warning; :class:`bot.embedding.EmbeddingService` asks here first and says why at once.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

from bot.config.model import EmbeddingConfig

ENV_MODEL_PATH = "MY_AGENT_EMBEDDING_MODEL_PATH"
# added to a failure to load the model from the cache or the hub: what the owner can do
HINT = "embedding.model_path or MY_AGENT_EMBEDDING_MODEL_PATH can point at a local copy"


# The hub is asked this many times, this far apart, each with this timeout, before the
# daemon gives up downloading: a refused or unresolvable hub fails each try at once
# (about 2 s in all); a silent one costs 3 x 5 s, where fastembed's retries took 40 s.
HUB_PROBE_TRIES = 3
HUB_PROBE_PAUSE = 1.0
HUB_PROBE_TIMEOUT = 5.0


def resolve_model_path(config: EmbeddingConfig) -> str | None:
    """The local model folder to use, or None to let fastembed use its cache/hub."""
    path = os.environ.get(ENV_MODEL_PATH) or config.model_path
    return str(Path(path).expanduser()) if path else None


def cache_empty(folder: Path | None) -> bool:
    """Whether ``folder`` (a model cache) is missing or holds nothing at all."""
    if folder is None:
        return False  # fastembed's own default cache: only fastembed knows it
    try:
        return not any(Path(folder).iterdir())
    except OSError:  # missing, or not readable: nothing this process could load
        return True


# Files of a model folder or cache :func:`sources_state` looks at, at most (a model is a
# handful; a cache holding many models is not read whole at every sweep).
SOURCE_FILES = 2000


def sources_state(model_path: str | None, cache_dir: Path | None) -> tuple[object, ...]:
    """What the places the model is read from hold now: each file's relative path, size
    and modification time under the model folder (else the model cache). Cheap (no file
    read), so the daemon's sweep can tell a model that appeared since a load failed (a
    folder copied in, a cache filled) from nothing new (:mod:`bot.daemon_vectors`)."""
    root = Path(model_path) if model_path else cache_dir
    if root is None:
        return ()  # fastembed's own default cache: only fastembed knows where it is
    files: list[tuple[str, int, int]] = []
    try:
        for path in itertools.islice(root.rglob("*"), SOURCE_FILES):
            try:
                info = path.stat()
            except OSError:  # a dangling link, a file going away
                files.append((str(path.relative_to(root)), -1, -1))
                continue
            files.append((str(path.relative_to(root)), info.st_size, info.st_mtime_ns))
    except OSError:  # not readable: nothing this process could load either
        pass
    return (root.is_dir(), *sorted(files))


def hub_unreachable() -> str | None:
    """Why fastembed's model hub cannot be reached from here, or None when it answers
    (any HTTP status: only a transport failure means no download can work)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    endpoint = constants.ENDPOINT
    error = "no answer"
    for attempt in range(HUB_PROBE_TRIES):
        if attempt:
            time.sleep(HUB_PROBE_PAUSE)
        try:
            get_session().head(endpoint, timeout=HUB_PROBE_TIMEOUT)
        except Exception as exc:  # httpx or requests, by huggingface_hub's version
            error = f"{type(exc).__name__}: {exc}"
            continue
        return None
    return f"cannot reach the model hub {endpoint} ({error})"
