"""How a project launches its scripts: FSDP turned on outside the Python file.

Real projects switch FSDP on where the linted file cannot show it: an ``accelerate config``
YAML (``distributed_type: FSDP``) passed to ``accelerate launch --config_file``, flags on
the launch command (``accelerate launch --use_fsdp``, ``torchrun ... train.py --fsdp
"full_shard auto_wrap"``) in a shell script, or the project's settings
(``[tool.fsdp-lint] launch = "fsdp"``).  This module finds them for a file:

- the project root is found as ruff finds it: the nearest folder above the file with a
  ``pyproject.toml``, else with a ``.git``; a file in neither is in no project (nothing
  is read);
- the root is searched (bounded: ``MAX_DEPTH`` folders deep, ``MAX_FILES`` candidates,
  ``MAX_BYTES`` each; hidden, virtual-environment and cache folders, and folders that are
  projects of their own (a ``pyproject.toml``), skipped) for
  ``*.yaml``/``*.yml`` accelerate configs and ``*.sh`` launch scripts;
- a launch command that names a script applies to that script and to the project modules
  it imports (transitively, within the project index's bounds); an FSDP config that no
  command ties to a script applies to every file of the project only when it is the only
  FSDP config there (two configs, or a config another script is launched without: not
  guessed).

Config files are data: YAML is read line by line for the few keys used (no YAML library,
no tags, nothing constructed), shell scripts are split into words; nothing is executed or
imported.  A file that cannot be read is skipped.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, List, Optional, Tuple

MAX_DEPTH = 6
MAX_FILES = 400
MAX_BYTES = 256 * 1024
_SKIPPED_DIRS = frozenset(
    {"node_modules", "__pycache__", "site-packages", "venv", "env", "build", "dist", ".fsdp_lint_cache"}
)
_YAML_KEY = re.compile(r"^(\s*)([A-Za-z_][\w.-]*)\s*:\s*(.*?)\s*(#.*)?$")
_FSDP_FLAG_VALUE = re.compile(r"full_shard|shard_grad_op|hybrid_shard|no_shard|offload|auto_wrap", re.I)
_LAUNCHERS = ("accelerate", "torchrun", "torch.distributed.run", "torch.distributed.launch", "deepspeed", "python", "python3")


@dataclass(frozen=True)
class Launch:
    """FSDP turned on for a script, and where."""

    source: str  # "configs/fsdp.yaml:2 (distributed_type: FSDP)", relative to the project root
    offload_params: Optional[bool] = None  # fsdp_offload_params / --fsdp "... offload"
    use_orig_params: Optional[bool] = None
    version: Optional[int] = None  # fsdp_version (accelerate: 1 or 2)
    # "accelerate" where ``accelerate launch`` turns FSDP on (it then sets the plugin's
    # environment: ``FSDP_USE_ORIG_PARAMS`` from the config, default true); "" otherwise
    launcher: str = ""

    def tag(self) -> str:
        """What a cached answer depends on."""
        return f"launch={self.source}|{self.offload_params}|{self.use_orig_params}|{self.version}|{self.launcher}"


@dataclass(frozen=True)
class Launcher:
    """What starts a script when that is known and does not turn FSDP on: ``torchrun`` or
    ``python`` (no ``accelerate launch``: accelerate's plugin reads no launcher settings from
    the environment), with where that is said."""

    name: str  # "torchrun", "python", "deepspeed", "accelerate"
    source: str


@dataclass
class _Config:
    path: str
    line: int
    offload_params: Optional[bool] = None
    use_orig_params: Optional[bool] = None
    version: Optional[int] = None


@dataclass
class ProjectLaunches:
    """What a project's launch files say (``read_project``)."""

    root: str
    configs: Dict[str, _Config] = field(default_factory=dict)  # absolute path -> FSDP accelerate config
    scripts: Dict[str, Launch] = field(default_factory=dict)  # absolute script path -> its FSDP launch
    launched_plain: List[str] = field(default_factory=list)  # scripts some command launches without FSDP
    plain_launchers: Dict[str, Launcher] = field(default_factory=dict)  # script -> its one launcher without FSDP

    def for_file(self, path: str, imports: Optional[Callable[[str], FrozenSet[str]]] = None) -> Optional[Launch]:
        """A command's launch of this script; else the launch of the scripts that import it
        (``imports``: a script -> the project files it imports, transitively within bounds:
        ``project.ProjectIndex.imported_files``), when they agree; else the project's only
        FSDP config, unless a command launches this script without FSDP."""
        path = os.path.abspath(path)
        if path in self.scripts:
            return self.scripts[path]
        if path in self.launched_plain:
            return None
        reached = self._reached(path, imports) if imports is not None else None
        if reached is not None:
            return reached
        if len(self.configs) != 1:
            return None
        (config,) = self.configs.values()
        return self._launch_of(config)

    def _reached(self, path: str, imports: Callable[[str], FrozenSet[str]]) -> Optional[Launch]:
        """The FSDP launch of the launched scripts that import ``path``: the module runs in
        their processes.  Launches that disagree (offload, ``use_orig_params``, version,
        launcher) are not guessed between."""
        found = [(script, launch) for script, launch in sorted(self.scripts.items()) if path in imports(script)]
        if not found or len({(l.offload_params, l.use_orig_params, l.version, l.launcher) for _, l in found}) != 1:
            return None
        script, launch = found[0]
        where = f"{launch.source}, launching {os.path.relpath(script, self.root)}, which imports this file"
        return Launch(where, launch.offload_params, launch.use_orig_params, launch.version, launch.launcher)

    def _launch_of(self, config: _Config) -> Launch:
        where = f"{os.path.relpath(config.path, self.root)}:{config.line} (distributed_type: FSDP)"
        return Launch(where, config.offload_params, config.use_orig_params, config.version)


