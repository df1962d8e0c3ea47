"""Reading source files as bytes and writing them back without loss.

The encoding (PEP 263 cookie or UTF-8), a UTF-8 byte-order mark and the newline
style are detected here and kept: the text the rules see round-trips to the
exact bytes that were read.  Writes are atomic (temp file in the same folder,
fsync, rename), go through symbolic links to their target, keep the file's mode,
owner and group, and never replace a file the user could not write or one that
changed on disk since it was read.
"""

from __future__ import annotations

import codecs
import itertools
import os
import re
import stat
import tempfile
import tokenize
from dataclasses import dataclass, field
from typing import List, Optional

from fsdp_lint.notebook import Notebook, NotebookError, is_notebook, parse as parse_notebook

_NEWLINE = re.compile(r"\r\n|\r|\n")
# PEP 263: a comment naming the encoding on line 1 or 2
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+", re.M)
_RAW_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # a line of raw bytes, as CPython splits them


class SourceError(Exception):
    """A file that cannot be read or decoded; carries a row for the diagnostic."""

    def __init__(self, message: str, row: int = 1, column: int = 1):
        super().__init__(message)
        self.row = row
        self.column = column


@dataclass
class SourceFile:
    path: str
    raw: bytes
    text: str  # decoded, without BOM (a notebook: its code cells joined, ``fsdp_lint.notebook``)
    encoding: str
    bom: bool
    notebook: Optional[Notebook] = None
    # what the gate learned about ``text`` (``engine.FileGate``): set by the first stage
    # that asks, so later stages of the same file do not ask again
    gate: Optional[object] = field(default=None, repr=False, compare=False)

    def encode(self, text: str) -> bytes:
        if self.notebook is not None:
            try:
                text = self.notebook.encode(text)
            except NotebookError as exc:
                raise WriteRefused(str(exc)) from None
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data


def _decode_notebook(raw: bytes, path: str) -> SourceFile:
    bom = raw.startswith(codecs.BOM_UTF8)
    body = raw[len(codecs.BOM_UTF8):] if bom else raw
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"notebook is not UTF-8: {exc}") from None
    try:
        notebook = parse_notebook(text)
    except NotebookError as exc:
        raise SourceError(f"not a valid Jupyter notebook: {exc}") from None
    return SourceFile(path=path, raw=raw, text=notebook.python_text, encoding="utf-8", bom=bom, notebook=notebook)


def decode_source(raw: bytes, path: str = "<stdin>") -> SourceFile:
    if is_notebook(path):
        return _decode_notebook(raw, path)
    if b"\x00" in raw:
        raise SourceError("binary file (contains NUL bytes), not Python source")
    # PEP 263 reads at most the first two lines (``tokenize.detect_encoding``)
    first_two = [match.group() for match in itertools.islice(_RAW_LINE.finditer(raw[:4096]), 2)]
    lines = iter(first_two)
    declared = any(_CODING.match(line) for line in first_two)
    bom = raw.startswith(codecs.BOM_UTF8)
    body = raw[len(codecs.BOM_UTF8):] if bom else raw
    try:
        # PEP 263 looks at the first two lines; split them the way CPython does (\r counts)
        encoding, _ = tokenize.detect_encoding(lambda: next(lines, b""))
    except SyntaxError as exc:
        if not declared:  # no declaration at all: a byte of the first lines is not UTF-8
            _not_utf8(body)
        raise SourceError(f"bad encoding declaration: {exc}") from None
    if encoding == "utf-8-sig":
        encoding = "utf-8"
    try:
        text = body.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        if isinstance(exc, UnicodeDecodeError) and not declared and encoding == "utf-8":
            _not_utf8(body)
        row = 1
        if isinstance(exc, UnicodeDecodeError):
            row = body[: exc.start].count(b"\n") + 1
        raise SourceError(f"cannot decode as {encoding}: {exc}", row=row) from None
    return SourceFile(path=path, raw=raw, text=text, encoding=encoding, bom=bom)


def _not_utf8(body: bytes) -> None:
    """Raise the error of a file without an encoding declaration whose bytes are not UTF-8:
    where the first bad byte is (line and column, counted in characters)."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = max(body.rfind(b"\n", 0, exc.start), body.rfind(b"\r", 0, exc.start)) + 1
        row = len(_NEWLINE.findall(body[:start].decode("utf-8", errors="replace"))) + 1
        column = len(body[start:exc.start].decode("utf-8", errors="replace")) + 1
        raise SourceError(
            f"not valid UTF-8 and no encoding declaration: byte 0x{body[exc.start]:02x} at line {row}, column "
            f"{column} is not UTF-8 (declare the encoding, e.g. `# -*- coding: latin-1 -*-`, or save the file "
            "as UTF-8)", row=row, column=column) from None


def read_source(path: str) -> SourceFile:
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise SourceError(f"cannot read file: {exc.strerror or exc}") from None
    return decode_source(raw, path)


def line_starts(text: str) -> List[int]:
    """Offsets where each line starts; line breaks are \\n, \\r\\n and \\r, as libcst counts them."""
    starts = [0]
    for match in _NEWLINE.finditer(text):
        starts.append(match.end())
    return starts


class FileChangedError(Exception):
    pass


class WriteRefused(Exception):
    """A fixed file that fsdp-lint will not (or cannot) write; the message says why."""


def _refusal(path: str, st: os.stat_result) -> Optional[str]:
    """Why the user could not write ``path`` (None when they could).  Root bypasses file
    permissions, so a file with no write bit at all counts as read-only for everyone, as
    editors treat it; anyone else needs write permission on the file as the system
    grants it.  The folder must take the temporary file of the atomic write."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if not st.st_mode & 0o222:
        return f"read-only file (mode {stat.S_IMODE(st.st_mode):o}, no write permission bit set)"
    if not os.access(path, os.W_OK):
        return "permission denied: you cannot write this file"
    directory = os.path.dirname(path)
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"permission denied: the folder {directory} is not writable (fixes are written atomically through a temporary file beside the file)"
    return None


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def write_atomic(source: SourceFile, new_text: str) -> None:
    """Write ``new_text`` over ``source.path`` atomically, unless the file changed since it
    was read.  A symbolic link is written through: its target gets the new text, the link
    stays.  The file's mode, owner and group are kept; a file the user could not write is
    refused (``WriteRefused``), as is one whose owner or group cannot be kept."""
    data = source.encode(new_text)
    path = os.path.realpath(source.path)
    st = os.stat(path)
    why = _refusal(path, st)
    if why is not None:
        raise WriteRefused(why)
    current = _read(path)
    if current == data:
        return  # already fixed (the same file reached through a symbolic link, say)
    if current != source.raw:
        raise FileChangedError(f"{source.path} changed on disk while it was being fixed; not written")
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".fsdp-lint-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            mine = os.fstat(handle.fileno())
            if (mine.st_uid, mine.st_gid) != (st.st_uid, st.st_gid):
                try:
                    os.fchown(handle.fileno(), st.st_uid, st.st_gid)
                except PermissionError:
                    raise WriteRefused(
                        f"cannot keep the file's owner and group ({st.st_uid}:{st.st_gid}) in a replacement "
                        "written by this user"
                    ) from None
            os.fchmod(handle.fileno(), stat.S_IMODE(st.st_mode))  # after chown, which clears set-id bits
            os.fsync(handle.fileno())
        if _read(path) != source.raw:
            raise FileChangedError(f"{source.path} changed on disk while it was being fixed; not written")
        os.replace(tmp, path)
        tmp = None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
