"""Read an agent-controlled directory tree and write a grader-owned one without ever following a symlink.

The grader runs on the host in the local placement, so every path it touches in the agent's directory could be a
symlink to a host file. Reading walks the tree from directory file descriptors opened with ``O_NOFOLLOW`` and
records symlinks and special files as what they are (never their targets); writing creates each path component
relative to its parent's descriptor, again with ``O_NOFOLLOW``. No git runs on the agent's tree: its ``.git``
(config, hooks, fsmonitor, replace refs, ``core.worktree``, exclude files) is skipped unread.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from crf_prime.errors import InputError

MAX_FILE_BYTES = 8 << 20
"""Files larger than this are recorded as ``large`` without their content (a source fix is never that big)."""
MAX_ENTRIES = 200_000
"""A tree with more entries than this is refused (:class:`TreeTooLarge`), so a flood of files cannot stall grading."""
MAX_DEPTH = 64
"""Directories nested deeper than this are refused (:class:`TreeTooLarge`): no source tree needs more."""
MAX_TOTAL_BYTES = 1 << 30
"""A tree whose readable files hold more than this is refused (:class:`TreeTooLarge`): bounded grader memory."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

Kind = Literal["file", "link", "large", "other"]


class TreeTooLarge(InputError):
    """The tree holds more than :data:`MAX_ENTRIES` entries or :data:`MAX_TOTAL_BYTES` bytes, or is deeper than
    :data:`MAX_DEPTH`."""


@dataclass(frozen=True)
class Entry:
    """One non-directory entry of a tree."""

    kind: Kind
    """``file`` (regular, content read), ``link`` (a symlink, never followed), ``large`` (regular, too big to read),
    ``other`` (fifo, socket, device)."""
    data: bytes = b""
    """Content of a ``file``; the link text of a ``link``."""
    executable: bool = False


def _read_file(dir_fd: int, name: str) -> Entry:
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:  # a symlink (ELOOP) or vanished entry: record it as not a regular file
        return Entry("other")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return Entry("other")
        executable = bool(st.st_mode & 0o111)
        if st.st_size > MAX_FILE_BYTES:
            return Entry("large", executable=executable)
        chunks = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_FILE_BYTES:
                return Entry("large", executable=executable)
        return Entry("file", b"".join(chunks), executable)
    finally:
        os.close(fd)