def project_root(path: str) -> Optional[str]:
    """The nearest folder above ``path`` with a ``pyproject.toml``, else with a ``.git``."""
    folder = os.path.dirname(os.path.abspath(path))
    git = None
    while True:
        if os.path.isfile(os.path.join(folder, "pyproject.toml")):
            return folder
        if git is None and os.path.exists(os.path.join(folder, ".git")):
            git = folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return git
        folder = parent


def _read(path: str) -> Optional[str]:
    try:
        if os.path.getsize(path) > MAX_BYTES:
            return None
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _bool(text: str) -> Optional[bool]:
    value = text.strip().strip("'\"").lower()
    if value in ("true", "yes", "on", "1"):
        return True
    if value in ("false", "no", "off", "0"):
        return False
    return None


def read_accelerate_config(path: str, text: str) -> Optional[_Config]:
    """An accelerate config whose top-level ``distributed_type`` is FSDP, with the
    ``fsdp_config`` keys the rules read; None for any other YAML."""
    found = None
    values: Dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = _YAML_KEY.match(line)
        if not match:
            continue
        indent, key, value = match.group(1), match.group(2), match.group(3)
        if not indent and key == "distributed_type" and value.strip("'\"").upper() == "FSDP":
            found = number
        elif key.startswith("fsdp_") and value:
            values[key] = value
    if found is None:
        return None
    version = values.get("fsdp_version", "").strip("'\"")
    return _Config(
        path,
        found,
        offload_params=_bool(values.get("fsdp_offload_params", "")),
        use_orig_params=_bool(values.get("fsdp_use_orig_params", "")),
        version=int(version) if version.isdigit() else None,
    )


def _commands(text: str) -> List[Tuple[int, List[str]]]:
    """(line, words) of each command of a shell script, continuation lines joined."""
    commands = []
    pending, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not pending:
            start = number
            if not stripped or stripped.startswith("#"):
                continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        try:
            words = shlex.split(pending + stripped, comments=True)
        except ValueError:
            words = (pending + stripped).split()
        pending = ""
        if words:
            commands.append((start, words))
    return commands


