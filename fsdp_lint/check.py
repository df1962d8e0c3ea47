"""The ``check`` command: lint (and optionally fix) each file, collect, report, exit code.

Each file is processed independently by ``process_file`` (read once, lint or fix, write
atomically); one bad file yields a diagnostic and the run goes on with the others.
Only the main process writes files; worker processes lint and fix in memory.
"""

from __future__ import annotations

import concurrent.futures  # its ProcessPoolExecutor loads on first use: only runs with a pool pay for it
import difflib
import multiprocessing
import os
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple, Type

from fsdp_lint.cache import Cache
from fsdp_lint.config import ConfigFinder
from fsdp_lint.diagnostics import INTERNAL_ERROR, IO_ERROR, UNUSED_NOQA, Diagnostic, Location, error_diagnostic
from fsdp_lint.engine import FileGate, cpython_syntax_error, gate_on, has_fsd_noqa, lint_text
from fsdp_lint.fixer import fix_text
from fsdp_lint.interrupt import blocked, worker_signals
from fsdp_lint.noqa import add_noqa
from fsdp_lint.notebook import NotebookError, cell_of, cell_rows, is_notebook, message_in_cells
from fsdp_lint.launch import Launch, LaunchFinder, launch_from_setting
from fsdp_lint.project import MEMO_SECONDS, ProjectIndex
from fsdp_lint.rules import for_target, opt_in_selected, select_rules
from fsdp_lint.rules.base import Rule
from fsdp_lint.source import (
    FileChangedError, SourceError, SourceFile, WriteRefused, decode_source, read_source, write_atomic,
)


@dataclass
class Overrides:
    """What the command line says; it wins over ``[tool.fsdp-lint]``."""

    select: Optional[List[str]] = None
    extend_select: List[str] = field(default_factory=list)
    ignore: List[str] = field(default_factory=list)
    unsafe_fixes: Optional[bool] = None
    target_torch_version: Optional[str] = None


@dataclass
class Settings:
    finder: ConfigFinder = field(default_factory=ConfigFinder)
    overrides: Overrides = field(default_factory=Overrides)
    fix: bool = False
    diff: bool = False
    cache: Optional[Cache] = None
    launches: LaunchFinder = field(default_factory=LaunchFinder)
    projects: Optional[ProjectIndex] = None
    long_lived: bool = False  # the language server's: files change under it (``ProjectIndex.memo_seconds``)
    _stated: Dict[str, tuple] = field(default_factory=dict, repr=False)
    _rules: Dict[tuple, List[Type[Rule]]] = field(default_factory=dict, repr=False)

    def _selection(self, path: str) -> tuple:
        """(select, extend-select, ignore, target torch version) for ``path``: the file's
        configuration under the command line's."""
        config = self.finder.for_file(path)
        o = self.overrides
        select = o.select if o.select is not None else (config.select or ["ALL"])
        # an explicit --select is a later layer than the file's select and ignore (ruff's order)
        file_ignores = [] if o.select is not None else config.ignore
        return (
            tuple(select),
            tuple(config.extend_select + o.extend_select),
            tuple(file_ignores + o.ignore + config.ignores_for(path)),
            o.target_torch_version or config.target_torch_version,
        )

    def rules_for(self, path: str) -> List[Type[Rule]]:
        key = self._selection(path)
        if key not in self._rules:
            self._rules[key] = for_target(select_rules(list(key[0]) + list(key[1]), key[2]), key[3])
        return self._rules[key]

    def unused_noqa_for(self, path: str) -> bool:
        """Whether the opt-in FSD800 (unused noqa codes) runs on ``path``."""
        select, extend, ignore, _ = self._selection(path)
        return opt_in_selected(UNUSED_NOQA[0], list(select) + list(extend), ignore)

    def __getstate__(self):
        # the rules per configuration are a cache, and may hold classes made for a target
        # torch version (``Rule.for_target``), which pickle cannot name: rebuilt on use
        state = dict(self.__dict__)
        state["_rules"] = {}
        return state

    def _stated_launch(self, path: str):
        """(Launch, Launcher) that ``[tool.fsdp-lint] launch`` states for ``path``'s project, or None."""
        config = self.finder.for_file(path)
        if config.launch is None or config.path is None:
            return None
        if config.path not in self._stated:
            launch, launcher, warning = launch_from_setting(config.launch, config.root, config.path)
            if warning:
                self.finder.notes.append(warning)
            self._stated[config.path] = (launch, launcher)
        return self._stated[config.path]

    def launch_for(self, path: str) -> Optional[Launch]:
        """How the project launches ``path`` when that turns FSDP on (``fsdp_lint.launch``):
        what ``[tool.fsdp-lint] launch`` states, else what the project's files show."""
        stated = self._stated_launch(path)
        if stated is not None:
            return stated[0]
        self.finder.notes.extend(self.launches.notes(path))
        return self.launches.for_file(path, self._index().imported_files)

    def launch_notes(self, paths) -> None:
        """The launch configs of these files' projects that could not be read, as notes of
        the configuration finder (read again here: workers' notes do not come back)."""
        folders = set()
        for path in paths:
            folder = os.path.dirname(os.path.abspath(path))
            if folder not in folders:
                folders.add(folder)
                self.finder.notes.extend(self.launches.notes(path))

    def _index(self) -> ProjectIndex:
        if self.projects is None:
            self.projects = ProjectIndex(self.cache.directory if self.cache is not None else None,
                                         MEMO_SECONDS if self.long_lived else None)
        return self.projects

    def launcher_for(self, path: str):
        """What starts ``path`` when known and it is not an FSDP launch (``launch.Launcher``)."""
        stated = self._stated_launch(path)
        if stated is not None:
            return stated[1]
        return self.launches.launcher_for(path)

    def project_for(self, path: str):
        """The project's other files as ``path`` imports them (``fsdp_lint.project``); the
        summaries are cached beside the results (memory only without a cache)."""
        view = self._index().view(path)
        if view is not None:
            view.launcher = self.launcher_for(path)
        return view

    def unsafe_for(self, path: str) -> bool:
        if self.overrides.unsafe_fixes is not None:
            return self.overrides.unsafe_fixes
        return bool(self.finder.for_file(path).unsafe_fixes)


