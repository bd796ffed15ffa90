"""Probe once whether bubblewrap isolates on this host, and which limits can be enforced.

The probe runs a tiny Python program in a real box and checks, without sending traffic anywhere off the machine:
the box sees only the ``lo`` interface and no default route, a listener the probe opens on the host's 127.0.0.1 is
unreachable from it, it holds no capabilities, and /usr is read-only. Design from
/work/shared/hosts/sandbox-and-swebench.md §1.7.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from crf_prime.sandbox.bwrap import build_argv
from crf_prime.sandbox.cgroups import detect_layout
from crf_prime.sandbox.models import SandboxStatus, SandboxUnavailable

BWRAP_ENV = "CRF_SANDBOX_BWRAP"
"""Environment variable naming the bubblewrap binary (default: ``bwrap`` on PATH)."""

OPT_OUT_HINT = (
    "To run commands WITHOUT isolation instead (only on a throwaway machine), opt in explicitly: "
    "Sandbox(unsandboxed=True), or `unsandboxed = true` in the harness config."
)

_PROBE_SCRIPT = r"""
import json, os, socket, sys
out = {"ifaces": [n for _, n in socket.if_nameindex()]}
with open("/proc/net/route") as f:
    out["default_route"] = any(line.split()[1] == "00000000" for line in f.read().splitlines()[1:] if line.split())
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(2)
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
    out["host_loopback"] = "connected"
except OSError as e:
    out["host_loopback"] = type(e).__name__
with open("/proc/self/status") as f:
    out["cap_eff"] = [l.split()[1] for l in f if l.startswith("CapEff")][0]
try:
    open("/usr/.crf-probe", "w")
    out["usr_writable"] = True
except OSError:
    out["usr_writable"] = False
