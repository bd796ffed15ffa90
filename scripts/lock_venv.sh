#!/usr/bin/env bash
# Install crf-prime into a venv that holds prime-rl's locked versions, prove the install changes none of them, and
# run the environment, harness, hints, teachers and configs suites there (with the swebench parity check on the
# swebench prime-rl locks).
#
#   CRF_PRIME_RL_SRC=/path/to/prime-rl CRF_VERIFIERS_SRC=/path/to/verifiers bash scripts/lock_venv.sh
#
# 1. "prime-rl's side": a fresh Python 3.12 venv with verifiers editable from CRF_VERIFIERS_SRC (reporting the version
#    hatch-vcs gives that commit, e.g. 0.3.1.dev62) and the locked versions of everything our code and its tests
#    touch, and the locked packages our extras name — every pin comes from `uv export` of $CRF_PRIME_RL_SRC/uv.lock,
#    used as constraints, so the resolver can only pick locked versions for locked packages. torch is the lock's
#    version from PyPI (a CUDA build that imports and runs on CPU; the lock's +cu128 wheel lives on a non-PyPI
#    index). `pip freeze` → before.txt.
# 2. The user's step: crf-prime with every extra whose packages prime-rl locks (swebench, relay, hf, report; plus
#    dev, featdel, ray) and the three environments, installed WITH their dependencies under the same constraints
#    (the whole lock: every group and extra of every workspace member), so a package the install adds comes at the
#    lock's version too. `pip freeze` → after.txt.
# 3. Every package of before.txt must be in after.txt at the same version, and every package the install added
#    that the lock pins must be at the lock's version; the script prints the difference and fails otherwise.
#    Added packages the lock does not pin are listed, not errors.
# 4. The suites run in that venv with the repo's tests.
#
# Env: CRF_LOCK_VENV (default ~/.cache/crf-prime/lock-venv, rebuilt every run), CRF_LOCK_PYTHON (a Python 3.12;
#      default: the first working one of python3.12, ~/.pyenv/versions/3.12*, /usr/bin/python3.12, as
#      scripts/rehearse/build_venv.sh finds it),
#      CRF_LOCK_SUITES (pytest paths; default the suites named above), CRF_LOCK_PYTEST_ARGS (extra pytest args).
set -euo pipefail

: "${CRF_PRIME_RL_SRC:?set CRF_PRIME_RL_SRC to a prime-rl source checkout}"
: "${CRF_VERIFIERS_SRC:?set CRF_VERIFIERS_SRC to the verifiers checkout prime-rl pins (deps/verifiers)}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CRF_LOCK_VENV:-$HOME/.cache/crf-prime/lock-venv}"
TOOLS="${VENV}-tools"
PY="${CRF_LOCK_PYTHON:-}"
if [[ -z "$PY" ]]; then  # a pyenv shim may exist without a usable interpreter behind it: try each, as build_venv.sh
  for cand in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do
    if "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then PY="$cand"; break; fi
  done
fi
"${PY:-python3.12}" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null \
  || { echo "no working Python 3.12 (prime-rl requires ~=3.12): set CRF_LOCK_PYTHON; got '${PY:-}'" >&2; exit 2; }
SUITES="${CRF_LOCK_SUITES:-tests/featdel tests/swe tests/traces tests/sandbox tests/hints tests/teachers tests/configs tests/losses}"

step() { printf '\n== %s\n' "$*"; }

step "tools: uv in $TOOLS"
[[ -x "$TOOLS/bin/uv" ]] || { "$PY" -m venv "$TOOLS" && "$TOOLS/bin/python" -m pip install -q uv; }
UV="$TOOLS/bin/uv"

step "fresh venv $VENV ($("$PY" --version))"
rm -rf "$VENV"
"$UV" venv -q --python "$PY" "$VENV"
export VIRTUAL_ENV="$VENV"
PIP=("$UV" pip install -q --python "$VENV/bin/python")

step "constraints from $CRF_PRIME_RL_SRC/uv.lock"
CONSTRAINTS="$VENV/lock-constraints.txt"
# Editable members (verifiers, renderers, prime-pydantic-config, prime-rl itself) have no version pin in the lock;
# torch's +cu128 local tag names a non-PyPI index: pin its public version; its CUDA runtime wheels follow torch.
# --all-packages: the workspace's environments too (`uv sync --all-packages` installs them); their dependencies hold
# packages our extras name (swebench, matplotlib), which prime-rl's root package alone does not pin. The dev group
# too (ruff, pytest, ...): the whole lock, so nothing our dev extra pulls in escapes it.
(cd "$CRF_PRIME_RL_SRC" && "$UV" export --frozen --no-hashes --no-emit-workspace --no-header --all-extras \
  --all-packages) \
  | grep -Ev '^\s*(#|-e |$)' \
  | grep -Ev '^(nvidia-|cuda-|triton==)' \
  | sed -E 's/^(torch==[^+ ;]+)\+[^ ;]*/\1/' \
  > "$CONSTRAINTS"
