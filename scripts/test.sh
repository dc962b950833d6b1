#!/usr/bin/env bash
# Install everything the tests need (Debian's Chromium and systemd, the Python packages
# in .venv), then run lint, types and the whole test suite. Used by CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need_apt[@]}"
  else
    sudo apt-get update -q
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need_apt[@]}"
  fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e ".[test]"

# The offline embedding model shipped beside the project (see ../shared/TESTING.md).
if [ -z "${MY_AGENT_EMBEDDING_MODEL_PATH:-}" ] && [ -d ../shared/models/all-MiniLM-L6-v2-onnx ]; then
  MY_AGENT_EMBEDDING_MODEL_PATH="$(cd ../shared/models/all-MiniLM-L6-v2-onnx && pwd)"
  export MY_AGENT_EMBEDDING_MODEL_PATH
fi
export HF_HUB_OFFLINE=1

.venv/bin/ruff check bot channels tests
.venv/bin/ruff format --check bot channels tests
.venv/bin/mypy bot channels
# Two workers (pytest-xdist), one test file per worker at a time: the module-scoped
# servers and browsers start once per file, and most of the slow tests wait on child
# daemons and servers more than they compute. MY_AGENT_TEST_WORKERS=0 runs in one
# process. The slowest tests are listed at the end, so a CI log shows where the
# minutes go.
workers=${MY_AGENT_TEST_WORKERS:-2}
.venv/bin/pytest -q -p no:cacheprovider -n "$workers" --dist loadfile --durations=30 "$@"
