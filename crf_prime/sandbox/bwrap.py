"""The bubblewrap command line of one box.

Isolation (see docs/sandbox.md): every namespace unshared (no network but a private ``lo``), all capabilities
dropped (as root, a box that keeps them can remount a read-only bind read-write and write the host), a new
session, death with the parent, an empty environment plus an explicit one, the root filesystem read-only. Visible:
system dirs read-only (/usr and the /bin, /lib* links, /etc minus secrets), the base Python prefix read-only with
every directory of installed distributions in it and under /usr hidden (an empty read-only tmpfs over each
site-packages / dist-packages, so a package installed on the host is neither importable nor readable), a
size-limited private /tmp, the task directory writable at its own path, caller-listed read-only binds, and read-only
binds over protected paths inside the task directory. Nothing else of the host (no /root, /home, /opt, /var, /srv,
other tasks' directories).
"""

from __future__ import annotations

import functools
import glob
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

# /etc entries covered inside the box by an unreadable empty file or directory (reading them fails with EACCES):
# password hashes, sudo rules, ssh host keys, TLS private keys, and package-manager configuration that may point at
# local indexes or carry credentials. Binding /etc whole and covering these is ~20x cheaper than binding each entry.
ETC_HIDDEN = (
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "ssh",
    "ssl/private",
    "security/opasswd",
    "pip.conf",
    "npmrc",
    "netrc",
    "subuid",
    "subuid-",
    "subgid",
    "subgid-",
    "docker",
    "containerd",
    "uv",
    "machine-id",
)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _resolved(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(path))


@functools.lru_cache(maxsize=1)
def python_prefixes() -> tuple[Path, ...]:
    """Base interpreter prefix(es) to bind read-only (skipping those already visible under /usr)."""
    prefixes = {_resolved(sys.base_prefix), _resolved(sys.base_exec_prefix), _resolved(sys.executable).parent.parent}
    return tuple(sorted(p for p in prefixes if p != Path("/") and not _under(p, Path("/usr")) and p.exists()))


_DISTRIBUTION_DIRS = ("lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages")


@functools.lru_cache(maxsize=1)
def distribution_dirs() -> tuple[Path, ...]:
    """Host directories of installed distributions that the box would otherwise show (and so hides).

    The site-packages / dist-packages of /usr, /usr/local and the base interpreter prefix(es): everything a box
    can see that ``pip install`` writes to. A box sees the standard library, never a host-installed package."""

    prefixes = (Path("/usr"), Path("/usr/local"), *python_prefixes())
    found = {_resolved(d) for prefix in prefixes for pat in _DISTRIBUTION_DIRS for d in glob.glob(f"{prefix}/{pat}")}
    return tuple(sorted(d for d in found if d.is_dir()))


def _under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def _unreadable_file() -> Path:
    """An empty host file with mode 0000, bound over secret files (the box's root has no CAP_DAC_OVERRIDE)."""
    path = Path(tempfile.gettempdir()) / f"crf-sandbox-hidden-{os.getuid()}"
    if not path.is_file() or path.stat().st_mode & 0o777:
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        tmp.write_bytes(b"")
        tmp.chmod(0)
        os.replace(tmp, path)
    return path


@functools.lru_cache(maxsize=1)
def system_args(hidden: Path) -> tuple[str, ...]:
    """The host-independent part of the command: namespaces, system dirs, /etc minus secrets, /proc, /dev.

    ``hidden`` is :func:`_unreadable_file`'s path, bound over the secrets: a parameter, so that the cached command
    follows it when the temporary directory changes (the file under the old one may be gone with its directory)."""
    args = [
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    args += ["--ro-bind", "/etc", "/etc"]
    for rel in ETC_HIDDEN:
        host = Path("/etc") / rel
        if host.is_symlink() or not host.exists():
            continue
        if host.is_dir():
            # an empty tmpfs owned by root with mode 0000: uid 0 without CAP_DAC_OVERRIDE cannot list it
            args += ["--perms", "0000", "--tmpfs", str(host), "--remount-ro", str(host)]
        else:
            args += ["--ro-bind", str(hidden), str(host)]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for prefix in python_prefixes():
        args += ["--ro-bind", str(prefix), str(prefix)]
    for hidden in distribution_dirs():
        args += ["--tmpfs", str(hidden), "--remount-ro", str(hidden)]
    return tuple(args)


def bound_protected(protected: Sequence[Path], writable: Sequence[Path] | None) -> list[Path]:
    """The protected paths that need a read-only bind: with ``writable`` the task dir is read-only already, so only
    those inside a writable path (a grading run protects every test file: a thousand binds cost bubblewrap seconds)."""
    if writable is None:
        return list(protected)
    return [p for p in protected if any(_under(p, w) for w in writable)]


def build_argv(
    bwrap: str,
    argv: Sequence[str],
    *,
    workdir: Path,
    ro_binds: Sequence[Path],
    protected: Sequence[Path],
    env: Mapping[str, str],
    cwd: Path,
    tmp_size_mb: int,
    writable: Sequence[Path] | None = None,
) -> list[str]:
    """Full ``bwrap ... -- argv`` command line (paths must be absolute).

    ``writable``: when given, the task directory is bound read-only and only these paths inside it are writable."""
    hidden = _unreadable_file()  # (re)created if a tmp cleaner removed it
    args = [bwrap, *system_args(hidden), "--size", str(tmp_size_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    args += ["--dir", "/var", "--symlink", "../tmp", "/var/tmp"]
    outer = [p for p in ro_binds if not _under(p, workdir)]
    inner = [p for p in ro_binds if _under(p, workdir)]
    # parents before children, so a deeper bind lands on top of a shallower one; all before the task dir's
    # writable bind (an ro bind may contain the task dir), and binds inside the task dir after it
    for p in sorted(outer, key=lambda p: len(p.parts)):
        args += ["--ro-bind", str(p), str(p)]
    args += ["--bind" if writable is None else "--ro-bind", str(workdir), str(workdir)]
    protected = bound_protected(protected, writable)
    inner_binds = [(p, "--ro-bind") for p in [*inner, *protected]] + [(p, "--bind") for p in writable or ()]
    for p, how in sorted(inner_binds, key=lambda b: (len(b[0].parts), b[1] == "--ro-bind")):
        if p.exists():
            args += [how, str(p), str(p)]
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += ["--remount-ro", "/", "--chdir", str(cwd), "--", *argv]
    return args
