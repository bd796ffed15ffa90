"""Connect this process to Ray without giving up its signal handlers.

``ray.init`` on the main thread replaces the SIGTERM handler with its own ``sys.exit``: a CLI whose SIGTERM raises
KeyboardInterrupt (temporary outputs removed, exit 130) or a host process with its own graceful shutdown would lose
it. :func:`init_ray` puts back a Python handler that was installed before; where there was none, Ray's stays.
"""

from __future__ import annotations

import signal
import threading
from types import ModuleType
from typing import Any

from crf_prime.extras import require

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def init_ray(**kwargs: Any) -> ModuleType:
    """``ray.init(**kwargs)`` unless this process is connected already; returns the ``ray`` module (extra ``ray``)."""
    ray = require("ray", "ray")
    if ray.is_initialized():
        return ray
    main = threading.current_thread() is threading.main_thread()
    before = {sig: signal.getsignal(sig) for sig in _SIGNALS} if main else {}
    ray.init(**kwargs)
    for sig, handler in before.items():
        if callable(handler) and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
    return ray