@dataclass
class FileReport:
    path: str
    diagnostics: List[Diagnostic] = field(default_factory=list)
    fixed: int = 0  # findings the fixes resolved (found = fixed + remaining)
    diff: str = ""
    new_text: Optional[str] = None  # the fixed text (stdin mode prints it)
    text: str = ""  # the text as read (stdin mode prints it back when nothing changed)
    fixes: int = 0  # fixes applied: fewer than ``fixed`` when one fix settles several findings
    unfixed: List[Diagnostic] = field(default_factory=list)  # the findings before fixing
    output: Optional[str] = None  # standard input with --fix: what to print when not the text (a notebook's JSON)


def _diff(path: str, old: str, new: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=path, tofile=path
        )
    )


def process_source(source: SourceFile, settings: Settings, write: bool = True) -> FileReport:
    """Lint (or fix) one file.  With ``write`` a fixed file is written here; without it the
    fixed text stays in the report for ``write_fixes`` (workers never write: the main
    process does, so an interruption never stops a write half-way)."""
    path = source.path
    report = FileReport(path)
    rules = settings.rules_for(path)
    launch = settings.launch_for(path)
    unused = settings.unused_noqa_for(path)
    project = settings.project_for(path)
    try:
        if not (settings.fix or settings.diff):
            report.diagnostics = _lint_cached(source, rules, settings.cache, launch, unused, project)
            return report
        outcome = fix_text(
            source.text, path, rules, settings.unsafe_for(path), launch=launch,
            gate=_file_gate(source, rules, launch, project), unused_noqa=unused, project=project,
        )
        report.diagnostics = outcome.diagnostics
        if outcome.text == source.text:
            return report
        report.fixed = outcome.resolved
        report.fixes = outcome.applied
        report.new_text = outcome.text
        report.unfixed = outcome.initial
        if settings.diff:
            report.diff = _diff(path, source.text, outcome.text)
    except RecursionError:
        report.diagnostics = [
            error_diagnostic(("FSD900", "syntax-error"), path, "file too deeply nested to analyse, file not checked")
        ]
        return report
    except Exception as exc:  # noqa: BLE001 - never abort the run for one file
        report.diagnostics = [
            error_diagnostic(INTERNAL_ERROR, path, f"internal error: {type(exc).__name__}: {exc}; please report it")
        ]
        return report
    if write:
        write_fixes(source, report, settings)
    return report


