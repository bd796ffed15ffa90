#!/usr/bin/env bash
# Installs crf-prime, its environments and the test tools into ./.venv on a fresh Linux machine.
# CPU torch first: a bare `torch` requirement can pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."

# bubblewrap: the sandbox; git and patch: SWE-bench grading and the Feature Deletion gold patches
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v git >/dev/null 2>&1 || missing+=(git)
command -v patch >/dev/null 2>&1 || missing+=(patch)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null
  else
    echo "note: please install ${missing[*]} (apt-get install ${missing[*]})" >&2
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
