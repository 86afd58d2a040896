"""Which of group scope's two C twins run: `proxy/capture/_snapped.c`'s `build` (the capture
writer's header-only packets, `proxy.capture.snapped`) and `append_run` (the sessions' packing,
`proxy.header_runs`). One choice for both: the C function when the extension is built, unless
`GROUP_REPLAY_CAPTURE_BUILDER=python` asks for the Python reference; `None` means the caller runs
its Python twin (a source tree run without `python setup.py build_ext --inplace`, for one)."""

from __future__ import annotations

import os
from typing import Any


def native(name: str) -> Any | None:
    """The extension's function `name`, or None when the Python twin is to run."""
    if os.environ.get("GROUP_REPLAY_CAPTURE_BUILDER", "") == "python":
        return None
    try:
        from proxy.capture import _snapped
    except ImportError:  # not built
        return None
    return getattr(_snapped, name)