echo "$(wc -l < "$CONSTRAINTS") locked pins; $(grep -E '^(verifiers|openai|mcp|pydantic|transformers|torch|swebench)==' "$CONSTRAINTS" | cut -d' ' -f1 | tr '\n' ' ')"

step "prime-rl's side: verifiers $CRF_VERIFIERS_SRC editable + the locked packages our code touches"
vf_version="$(git -C "$CRF_VERIFIERS_SRC" describe --tags --long --match 'v*' 2>/dev/null \
  | sed -E 's/^v?([0-9]+)\.([0-9]+)\.([0-9]+)-([0-9]+)-g.*/\1 \2 \3 \4/' \
  | awk '{ if ($4 == 0) print $1"."$2"."$3; else print $1"."$2"."($3+1)".dev"$4 }')"
echo "verifiers version (hatch-vcs, guess-next-dev): ${vf_version:?cannot describe $CRF_VERIFIERS_SRC}"
# The submodules prime-rl installs editable without sources here (deps/pydantic-config, deps/renderers): their PyPI
# releases no newer than the prime-rl commit stand in, as the lock's cooldown would pick them.
commit_day="$(git -C "$CRF_PRIME_RL_SRC" log -1 --format=%cs)"
SETUPTOOLS_SCM_PRETEND_VERSION="$vf_version" "${PIP[@]}" -c "$CONSTRAINTS" \
  --exclude-newer "${commit_day}T23:59:59Z" \
  -e "$CRF_VERIFIERS_SRC" "torch" "transformers" "openai" "pydantic" "numpy" "rich" "tenacity" \
  "datasets" "prime-pydantic-config" "renderers" "pytest" "pytest-asyncio" "swebench" "blake3" "matplotlib"
"$UV" pip freeze --python "$VENV/bin/python" > "$VENV/before.txt"
"$UV" pip list --python "$VENV/bin/python" --format json > "$VENV/before.json"
echo "$(wc -l < "$VENV/before.txt") packages before (pip freeze: $VENV/before.txt)"

step "the user's step: crf-prime (its extras too) + the three environments, with their dependencies, under the lock"
"${PIP[@]}" -c "$CONSTRAINTS" -e "$REPO[dev,featdel,ray,swebench,relay,hf,report]" \
  -e "$REPO/environments/feature_deletion" -e "$REPO/environments/swebench_lite" -e "$REPO/environments/trace_replay"
"$UV" pip freeze --python "$VENV/bin/python" > "$VENV/after.txt"
"$UV" pip list --python "$VENV/bin/python" --format json > "$VENV/after.json"

step "locked packages changed by the install"
"$VENV/bin/python" - "$VENV/before.json" "$VENV/after.json" "$CONSTRAINTS" <<'PY'
import json
import sys

def read(path):
    return {row["name"].lower(): (row["version"], row.get("editable_project_location")) for row in json.load(open(path))}

def show(name, row):
    return "(removed)" if row is None else f"{name}=={row[0]}" + (f" (editable {row[1]})" if row[1] else "")

def norm(name):
    return name.lower().replace("_", "-").replace(".", "-")

before, after = read(sys.argv[1]), read(sys.argv[2])
pins = dict(line.split(" ")[0].split("==", 1) for line in open(sys.argv[3]) if "==" in line.split(" ")[0])
pins = {norm(name): version for name, version in pins.items()}
changed = sorted(name for name in before if after.get(name) != before[name])
for name in changed:
    print(f"CHANGED {show(name, before[name])}  ->  {show(name, after.get(name))}")
print(f"changed: {len(changed)} of {len(before)} locked packages")
added = sorted(set(after) - set(before))
locked_added = [name for name in added if norm(name) in pins]
off_lock = [name for name in locked_added if after[name][0] != pins[norm(name)]]
for name in off_lock:
    print(f"OFF-LOCK {show(name, after[name])}  (the lock pins {pins[norm(name)]})")
print(f"added (absent before): {', '.join(added)}")
print(f"added and locked: {len(locked_added)}, off the lock's version: {len(off_lock)}")
sys.exit(1 if changed or off_lock else 0)
PY
"$VENV/bin/python" -c 'import importlib.metadata as m; print("verifiers", m.version("verifiers"), "| openai", m.version("openai"), "| mcp", m.version("mcp"), "| torch", m.version("torch"))'

step "suites: $SUITES"
cd "$REPO"
# Without the source paths: the opt-in prime-rl tests need prime-rl's own stack (and this job is one of them).
# CRF_TEST_SWEBENCH: tests/swe/test_swe_parity.py checks our grading against the swebench version prime-rl locks.
# shellcheck disable=SC2086
env -u CRF_PRIME_RL_SRC -u CRF_VERIFIERS_SRC CRF_TEST_SWEBENCH=1 \
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider $SUITES ${CRF_LOCK_PYTEST_ARGS:-}