print(json.dumps(out))
"""


def bwrap_path(explicit: str | None = None) -> str | None:
    """The bubblewrap binary: ``explicit``, else $CRF_SANDBOX_BWRAP, else ``bwrap`` on PATH."""
    name = explicit or os.environ.get(BWRAP_ENV) or "bwrap"
    return shutil.which(name)


def _namespace_hints() -> str:
    hints = []
    try:
        if Path("/proc/sys/user/max_user_namespaces").read_text().strip() == "0":
            hints.append("user namespaces are disabled: sysctl -w user.max_user_namespaces=15000")
    except OSError:
        pass
    try:
        if Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").read_text().strip() == "1":
            hints.append(
                "AppArmor restricts unprivileged user namespaces (Ubuntu >= 23.10): "
                "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or run as root"
            )
    except OSError:
        pass
    if Path("/.dockerenv").exists() or Path("/run/.containerenv").exists():
        hints.append(
            "this looks like a container: namespaces need CAP_SYS_ADMIN or a seccomp profile that allows "
            "unshare/clone (e.g. docker run --security-opt seccomp=unconfined --security-opt apparmor=unconfined)"
        )
    try:
        current = Path("/proc/sys/user/max_user_namespaces").read_text().strip()
    except OSError:
        current = "unknown"
    hints.append(f"check that namespaces are enabled: sysctl user.max_user_namespaces (must be > 0; now {current})")
    return "; ".join(hints)


def _limits_summary(bwrap: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    layout = detect_layout()
    enforced = ["isolation:bwrap"] if bwrap else []
    enforced += ["wall:timeout+kill-tree", "cpu:rlimit", "file_size:rlimit", "output:capture-cap"]
    if bwrap:
        enforced.append("tmp_size:tmpfs")
    not_enforced = [] if bwrap else ["isolation: bubblewrap unavailable"]
    if "memory" in layout.parents:
        enforced.append(f"memory:cgroup-{layout.version}")
    else:
        enforced.append("memory:rlimit-as")
    if "pids" in layout.parents:
        enforced.append(f"pids:cgroup-{layout.version}")
    else:
        # RLIMIT_NPROC is no substitute: ignored for uid 0, and for other users it counts all their processes
        not_enforced.append(f"pids: {layout.why_not or 'no writable pids cgroup'} (RLIMIT_NPROC is no substitute)")
    return tuple(enforced), tuple(not_enforced)


@functools.lru_cache(maxsize=8)
def _probe(bwrap: str | None, requested: str) -> SandboxStatus:
    start = time.monotonic()
    layout = detect_layout()
    controllers = tuple(sorted(layout.parents))
    if bwrap is None:
        enforced, not_enforced = _limits_summary(bwrap=False)
        return SandboxStatus(
            available=False,
            reason=(
                f"bubblewrap not found (looked for {requested!r}; set ${BWRAP_ENV} to its path if it is installed "
                "elsewhere). Install it: apt-get install bubblewrap (Debian/Ubuntu), dnf install bubblewrap "
                f"(Fedora/RHEL), apk add bubblewrap (Alpine). {OPT_OUT_HINT}"
            ),
            cgroup=layout.version,
            cgroup_controllers=controllers,
            enforced=enforced,
            not_enforced=not_enforced,
            probe_s=time.monotonic() - start,
        )
    try:
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        version = f"unknown ({e})"
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    python = os.path.realpath(sys.executable)
    failure = ""
    try:
        with tempfile.TemporaryDirectory(prefix="crf-probe-") as tmp:
            workdir = Path(tmp)
            argv = build_argv(
                bwrap,
                [python, "-I", "-c", _PROBE_SCRIPT, str(listener.getsockname()[1])],
                workdir=workdir,
                ro_binds=(),
                protected=(),
                env={"PATH": "/usr/bin:/bin"},
                cwd=workdir,
                tmp_size_mb=16,
            )
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        try:
            accepted = listener.accept()[0]
            accepted.close()
            failure = "a connection from inside the box reached a listener on the host's 127.0.0.1"
        except BlockingIOError:
            pass
        if not failure and proc.returncode != 0:
            failure = f"bwrap failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}. {_namespace_hints()}"
        elif not failure:
            facts = json.loads(proc.stdout.strip().splitlines()[-1])
            if facts["ifaces"] != ["lo"] or facts["default_route"]:
                failure = f"the box has network interfaces {facts['ifaces']} / a default route"
            elif facts["host_loopback"] == "connected":
                failure = "the box reached a listener on the host's 127.0.0.1"
            elif int(facts["cap_eff"], 16) != 0:
                failure = f"the box kept capabilities (CapEff={facts['cap_eff']}); bwrap must support --cap-drop"
            elif facts["usr_writable"]:
                failure = "the box could write /usr"
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError) as e:
        failure = f"probing bubblewrap failed: {type(e).__name__}: {e}. {_namespace_hints()}"
    finally:
        listener.close()
    enforced, not_enforced = _limits_summary(bwrap=not failure)
    if failure:
        reason = f"{failure} {OPT_OUT_HINT}"
    else:
        reason = f"{version}: no network (lo only, host loopback unreachable), no capabilities, read-only system"
    return SandboxStatus(
        available=not failure,
        reason=reason,
        cgroup=layout.version,
        bwrap=bwrap,
        bwrap_version=version,
        cgroup_controllers=controllers,
        enforced=enforced,
        not_enforced=not_enforced,
        probe_s=time.monotonic() - start,
    )


def probe(bwrap: str | None = None) -> SandboxStatus:
    """Probe (once per binary, cached) whether the sandbox works here; never raises."""
    requested = bwrap or os.environ.get(BWRAP_ENV) or "bwrap"
    return _probe(bwrap_path(bwrap), requested)


def require(bwrap: str | None = None) -> SandboxStatus:
    """Like :func:`probe`, but raise :class:`SandboxUnavailable` (with how to fix it) when it does not work."""
    status = probe(bwrap)
    if not status.available:
        raise SandboxUnavailable(status.reason)
    return status