def write_fixes(source: SourceFile, report: FileReport, settings: Settings) -> None:
    """Write the report's fixed text over the file (atomically, signals held off until the
    write is done or undone).  When it cannot be written, the file's findings are reported
    as they stand on disk, with an FSD902 naming the reason."""
    if report.new_text is None or settings.diff or not settings.fix:
        return
    try:
        with blocked():
            write_atomic(source, report.new_text)
        return
    except FileChangedError as exc:
        why = str(exc)
    except WriteRefused as exc:
        why = f"fixes not written: {exc}"
    except OSError as exc:
        why = f"fixes not written: cannot write the file: {exc.strerror or exc}"
    report.diagnostics = list(report.unfixed) + [error_diagnostic(IO_ERROR, source.path, why)]
    report.fixed = report.fixes = 0
    report.new_text = None


def _file_gate(source: SourceFile, rules, launch: Optional[Launch], project=None) -> FileGate:
    """The file's ``FileGate``, made by the first stage that asks and kept on the source."""
    gate = FileGate.for_text(source.text, rules, launch, source.gate, project)
    source.gate = gate
    return gate


def _lint_cached(
    source: SourceFile, rules, cache: Optional[Cache], launch: Optional[Launch] = None, unused: bool = False,
    project=None,
) -> List[Diagnostic]:
    gate = _file_gate(source, rules, launch, project)
    if cache is None or not gate.wanted:
        return lint_text(
            source.text, source.path, rules, launch=launch, gate=gate, unused_noqa=unused, project=project
        ).diagnostics
    key = gate.cache_key or cache.key(source.raw, _cache_tags(rules, launch, unused, project, source.text))
    if not (gate.cache_missed and key == gate.cache_key):
        hit = cache.get(key, source.path)
        if hit is not None:
            return hit
    diagnostics = lint_text(
        source.text, source.path, rules, launch=launch, gate=gate, unused_noqa=unused, project=project
    ).diagnostics
    if not any(d.code == INTERNAL_ERROR[0] for d in diagnostics):
        cache.put(key, diagnostics)
    return diagnostics


def _cache_key(source: SourceFile, rules, settings: Settings) -> Optional[str]:
    if settings.cache is None or settings.fix or settings.diff:
        return None
    project = settings.project_for(source.path)
    gate = _file_gate(source, rules, settings.launch_for(source.path), project)
    if gate.cache_key is None:
        gate.cache_key = settings.cache.key(
            source.raw, _cache_tags(rules, gate.launch, settings.unused_noqa_for(source.path), project, source.text)
        )
    return gate.cache_key


def _cache_tags(rules, launch: Optional[Launch] = None, unused: bool = False, project=None, text: str = "") -> List[str]:
    """What a cached answer depends on besides the bytes: the rules (with their target
    torch version), the project's FSDP launch of the file, whether the gate ran (an
    answer with the gate off is kept apart), whether FSD800 runs, and the summaries of
    the project helpers the file imports (``ProjectView.tag``)."""
    tags = [rule.cache_tag() for rule in rules] + ([] if gate_on() else ["gate-off"])
    tags += [UNUSED_NOQA[0]] if unused else []
    tags += [launch.tag()] if launch is not None else []
    project_tag = project.tag(text) if project is not None else ""
    return tags + ([project_tag] if project_tag else [])


