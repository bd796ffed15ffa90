#!/usr/bin/env bash
# Type-checks crf_prime, loss_fns and the environments with mypy (config: [tool.mypy] in pyproject.toml).
# .ci/run runs it before pytest; rerun it after a merge and fix what it reports. Extra args go to mypy.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m mypy "$@"