def _visit(
    dir_fd: int, prefix: str, out: dict[str, Entry], total: list[int], skip_dir: Callable[[str], bool]
) -> list[str]:
    """Record the non-directory entries of one directory; return the names of its subdirectories to enter."""
    with os.scandir(dir_fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    subdirs = []
    for entry in entries:
        if entry.name == ".git":
            continue  # git metadata (a dir, or a gitfile pointing elsewhere): never read, never graded
        if skip_dir(entry.name) and entry.is_dir(follow_symlinks=False):
            continue
        rel = f"{prefix}{entry.name}"
        if len(out) >= MAX_ENTRIES:
            raise TreeTooLarge(f"more than {MAX_ENTRIES} files")
        if entry.is_symlink():
            out[rel] = Entry("link", os.readlink(entry.name, dir_fd=dir_fd).encode(errors="surrogateescape"))
        elif entry.is_dir(follow_symlinks=False):
            subdirs.append(entry.name)
        elif entry.is_file(follow_symlinks=False):
            out[rel] = _read_file(dir_fd, entry.name)
            total[0] += len(out[rel].data)
            if total[0] > MAX_TOTAL_BYTES:
                raise TreeTooLarge(f"more than {MAX_TOTAL_BYTES} bytes in files")
        else:
            out[rel] = Entry("other")
    return subdirs


def read_tree(root: Path, skip_dir: Callable[[str], bool] = lambda name: False) -> dict[str, Entry]:
    """Every non-directory entry under ``root`` (posix relative path -> :class:`Entry`); ``.git`` and directories
    whose name ``skip_dir`` accepts are not entered. Iterative (no recursion, at most :data:`MAX_DEPTH` open
    descriptors); a tree deeper than :data:`MAX_DEPTH`, or over the entry or byte cap, raises :class:`TreeTooLarge`."""
    out: dict[str, Entry] = {}
    total = [0]
    # a stack of (open directory, its prefix, its subdirectories not yet entered)
    stack: list[tuple[int, str, list[str]]] = []
    fd = os.open(root, _DIR_FLAGS)
    try:
        stack.append((fd, "", list(reversed(_visit(fd, "", out, total, skip_dir)))))
        while stack:
            dir_fd, prefix, todo = stack[-1]
            if not todo:
                os.close(stack.pop()[0])
                continue
            name = todo.pop()
            rel = f"{prefix}{name}"
            if len(stack) >= MAX_DEPTH:
                raise TreeTooLarge(f"directories nested deeper than {MAX_DEPTH} levels (at {escaped(rel)!r})")
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:  # unreadable (mode 000) or replaced meanwhile: not a directory the grader reads
                out[rel] = Entry("other")
                continue
            stack.append((sub, rel + "/", []))
            stack[-1][2].extend(reversed(_visit(sub, rel + "/", out, total, skip_dir)))
    finally:
        for dir_fd, _, _ in stack:
            os.close(dir_fd)
    return out


def escaped(path: str) -> str:
    """``path`` as valid UTF-8 text: bytes that are not UTF-8 (kept as surrogates by ``os``) become ``\\xNN``."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def remove_tree(root: Path) -> list[str]:
    """Remove ``root`` and everything under it, whatever its depth and modes; never raises, returns the errors.

    Without recursion or long paths: each subdirectory of a directory being emptied is made accessible (``u+rwx``,
    so a mode-000 directory goes too when the grader is not root) and moved up to ``root`` itself under a fresh
    name, so at most two directories are open at a time and every directory is moved at most once."""
    errors: list[str] = []
    try:
        os.chmod(root, 0o700)
        top = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        return errors
    except OSError as e:
        return [f"{root}: {e}"]
    moved = 0
    try:
        pending = [e.name for e in os.scandir(top) if e.is_dir(follow_symlinks=False)]
        _unlink_files(top, errors)
        while pending:
            name = pending.pop()
            try:
                os.chmod(name, 0o700, dir_fd=top)
                fd = os.open(name, _DIR_FLAGS, dir_fd=top)
            except OSError as e:
                errors.append(f"{root}/{escaped(name)}: {e}")
                continue
            try:
                for child in [e.name for e in os.scandir(fd) if e.is_dir(follow_symlinks=False)]:
                    moved += 1
                    fresh = f".crf-rm-{moved}"
                    try:
                        os.chmod(child, 0o700, dir_fd=fd)
                        os.rename(child, fresh, src_dir_fd=fd, dst_dir_fd=top)
                        pending.append(fresh)
                    except OSError as e:
                        errors.append(f"{root}/{escaped(name)}/{escaped(child)}: {e}")
                _unlink_files(fd, errors)
            finally:
                os.close(fd)
            try:
                os.rmdir(name, dir_fd=top)
            except OSError as e:
                errors.append(f"{root}/{escaped(name)}: {e}")
    except OSError as e:
        errors.append(f"{root}: {e}")
    finally:
        os.close(top)
    try:
        os.rmdir(root)
    except OSError as e:
        errors.append(f"{root}: {e}")
    return errors


def _unlink_files(dir_fd: int, errors: list[str]) -> None:
    with os.scandir(dir_fd) as it:
        names = [e.name for e in it if not e.is_dir(follow_symlinks=False)]
    for name in names:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError as e:
            errors.append(f"{escaped(name)}: {e}")


@contextlib.contextmanager
def _parent_fd(root: Path, rel: str, *, create: bool) -> Iterator[tuple[int, str]]:
    """Descriptor of ``rel``'s parent directory under ``root`` (components opened with ``O_NOFOLLOW``)."""
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"not a relative path inside the tree: {rel!r}")
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        yield fd, parts[-1]
    finally:
        os.close(fd)


def write_file(root: Path, rel: str, data: bytes, *, executable: bool = False) -> None:
    """Create or replace the regular file ``root/rel`` (an existing symlink there is replaced, not followed)."""
    with _parent_fd(root, rel, create=True) as (fd, name):
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                os.unlink(name, dir_fd=fd)
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
            os.fchmod(out, 0o755 if executable else 0o644)
        finally:
            os.close(out)


def remove_file(root: Path, rel: str) -> None:
    """Remove the file or symlink ``root/rel`` (missing is fine)."""
    with _parent_fd(root, rel, create=False) as (fd, name), contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=fd)