def cheap_answer(source: SourceFile, settings: Settings, ast_stage: bool = True) -> Optional[FileReport]:
    """The file's report when the cheap stages settle it (text markers, the cache, then
    the ``ast`` stage: compiled names and the screen), or None when it needs libcst (or,
    without ``ast_stage``, the ``ast`` stage).  A file these stages clear is cached as
    clean, so a warm run skips even them."""
    rules = settings.rules_for(source.path)
    if settings.unused_noqa_for(source.path) and has_fsd_noqa(source.text):
        return None  # FSD800 judges the file's noqa comments: the full path answers
    gate = _file_gate(source, rules, settings.launch_for(source.path), settings.project_for(source.path))
    if not gate.topic:
        return FileReport(source.path)  # names nothing a rule is about: never parsed
    key = _cache_key(source, rules, settings)
    if key is not None and not gate.cache_missed:
        hit = settings.cache.get(key, source.path)
        if hit is not None:
            return FileReport(source.path, hit)
        gate.cache_missed = True
    if not ast_stage or not gate.gated:
        return None
    if not gate.wanted:
        # it names a topic but no rule wants it: clean unless CPython cannot parse it,
        # in which case libcst decides (FSD900, or newer syntax libcst accepts)
        if cpython_syntax_error(source.text) is not None:
            return None
    elif gate.screening.confirmed_live():
        return None
    if key is not None:
        settings.cache.put(key, [])
    return FileReport(source.path)


def process_file(path: str, settings: Settings) -> FileReport:
    try:
        source = read_source(path)
    except SourceError as exc:
        return FileReport(path, [error_diagnostic(IO_ERROR, path, str(exc), exc.row, exc.column)])
    return process_source(source, settings)


_WORKER_SETTINGS: Optional[Settings] = None


def _init_worker(settings: Settings) -> None:
    """Runs once in each worker: signals first (the worker was forked with them blocked),
    then the settings, which arrive once, not with every file."""
    global _WORKER_SETTINGS
    worker_signals()
    _WORKER_SETTINGS = settings  # libcst is imported by the first file that needs it


def _worker(source: SourceFile) -> FileReport:
    """A file the main process passed on after its markers: the ``ast`` stage here (in
    parallel), then libcst when some rule can fire."""
    answer = cheap_answer(source, _WORKER_SETTINGS)
    if answer is not None:
        return answer
    return process_source(source, _WORKER_SETTINGS, False)


def _pool(workers: int, settings: Settings):
    context = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    return concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=context, initializer=_init_worker, initargs=(settings,)
    )


def _submit(pool, source: SourceFile):
    return _submit_call(pool, _worker, source)


def _submit_call(pool, function: Callable, *args):
    with blocked():  # the first submit forks the workers: they start with signals blocked
        return pool.submit(function, *args)


def _done(future) -> bool:
    with blocked():
        return future.done()


def _result(future):
    """``future.result()`` without ever being interrupted inside ``concurrent.futures``: a
    signal raised there (between a lock's acquire and the ``with`` block that releases it,
    CPython's bpo-29988) can leave the pool's lock held, and stopping the pool then waits
    forever.  The wait is a poll whose sleep, outside every lock, is where a signal lands."""
    while not _done(future):
        time.sleep(0.005)
    with blocked():
        return future.result()


def _shutdown(pool) -> None:
    """Shut a pool whose files are all answered: quick, and never interrupted half-way.
    Summaries prefetched for files that never asked for them are dropped, not computed."""
    with blocked():
        pool.shutdown(cancel_futures=True)


def _stop(pool) -> None:
    """Stop a pool at once (an interruption): queued files are dropped, workers get
    SIGTERM (they die on it, mid-file: they never write files), then SIGKILL if needed."""
    with blocked():
        terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
        processes = list((getattr(pool, "_processes", None) or {}).values())
        if terminate is not None:
            terminate()
        for process in processes:
            if process.is_alive():
                process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        # the pool's manager thread may have closed its wake-up pipe already: CPython's exit
        # hook would then print "Exception ignored ... Bad file descriptor" as the run ends
        wakeups = getattr(getattr(concurrent.futures, "process", None), "_threads_wakeups", None)
        if wakeups is not None:
            wakeups.clear()


def _crashed(source: SourceFile) -> FileReport:
    return FileReport(source.path, [error_diagnostic(
        INTERNAL_ERROR, source.path,
        "the linter process crashed on this file (native code); file not checked; please report it",
    )])


