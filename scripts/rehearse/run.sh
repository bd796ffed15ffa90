#!/usr/bin/env bash
# Rehearse a real prime-rl run on CPU, one command: build (once) a venv from prime-rl's uv.lock, then run every
# plumbing arm with prime-rl's own orchestrator and env servers: the ladder A0-A4 (5 steps, A4 8), swebench-lite on the
# mini SWE-bench, A0 relayed to a separate inference node, and A2/A3/A4 with the live teacher pool and the LLM hint
# writer (docs/running.md, "Rehearse on CPU before you rent GPUs"). Arguments go to rehearse.py (--arms all|ladder|
# live|learn|<arm>..., --steps, --work, --timeout).
#
#   CRF_PRIME_RL_SRC=/path/to/prime-rl CRF_VERIFIERS_SRC=/path/to/prime-rl/deps/verifiers bash scripts/rehearse/run.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${CRF_REHEARSAL_VENV:-$HOME/.cache/crf-prime/rehearsal-venv}"
bash "$HERE/build_venv.sh"
exec "$VENV/bin/python" "$HERE/rehearse.py" "$@"
