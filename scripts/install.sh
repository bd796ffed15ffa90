#!/usr/bin/env bash
# Installs crf-prime, its environments and the test tools into ./.venv on a fresh Linux machine.
# CPU torch first: a bare `torch` requirement can pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) >/dev/null
  else
    echo "note: bubblewrap is missing; install it (apt-get install bubblewrap) for the sandbox" >&2
  fi
fi
# shardcast (the relay's transport) fetches shards with wget and would apt-install it itself if missing
if ! command -v wget >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wget) >/dev/null
  else
    echo "note: wget is missing; install it (apt-get install wget) for crf-prime relay" >&2
  fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)
.venv/bin/python -c 'import torch' 2>/dev/null || "${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" -e ".[all]"
for env in environments/*/; do
  [ -f "$env/pyproject.toml" ] && "${PIP[@]}" -e "$env"
done
echo "crf-prime installed in .venv"
