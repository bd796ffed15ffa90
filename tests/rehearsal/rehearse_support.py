"""What the rehearsal tests share: the scripts under scripts/rehearse loaded as modules (they are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REHEARSE = Path(__file__).resolve().parents[2] / "scripts" / "rehearse"


def load_script(name: str, path: Path) -> ModuleType:
    """Import ``path`` as module ``name`` (registered in ``sys.modules``, so scripts that import it by name find it)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
