"""The user's own call site: the first frame outside torch and fsdp-lint's runtime layer.

No torch import here: the folders to skip are found from the installed packages' paths.
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Tuple

Site = Tuple[str, int]  # (absolute file name, line)

_LAYER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # fsdp_lint/verify
_STDLIB_SKIPPED = ("contextlib.py", "functools.py", "runpy.py", "threading.py")


def _torch_dir() -> str:
    spec = sys.modules.get("torch")
    path = getattr(spec, "__file__", None) if spec is not None else None
    return os.path.dirname(os.path.abspath(path)) if path else os.sep + "nonexistent-torch" + os.sep


class SiteFinder:
    """``site()`` walks the stack outward to the first frame that is the user's code."""

    def __init__(self) -> None:
        self._skip_dirs = (_torch_dir() + os.sep, _LAYER_DIR + os.sep)
        self._cache = {}

    def is_internal(self, filename: str) -> bool:
        answer = self._cache.get(filename)
        if answer is None:
            path = os.path.abspath(filename)
            answer = (
                path.startswith(self._skip_dirs)
                or (os.path.basename(path) in _STDLIB_SKIPPED and os.path.dirname(path) == os.path.dirname(os.__file__))
                or filename.startswith("<frozen")
            )
            self._cache[filename] = answer
        return answer

    def called_from_user(self, depth: int = 2) -> bool:
        """True when the frame ``depth`` levels up (the caller of the wrapped API) is the
        user's code, not torch calling its own API."""
        try:
            frame = sys._getframe(depth)
        except ValueError:
            return True
        return not self.is_internal(frame.f_code.co_filename)

    def site(self, depth: int = 2) -> Optional[Site]:
        try:
            frame = sys._getframe(depth)
        except ValueError:
            return None
        while frame is not None:
            filename = frame.f_code.co_filename
            if not self.is_internal(filename):
                return os.path.abspath(filename), frame.f_lineno
            frame = frame.f_back
        return None

    def site_of_traceback(self, tb) -> Optional[Site]:
        """The innermost user frame of a traceback (where the user's code called into what raised)."""
        found = None
        while tb is not None:
            filename = tb.tb_frame.f_code.co_filename
            if not self.is_internal(filename):
                found = (os.path.abspath(filename), tb.tb_lineno)
            tb = tb.tb_next
        return found