def _launch_in_command(words: List[str], folder: str, root: str, configs: Dict[str, _Config], source: str):
    """(script, Launch or None) for a command that runs a Python script, else None."""
    if not any(os.path.basename(w) in _LAUNCHERS for w in words[:3]) and "launch" not in words[:3]:
        return None
    script = next((w for w in words if w.endswith(".py")), None)
    if script is None:
        return None
    script_path = os.path.normpath(os.path.join(folder, script)) if not os.path.isabs(script) else script
    if not os.path.isfile(script_path):
        script_path = os.path.normpath(os.path.join(root, script))
    index = words.index(script)
    launcher_words, script_words = words[:index], words[index + 1:]
    launch = None
    for i, word in enumerate(launcher_words):
        value = launcher_words[i + 1] if i + 1 < len(launcher_words) else ""
        name, _, inline = word.partition("=")
        if name == "--config_file":
            target = inline or value
            for base in (folder, root):
                config = configs.get(os.path.normpath(os.path.join(base, target)))
                if config is not None:
                    where = f"{os.path.relpath(config.path, root)}:{config.line} (distributed_type: FSDP, {source})"
                    launch = Launch(where, config.offload_params, config.use_orig_params, config.version,
                                    "accelerate")
                    break
        elif name == "--use_fsdp":
            offload = next((_bool(launcher_words[j + 1]) for j, w in enumerate(launcher_words[:-1])
                            if w == "--fsdp_offload_params"), None)
            orig = next((_bool(launcher_words[j + 1]) for j, w in enumerate(launcher_words[:-1])
                         if w == "--fsdp_use_orig_params"), None)
            launch = Launch(f"{source} (accelerate launch --use_fsdp)", offload, orig, None, "accelerate")
    for i, word in enumerate(script_words):
        name, _, inline = word.partition("=")
        if name == "--fsdp":
            value = inline or (script_words[i + 1] if i + 1 < len(script_words) else "")
            if _FSDP_FLAG_VALUE.search(value):
                offload = "offload" in value.lower()
                launch = Launch(f"{source} (--fsdp {value!r})", offload)
    return script_path, launch


def _launcher_name(words: List[str]) -> str:
    """``torchrun``/``python``/``deepspeed``/``accelerate`` for a command's first launcher word."""
    for word in words[:3]:
        base = os.path.basename(word)
        if base in ("torchrun", "torch.distributed.run", "torch.distributed.launch"):
            return "torchrun"
        if base in ("python", "python3"):
            return "torchrun" if any(w in ("torch.distributed.run", "torch.distributed.launch") for w in words[:4]) \
                else "python"
        if base in ("accelerate", "deepspeed"):
            return base
    return ""


def launch_from_setting(setting, root: str, pyproject: str) -> Tuple[Optional[Launch], Optional[Launcher], Optional[str]]:
    """``[tool.fsdp-lint] launch`` (validated by ``config``): (the FSDP launch it states, the
    launcher it states, a warning).  ``"fsdp"``: FSDP is on, how is not said;
    ``{ framework = "accelerate", config = "configs/fsdp.yaml" }``: that accelerate config
    (read as data, bounded: a missing, huge or non-FSDP file is a warning naming it, and the
    launch is then not known); ``{ framework = "torchrun" }`` / ``"python"``: started
    without ``accelerate launch``."""
    where = f"{os.path.relpath(pyproject, root)} [tool.fsdp-lint] launch"
    if setting == "fsdp":
        return Launch(where), None, None
    framework = setting.get("framework")
    config_path = setting.get("config")
    if framework in ("torchrun", "python"):
        return None, Launcher(framework, where), None
    if config_path is None:
        if framework == "accelerate" and setting.get("fsdp") is True:
            return Launch(f"{where} (accelerate, FSDP)", launcher="accelerate"), None, None
        return None, Launcher(framework, where), None
    path = os.path.normpath(os.path.join(root, config_path))
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        return None, None, f"{where}: cannot read {config_path}: {exc.strerror or exc}; the launch is not known"
    if size > MAX_BYTES:
        return None, None, f"{where}: {config_path} is over {MAX_BYTES // 1024} KiB, not read; the launch is not known"
    text = _read(path)
    if text is None:
        return None, None, f"{where}: cannot read {config_path}; the launch is not known"
    if "\x00" in text:
        return None, None, f"{where}: {config_path} is not a text file; the launch is not known"
    config = read_accelerate_config(path, text)
    if config is None:
        return None, Launcher("accelerate", where), (
            f"{where}: {config_path} has no top-level `distributed_type: FSDP`: FSDP is not turned on by it")
    source = f"{os.path.relpath(path, root)}:{config.line} (distributed_type: FSDP, {where})"
    return Launch(source, config.offload_params, config.use_orig_params, config.version, "accelerate"), None, None


