#!/usr/bin/env bash
# Build the CPU rehearsal venv: Python 3.12 holding prime-rl's locked versions (its uv.lock), minus what needs a GPU
# or a non-PyPI URL, plus prime-rl and verifiers editable from their source checkouts and crf-prime + our three
# environments with --no-deps (so no locked package is replaced). Idempotent: a finished venv is reused.
#
#   CRF_PRIME_RL_SRC=/path/to/prime-rl CRF_VERIFIERS_SRC=/path/to/verifiers bash scripts/rehearse/build_venv.sh
#
# Env: CRF_REHEARSAL_VENV (default ~/.cache/crf-prime/rehearsal-venv), CRF_REHEARSAL_PYTHON (a python3.12),
#      CRF_REHEARSAL_TORCH_WHEEL (a local torch wheel file matching the lock's torch version, optional).
set -euo pipefail

: "${CRF_PRIME_RL_SRC:?set CRF_PRIME_RL_SRC to a prime-rl source checkout}"
: "${CRF_VERIFIERS_SRC:?set CRF_VERIFIERS_SRC to the verifiers checkout prime-rl pins (deps/verifiers)}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${CRF_REHEARSAL_VENV:-$HOME/.cache/crf-prime/rehearsal-venv}"
PY="${CRF_REHEARSAL_PYTHON:-}"
if [[ -z "$PY" ]]; then  # prime-rl requires ~=3.12; a pyenv shim may exist without a usable interpreter behind it
  for cand in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do
    if "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then PY="$cand"; break; fi
  done
fi
[[ -n "$PY" ]] || { echo "no Python 3.12 found: set CRF_REHEARSAL_PYTHON" >&2; exit 1; }
# The stamp names the prime-rl commit and this script's recipe revision (bump it when the recipe adds a package).
STAMP="$VENV/.crf-rehearsal-$(git -C "$CRF_PRIME_RL_SRC" rev-parse --short HEAD)-r3"

# The dev group is kept: Feature Deletion task generation needs pytest (prime-rl locks it there).
# Dropped from the lock: CUDA-only builds and packages served from a non-PyPI URL (git/GitHub releases). None of
# them is imported by the orchestrator, the env server or prime_rl.trainer.rl.loss on the filesystem weight path.
DROP='^(vllm|flash-linear-attention|dion|torchtitan|torchao|nixl|nixl-cu12|mooncake-transfer-engine|flashinfer-python|tilelang|tokenspeed-mla|tokenspeed-triton|quack-kernels|humming-kernels|pynvvideocodec|cuda-tile|nvidia-cutlass-dsl|nvidia-cutlass-dsl-libs-base|flash-attn.*|deep-ep|deep-gemm|torch|torchvision|torchaudio|torchcodec)$'
# Imported on the orchestrator's path although CUDA-oriented: the lock's version from PyPI instead of its URL build
# (vllm: only the pydantic protocol of /inference/v1/generate is used; torchao: the lock's git build of 0.17.0).
PYPI_INSTEAD='vllm==0.26.0 torchao==0.17.0'
# Git-pinned sources the orchestrator imports: installed from the pinned commit (a local mirror under
# CRF_REHEARSAL_MIRRORS/<owner>+<name>/repo when given, else GitHub).
GIT_PINS='https://github.com/pytorch/torchtitan@23e4dfca5ca52587dbaf18f67bee8d73e875df5b
https://github.com/fla-org/flash-linear-attention@a95475391465272cd3dc11e47d4a7772522dc9b7'
# flash-attn: the lock's GitHub-release wheel; where it cannot be fetched, scripts/rehearse/shims stands in at import.
FLASH_ATTN_URL='https://github.com/mjun0812/flash-attention-prebuild-wheels/releases/download/v0.9.4/flash_attn-2.8.3+cu128torch2.11-cp312-cp312-linux_x86_64.whl'

if [[ -f "$STAMP" ]]; then
  echo "rehearsal venv ready: $VENV"
  exit 0
fi

