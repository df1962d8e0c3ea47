"""Where a hung rank waits: read the ``faulthandler`` dump in its log.

At the timeout the launcher sends each rank's program SIGUSR1; ``faulthandler`` writes every
thread's stack (``Thread 0x... (most recent call first):`` then ``  File "f.py", line 3 in
main``).  ``blocked_at`` turns the dump into one line: the program's own statement and the
phase (forward, backward, state_dict ...) and the ``torch.distributed`` call it is blocked
in, e.g. ``model(batch).sum().backward()`` (line 17) -> backward -> blocked in torch.distributed
reduce_scatter_single.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import List, Optional

_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ .*\(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(?P<file>.+)", line (?P<line>\d+) in (?P<func>\S+)')


# What the rank was doing, from the innermost frame whose function name says it.
PHASES = ("state_dict", "summon_full_params", "forward", "backward", "optimizer", "barrier")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str


def last_dump(text: str) -> List[List[Frame]]:
    """The threads of the last faulthandler dump in ``text`` (innermost frame first)."""
    dumps = all_dumps(text)
    return dumps[-1] if dumps else []


def all_dumps(text: str) -> List[List[List[Frame]]]:
    """Every faulthandler dump in ``text``, oldest first: each a list of threads."""
    dumps: List[List[List[Frame]]] = []
    threads: Optional[List[List[Frame]]] = None
    for line in text.splitlines():
        if _THREAD.match(line):
            threads = threads if threads is not None else []
            threads.append([])
            continue
        if threads is None:
            continue
        match = _FRAME.match(line)
        if match:
            threads[-1].append(Frame(match.group("file"), int(match.group("line")), match.group("func")))
        elif line.strip():  # blank lines separate threads; any other line ends the dump
            dumps.append(threads)
            threads = None
    if threads:
        dumps.append(threads)
    return dumps


def _source_line(path: str, line: int) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            for number, text in enumerate(handle, 1):
                if number == line:
                    return text.strip()
    except OSError:
        pass
    return ""


def _is_distributed(frame: Frame) -> bool:
    path = frame.file.replace(os.sep, "/")
    return "/torch/distributed/" in path


def _main_thread(threads: List[List[Frame]]) -> Optional[List[Frame]]:
    """The thread that runs the program: its outermost frame is the rank shim's ``python -c``
    boot code (``File "<string>", line 5 in <module>``)."""
    return next((t for t in threads if t and t[-1].file == "<string>" and t[-1].func == "<module>"), None)


# torch.distributed code that can wait on something other than a peer rank: file storage of
# distributed checkpoints, the elastic agent's machinery.
_NOT_PEER_WAITS = ("/torch/distributed/checkpoint/", "/torch/distributed/elastic/")


def main_thread_stack(text: str) -> List[Frame]:
    """The program's thread in the last stack dump of a rank's log, outermost frame first
    (the shim's boot code left out); empty without a dump.  A dump without the shim's boot
    frame (a program run some other way) gives its first thread."""
    threads = last_dump(text)
    main = _main_thread(threads) or (threads[0] if threads else [])
    return [f for f in reversed(main) if f.file != "<string>"]


def waits_in_torch_distributed(text: str) -> bool:
    """Whether the last stack dump in a rank's log shows its main thread inside a
    torch.distributed call (its innermost Python frame is torch.distributed code that waits
    on other ranks: a collective, a process group's store, a work object)."""
    threads = last_dump(text)
    main = _main_thread(threads)
    if not main:
        return False
    path = main[0].file.replace(os.sep, "/")
    return "/torch/distributed/" in path and not any(part in path for part in _NOT_PEER_WAITS)


def blocked_at(text: str, program: str) -> Optional[str]:
    """One line saying where the program was when its stack was dumped, or None (no dump)."""
    threads = last_dump(text)
    if not threads:
        return None
    name = os.path.basename(program)
    mine = [t for t in threads if any(os.path.basename(f.file) == name for f in t)] or threads[:1]
    frames = mine[0]
    own = next((f for f in frames if os.path.basename(f.file) == name), None)
    collective = next((f for f in frames if f.file.replace(os.sep, "/").endswith("distributed_c10d.py")), None)
    if collective is None:
        collective = next((f for f in frames if _is_distributed(f) and f.func not in ("wrapper", "inner")), None)
    parts = []
    phase = next((p for f in frames for p in PHASES if p in f.func), None)
    if own is not None:
        source = _source_line(program, own.line)
        parts.append(f"`{source}` (line {own.line})" if source else f"{name}:{own.line}")
    if phase is not None:
        parts.append(phase)
    if collective is not None:
        parts.append(f"blocked in torch.distributed {collective.func}")
    elif frames and frames[0] is not own:
        parts.append(f"in {frames[0].func} ({os.path.basename(frames[0].file)}:{frames[0].line})")
    return " -> ".join(parts)