def _collect(submitted, settings: Settings, reports: List[FileReport], retry: List[SourceFile]) -> None:
    """Wait for one worker's answer, write its fixes, keep its report (or the file for a
    retry when the pool broke)."""
    source, future = submitted
    try:
        report = _result(future)
    except concurrent.futures.BrokenExecutor:  # the pool's BrokenProcessPool: a worker died
        retry.append(source)
        return
    write_fixes(source, report, settings)
    reports.append(report)


def run_files(
    paths: Sequence[str], settings: Settings, jobs: int = 1, progress: Optional[Callable[[int], None]] = None
) -> List[FileReport]:
    """Read every file once; files the cheap stages settle are answered at once.  With
    ``jobs`` > 1 the rest (files whose markers match) are handed to worker processes as
    soon as they are found, so the ``ast`` stage and libcst's parse run in parallel and
    overlap reading; with one job the main process runs them.  The main process writes the
    fixes.  A worker that
    dies (a crash in native code) breaks the pool; its files are retried one process each,
    so the file that crashes is named in an FSD901 diagnostic and every other file still
    gets its answer.  An interruption (``Interrupted``, any exception) stops the workers at
    once and propagates.  ``progress`` is told how many files are answered, as they are."""
    reports: _Reports = _Reports(progress)
    pending: List[SourceFile] = []
    pool = None
    futures: Deque = deque()
    retry: List[SourceFile] = []
    pooled = jobs > 1 and len(paths) > 1
    index: List[Optional[ProjectIndex]] = [None]  # the project index the workers prefetch for

    def prefetch(read) -> None:
        # the summaries of the project files a file ahead imports, computed by the workers
        # while this process reads and gates the files before it (``ProjectIndex.prefetch``)
        nonlocal pool
        view = settings.project_for(read[0]) if read[1] is not None else None
        if view is None:
            return
        modules = view.imported_modules(read[1].text)
        if modules:
            if pool is None:
                pool = _pool(jobs, settings)
            index[0] = view.index
            try:
                view.index.prefetch(modules, lambda function, *args: _submit_call(pool, function, *args), _result)
            except concurrent.futures.BrokenExecutor:
                pass  # a worker died (native code): the summaries are computed here when asked

    try:
        for path, source, error in _read_ahead(paths, prefetch if pooled and gate_on() else None):
            if error is not None:
                reports.append(FileReport(path, [error_diagnostic(IO_ERROR, path, str(error), error.row, error.column)]))
                continue
            answer = cheap_answer(source, settings, ast_stage=not pooled)  # workers do the ast stage
            if answer is not None:
                reports.append(answer)
            elif pooled:
                if pool is None:
                    pool = _pool(jobs, settings)
                futures.append((source, _submit(pool, source)))
                while futures and _done(futures[0][1]):  # write fixes while still reading
                    _collect(futures.popleft(), settings, reports, retry)
            else:
                pending.append(source)
        while futures:
            _collect(futures.popleft(), settings, reports, retry)
        if pool is not None:
            _shutdown(pool)
            pool = None
        for source in retry:
            single = _pool(1, settings)
            pool = single
            try:
                report = _result(_submit(single, source))
                write_fixes(source, report, settings)
            except concurrent.futures.BrokenExecutor:
                report = _crashed(source)
            reports.append(report)
            _shutdown(single)
            pool = None
    except BaseException:
        if pool is not None:
            _stop(pool)
            pool = None
        raise
    finally:
        if pool is not None:
            pool.shutdown()
        if index[0] is not None:
            index[0].forget_pending()
    for source in pending:
        reports.append(process_source(source, settings))
    return list(reports)


# how many files ahead of the one being gated are read, and their imports' summaries
# handed to the workers (``run_files``): enough to keep them busy, little text held
READ_AHEAD = 64


def _read_ahead(paths: Sequence[str], on_read: Optional[Callable] = None):
    """(path, source or None, SourceError or None) of each file in order; with ``on_read``,
    each is read ``READ_AHEAD`` files before it is handed out and ``on_read`` told of it."""
    def read(path: str):
        try:
            return path, read_source(path), None
        except SourceError as exc:
            return path, None, exc

    if on_read is None:
        for path in paths:
            yield read(path)
        return
    ahead: Deque = deque()
    for path in paths:
        item = read(path)
        on_read(item)
        ahead.append(item)
        if len(ahead) > READ_AHEAD:
            yield ahead.popleft()
    yield from ahead


