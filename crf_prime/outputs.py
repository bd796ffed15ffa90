"""Where a command writes: ``out`` is a file for some commands and a directory for others, and says which.

Checked at launch, before any work: a file output pointed at a directory (or the reverse) is bad input naming the
config field, instead of a traceback after the work is done.
"""

from __future__ import annotations

from pathlib import Path

from crf_prime.errors import InputError


def output_file(field: str, path: Path) -> Path:
    """``path`` as a file to write (its directory is made when written); InputError when it is a directory."""
    if path.is_dir():
        raise InputError.field(field, f"{path} is a directory; this output is a file")
    return path


def output_dir(field: str, path: Path) -> Path:
    """``path`` as a directory to write into; InputError when it is an existing file."""
    if path.exists() and not path.is_dir():
        raise InputError.field(field, f"{path} is a file; this output is a directory")
    return path
