"""What fsdp-lint's own code is, for the caches (the result cache's keys, the project
index's parts): a digest of its modules, read once per process."""

from __future__ import annotations

import functools
import hashlib
import os


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """What the installed fsdp-lint's own code is (``fingerprint_of`` its package folder).
    Part of every cache key, beside the version: an editable install (or a reinstall under
    the same version) whose code changed never reads answers the old code gave."""
    return fingerprint_of(os.path.dirname(os.path.abspath(__file__)))


def fingerprint_of(package: str) -> str:
    """A digest of the path, size and modification time of each ``.py`` file below ``package``."""
    digest = hashlib.sha256()
    for folder, folders, files in os.walk(package):
        folders.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                try:
                    stat = os.stat(path)
                except OSError:
                    continue
                digest.update(f"{os.path.relpath(path, package)}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]
