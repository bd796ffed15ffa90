#!/usr/bin/env bash
# Installs crf-prime, its environments and the test tools into ./.venv on a fresh Linux machine.
#
# torch first, picked for the machine: a torch already in .venv is kept; with a working CUDA GPU (`nvidia-smi -L`)
# PyPI's CUDA build; without one the CPU wheel from download.pytorch.org (a bare `torch` requirement would pull the
# multi-GB CUDA build plus ~19 nvidia packages for a job that runs on CPU). CRF_TORCH=cpu|cuda overrides the probe.
# A second run with unchanged inputs (the pyproject.toml files, this script, the interpreter) does nothing: a stamp
# of their hashes sits in .venv. pip's own progress is shown (no -q): the first install takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION=2.13.0
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
STAMP=.venv/.crf-prime-install
START=$SECONDS

step() { printf '[install %3ds] %s\n' "$((SECONDS - START))" "$*"; }

# bubblewrap: the sandbox; git and patch: SWE-bench grading and the Feature Deletion gold patches
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v git >/dev/null 2>&1 || missing+=(git)
command -v patch >/dev/null 2>&1 || missing+=(patch)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "apt-get install ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  else
    echo "note: please install ${missing[*]} (apt-get install ${missing[*]})" >&2
  fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || { step "creating .venv with $("$PY" --version)"; "$PY" -m venv .venv; }

# The inputs of this install: when their hashes match the stamp, .venv is already what this script would make
# (the packages are editable installs, so source edits need no reinstall).
inputs_hash() {
  { .venv/bin/python --version; cat scripts/install.sh pyproject.toml environments/*/pyproject.toml; } 2>&1 |
    sha256sum | cut -d' ' -f1
}
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(inputs_hash)" ] && [ -z "${CRF_REINSTALL:-}" ]; then
  step "up to date (inputs unchanged since the last install; CRF_REINSTALL=1 forces one)"
  exit 0
fi
rm -f "$STAMP"

PIP=(.venv/bin/python -m pip install --disable-pip-version-check --progress-bar on)

# Which torch: the CUDA build only where a CUDA GPU answers.
torch_kind() {
  if [ -n "${CRF_TORCH:-}" ]; then echo "$CRF_TORCH"
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then echo cuda
  else echo cpu
  fi
}
# The CPU index is asked only when it answers within 10 s: a host that reaches PyPI alone (a mirror, a proxy) takes
# torch from its own index instead of waiting out pip's retries.
reachable() { .venv/bin/python - "$1" <<'EOF'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=10).close()
except Exception:
    sys.exit(1)
EOF
}

if have=$(.venv/bin/python -c 'import torch; print(torch.__version__)' 2>/dev/null); then
  step "torch $have already installed: kept"
else
  case "$(torch_kind)" in
    cuda)
      step "torch $TORCH_VERSION, CUDA build from PyPI (nvidia-smi sees a GPU): several GB, a few minutes"
      "${PIP[@]}" "torch==$TORCH_VERSION" ;;
    cpu)
      if reachable "$TORCH_CPU_INDEX"; then
        step "torch $TORCH_VERSION, CPU wheel from $TORCH_CPU_INDEX (no CUDA GPU): ~200 MB"
        "${PIP[@]}" "torch==$TORCH_VERSION" --index-url "$TORCH_CPU_INDEX" --extra-index-url https://pypi.org/simple
      else
        step "torch $TORCH_VERSION from the configured index ($TORCH_CPU_INDEX does not answer)"
        "${PIP[@]}" "torch==$TORCH_VERSION"
        if .venv/bin/python -c 'import sys, torch; sys.exit(torch.version.cuda is None)' 2>/dev/null; then
          echo "note: that index served a CUDA build of torch; a CPU-only machine needs only $TORCH_CPU_INDEX" >&2
        fi
      fi ;;
    *) echo "error: CRF_TORCH must be cpu or cuda, not '$CRF_TORCH'" >&2; exit 2 ;;
  esac
fi

# One pip call: one resolution for the package and its environments (each separate call resolves everything again)
editables=(-e ".[all]")
for env in environments/*/; do
  [ -f "$env/pyproject.toml" ] && editables+=(-e "${env%/}")
done
step "crf-prime[all] and $((${#editables[@]} / 2 - 1)) environments (editable): verifiers, ray, matplotlib, datasets, test tools"
"${PIP[@]}" "${editables[@]}"
inputs_hash >"$STAMP"
step "crf-prime installed in .venv: next, .venv/bin/crf-prime featdel generate --out out/featdel"
