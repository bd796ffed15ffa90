"""Which boot of the machine this is: written beside data that is put in the page cache but not synced.

A ``write`` that returned survives the process being killed (the kernel owns the page cache), not a power loss or
a kernel crash. Both of those reboot the machine, and a reboot changes Linux's random boot id. So data written under
the boot id that is current when it is read again is all there, synced or not; under another boot id, only what
was synced can be relied on.
"""

from __future__ import annotations

import functools
from pathlib import Path

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


@functools.cache
def boot_id() -> str | None:
    """This boot's id, or None where the OS has none (then only synced data may be relied on)."""
    try:
        return BOOT_ID_PATH.read_text().strip() or None
    except OSError:
        return None