[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q uv
UV="$VENV/bin/uv"
REQ="$VENV/lock-requirements.txt"
(cd "$CRF_PRIME_RL_SRC" && "$UV" export --frozen --no-hashes --no-emit-workspace --no-header) \
  | grep -Ev '^\s*(#|-e |$)' \
  | sed -E 's/ ;.*$//' \
  | awk -v drop="$DROP" '{ split($1, a, /[=@ ]/); name = a[1]; if (name !~ drop) print $1 }' \
  > "$REQ"
torch_pin="$(cd "$CRF_PRIME_RL_SRC" && "$UV" export --frozen --no-hashes --no-dev --no-header | grep -E '^torch==' | sed -E 's/ ;.*$//; s/\+.*$//')"
echo "lock: $(wc -l < "$REQ") packages kept; torch pin ${torch_pin}"

export VIRTUAL_ENV="$VENV"
# torch: the lock's version from PyPI (CUDA build; it imports and runs on CPU), or a local wheel of that version.
"$UV" pip install --python "$VENV/bin/python" "${CRF_REHEARSAL_TORCH_WHEEL:-$torch_pin}"
"$UV" pip install --python "$VENV/bin/python" --no-deps -r "$REQ"
# shellcheck disable=SC2086
"$UV" pip install --python "$VENV/bin/python" --no-deps $PYPI_INSTEAD
while read -r pin; do
  url="${pin%@*}"; rev="${pin##*@}"; slug="${url#https://github.com/}"; mirror="${CRF_REHEARSAL_MIRRORS:-}/${slug/\//+}/repo"
  if [[ -n "${CRF_REHEARSAL_MIRRORS:-}" && -d "$mirror" ]]; then
    dest="$VENV/src/${slug##*/}-$rev"
    rm -rf "$dest" && mkdir -p "$dest"
    # the package tree only: a mirror may lack large test assets
    paths="$(git -C "$mirror" ls-tree --name-only "$rev" | grep -vE '^(tests|benchmarks|docs|examples|images|evals|legacy|scripts|utils|\..*)$')"
    # shellcheck disable=SC2086
    GIT_INDEX_FILE="$dest.idx" git -C "$mirror" --work-tree="$dest" checkout "$rev" -- $paths && rm -f "$dest.idx"
    "$UV" pip install --python "$VENV/bin/python" --no-deps "$dest"
  else
    "$UV" pip install --python "$VENV/bin/python" --no-deps "git+$url@$rev"
  fi
done <<< "$GIT_PINS"
"$UV" pip install --python "$VENV/bin/python" --no-deps "$FLASH_ATTN_URL" \
  || echo "flash-attn wheel unreachable: the rehearsal puts scripts/rehearse/shims on PYTHONPATH (import stand-in)"
# The submodules prime-rl installs editable. verifiers: the pinned checkout, reporting the version hatch-vcs gives it.
vf_version="$(git -C "$CRF_VERIFIERS_SRC" describe --tags --long 2>/dev/null | sed -E 's/^v?([0-9]+)\.([0-9]+)\.([0-9]+)-([0-9]+)-.*/\1.\2.$((\3+1)).dev\4/')"
vf_version="$(eval echo "$vf_version")"
SETUPTOOLS_SCM_PRETEND_VERSION="${vf_version:-0.3.1.dev62}" \
  "$UV" pip install --python "$VENV/bin/python" --no-deps -e "$CRF_VERIFIERS_SRC"
# deps/pydantic-config and deps/renderers are submodules without sources here: their PyPI releases stand in.
# Releases no newer than the prime-rl commit, like its lock's cooldown.
commit_day="$(git -C "$CRF_PRIME_RL_SRC" log -1 --format=%cs)"
"$UV" pip install --python "$VENV/bin/python" --no-deps --exclude-newer "${commit_day}T23:59:59Z" \
  "prime-pydantic-config>=0.4.3" "renderers>=0.1.9"
"$UV" pip install --python "$VENV/bin/python" --no-deps -e "$CRF_PRIME_RL_SRC/packages/prime-rl-configs" -e "$CRF_PRIME_RL_SRC"
# Ours, without touching a locked package.
"$UV" pip install --python "$VENV/bin/python" --no-deps -e "$REPO" \
  -e "$REPO/environments/feature_deletion" -e "$REPO/environments/swebench_lite" -e "$REPO/environments/trace_replay"
# crf-prime[featdel] (task generation) needs coverage, which prime-rl does not lock: added, nothing replaced.
"$UV" pip install --python "$VENV/bin/python" "coverage>=7.6"
# crf-prime[report] (the learning table's PNG and `crf-prime report`) needs matplotlib: the version prime-rl's
# workspace locks, its dependencies under the whole lock as constraints (nothing locked is replaced).
LOCK_ALL="$VENV/lock-all-packages.txt"
(cd "$CRF_PRIME_RL_SRC" && "$UV" export --frozen --no-hashes --no-emit-workspace --no-header --all-extras --all-packages) \
  | grep -Ev '^\s*(#|-e |$)' | sed -E 's/ ;.*$//' | grep -Ev '^(nvidia-|cuda-|triton==|torch==)' > "$LOCK_ALL"
"$UV" pip install --python "$VENV/bin/python" -c "$LOCK_ALL" "$(grep -E '^matplotlib==' "$LOCK_ALL")"
# crf-prime[ray] (the live teacher pool the A3/A4 live arms and the A2 hint writer share across env-server processes):
# prime-rl does not lock ray; it is added with its dependencies under the whole lock (nothing locked is replaced).
"$UV" pip install --python "$VENV/bin/python" -c "$LOCK_ALL" "ray>=2.50"
touch "$STAMP"
echo "rehearsal venv ready: $VENV"
