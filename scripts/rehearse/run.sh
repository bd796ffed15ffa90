#!/usr/bin/env bash
# Rehearse a real prime-rl run on CPU, one command: build (once) a venv from prime-rl's uv.lock, then run ladder arms
# A0, A2 and A3 for 3 steps each with prime-rl's own orchestrator and env servers (docs/running.md, "Rehearse on CPU
# before you rent GPUs"). Arguments go to rehearse.py (--arms, --steps, --work, --timeout).
#
#   CRF_PRIME_RL_SRC=/path/to/prime-rl CRF_VERIFIERS_SRC=/path/to/prime-rl/deps/verifiers bash scripts/rehearse/run.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${CRF_REHEARSAL_VENV:-$HOME/.cache/crf-prime/rehearsal-venv}"
bash "$HERE/build_venv.sh"
exec "$VENV/bin/python" "$HERE/rehearse.py" "$@"
