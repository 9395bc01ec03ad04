"""Import one function from a Python file that is not on ``sys.path``.

This runs the file's code in the process: a bundle's scripts come here only through
:func:`skilldeck.skills.loader.load_script` and the loader, which import them only from a
bundle the deck trusts, and the ``rules`` provider, once the deck has checked the same of the
bundle its file is in.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skilldeck.errors import BundleError

__all__ = ["import_function"]


def import_function(label: str, file: Path, func: str, signature: str) -> Callable[..., Any]:
    """Import ``file`` as the module ``skilldeck_skill_<label>_<func>``; its function ``func``.

    Raises:
        BundleError: naming ``file``, when it does not import or has no callable ``func``
            (``signature`` is how the message shows it, e.g. ``setup(task, trial)``).
    """
    spec = importlib.util.spec_from_file_location(f"skilldeck_skill_{label}_{func}", file)
    if spec is None or spec.loader is None:
        raise BundleError(str(file), "$", "cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise BundleError(str(file), "$", f"import failed: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, func, None)
    if not callable(fn):
        raise BundleError(str(file), "$", f"must define a function {signature}")
    return fn  # type: ignore[no-any-return]