def read_project(root: str) -> ProjectLaunches:
    """Every FSDP accelerate config and launch command under ``root`` (bounded)."""
    found = ProjectLaunches(root)
    scripts: List[str] = []
    seen = 0
    for folder, dirs, files in os.walk(root):
        depth = os.path.relpath(folder, root).count(os.sep) + (folder != root)
        dirs[:] = sorted(
            d for d in dirs
            if not d.startswith(".") and d not in _SKIPPED_DIRS and depth < MAX_DEPTH
            and not os.path.isfile(os.path.join(folder, d, "pyproject.toml"))  # a project of its own
        )
        for name in sorted(files):
            if seen >= MAX_FILES:
                break
            path = os.path.join(folder, name)
            if name.endswith((".yaml", ".yml")):
                seen += 1
                text = _read(path)
                config = read_accelerate_config(path, text) if text and "distributed_type" in text else None
                if config is not None:
                    found.configs[os.path.normpath(path)] = config
            elif name.endswith(".sh"):
                seen += 1
                scripts.append(path)
    for path in scripts:
        text = _read(path)
        if not text or ".py" not in text:
            continue
        for line, words in _commands(text):
            source = f"{os.path.relpath(path, root)}:{line}"
            result = _launch_in_command(words, os.path.dirname(path), root, found.configs, source)
            if result is None:
                continue
            script, launch = result
            if launch is not None:
                found.scripts.setdefault(os.path.abspath(script), launch)
            else:
                script = os.path.abspath(script)
                found.launched_plain.append(script)
                name = _launcher_name(words)
                known = found.plain_launchers.get(script)
                if known is None and script not in found.plain_launchers:
                    found.plain_launchers[script] = Launcher(name, source) if name else None
                elif known is not None and known.name != name:
                    found.plain_launchers[script] = None  # launched two ways: not known
    return found


class LaunchFinder:
    """The launch of each file, one project read per root per run."""

    def __init__(self) -> None:
        self._projects: Dict[str, Optional[ProjectLaunches]] = {}

    def _project(self, path: str) -> Optional[ProjectLaunches]:
        root = project_root(path)
        if root is None:
            return None
        if root not in self._projects:
            self._projects[root] = read_project(root)
        return self._projects[root]

    def for_file(self, path: str, imports: Optional[Callable[[str], FrozenSet[str]]] = None) -> Optional[Launch]:
        """``imports``: see ``ProjectLaunches.for_file`` (None: only what names the file)."""
        project = self._project(path)
        return project.for_file(path, imports) if project is not None else None

    def launcher_for(self, path: str) -> Optional[Launcher]:
        """The one launcher without FSDP that the project's commands start ``path`` with."""
        project = self._project(path)
        if project is None or path_key(path) in project.scripts:
            return None
        return project.plain_launchers.get(path_key(path))


def path_key(path: str) -> str:
    return os.path.abspath(path)