class _Reports(list):
    """The reports of a run, telling ``progress`` their number as each arrives."""

    def __init__(self, progress: Optional[Callable[[int], None]]):
        super().__init__()
        self._progress = progress

    def append(self, report: FileReport) -> None:
        super().append(report)
        if self._progress is not None:
            self._progress(len(self))


def process_stdin(data: bytes, filename: str, settings: Settings) -> FileReport:
    try:
        source = decode_source(data, filename)
    except SourceError as exc:
        return FileReport(filename, [error_diagnostic(IO_ERROR, filename, str(exc), exc.row, exc.column)])
    report = process_source(source, settings, write=False)
    report.text = source.text
    if source.notebook is not None:
        try:
            report.output = source.notebook.encode(report.new_text) if report.new_text is not None else source.notebook.text
        except NotebookError as exc:
            report.output = source.notebook.text
            report.diagnostics.append(error_diagnostic(IO_ERROR, filename, f"fixes not written: {exc}"))
    return report


# findings a noqa comment is not added for: the file was not checked (FSD900-FSD902), or
# the finding is about a noqa comment itself (FSD800)
NO_NOQA = ("FSD800", "FSD900", "FSD901", "FSD902")


def add_noqa_directives(reports: Sequence[FileReport], settings: Settings) -> Tuple[int, List[Diagnostic]]:
    """``--add-noqa``: write a ``# noqa: CODE`` for each finding of ``reports`` into its
    file (``noqa.add_noqa``; atomically, encoding and newlines kept).  Returns the number of
    rows that got a directive or a code, and an FSD902 per file that could not be written."""
    added = 0
    failures: List[Diagnostic] = []
    for report in reports:
        findings = [d for d in report.diagnostics if d.code not in NO_NOQA]
        if not findings:
            continue
        try:
            source = read_source(report.path)
        except SourceError as exc:
            failures.append(error_diagnostic(IO_ERROR, report.path, str(exc)))
            continue
        text, count = add_noqa(source.text, [(d.code, d.location.row, *d.statement_rows) for d in findings])
        if text == source.text:
            continue
        try:
            with blocked():
                write_atomic(source, text)
        except (FileChangedError, WriteRefused, OSError) as exc:
            failures.append(error_diagnostic(IO_ERROR, report.path, f"noqa directives not written: {exc}"))
            continue
        added += count
    return added, failures


def notebook_cells(report: FileReport) -> None:
    """A notebook's findings with their cell and rows in it (``Diagnostic.cell``), for
    output: the rows the engine gives are rows of the joined code cells.  The text they
    belong to is the fixed text when fixes were made (written or shown as a diff), else the
    file as it is."""
    if not is_notebook(report.path) or not report.diagnostics:
        return
    text = report.new_text if report.new_text is not None else report.text
    if not text:
        try:
            text = read_source(report.path).text
        except SourceError:
            return
    markers = cell_rows(text)
    for d in report.diagnostics:
        if d.cell is not None:
            continue
        d.message = message_in_cells(d.message, markers)
        cell, row = cell_of(d.location.row, markers)
        if cell is None:
            continue
        shift = d.location.row - row
        d.cell = cell
        d.location = Location(row, d.location.column)
        d.end_location = Location(max(1, d.end_location.row - shift), d.end_location.column)
        first, last = d.statement_rows
        d.statement_rows = (max(1, first - shift), max(1, last - shift)) if first else (0, 0)
        if d.fix is not None:
            edits = tuple(
                replace(e, location=Location(e.location.row - shift, e.location.column),
                        end_location=Location(e.end_location.row - shift, e.end_location.column))
                for e in d.fix.edits
            )
            d.fix = replace(d.fix, edits=edits)


def exit_code(diagnostics: Sequence[Diagnostic], fixed: int, diff: bool) -> int:
    if any(d.code == INTERNAL_ERROR[0] for d in diagnostics):
        return 2
    if diagnostics:
        return 1
    if diff and fixed:
        return 1
    return 0


def display_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel
