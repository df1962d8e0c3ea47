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

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, List, Optional, Tuple

MAX_DEPTH = 6
MAX_FILES = 400
MAX_BYTES = 256 * 1024
SKIPPED_DIRS = frozenset(
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
    # other settings the config states, for ``--show-settings`` (``("dtype", "bf16")``)
    settings: Tuple[Tuple[str, str], ...] = ()

    def tag(self) -> str:
        """What a cached answer depends on."""
        return (f"launch={self.source}|{self.offload_params}|{self.use_orig_params}|{self.version}|{self.launcher}"
                f"|{self.settings}")


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
    # "accelerate" (``distributed_type: FSDP``), "torchtune" (``fsdp_cpu_offload: ...``),
    # "lightning" (``trainer: strategy: fsdp`` / ``FSDPStrategy``)
    kind: str = "accelerate"
    what: str = "distributed_type: FSDP"  # the line that makes it an FSDP config, for messages
    settings: Tuple[Tuple[str, str], ...] = ()

    def launch(self, root: str, via: str = "") -> Launch:
        where = f"{os.path.relpath(self.path, root)}:{self.line} ({self.what}{', ' + via if via else ''})"
        launcher = self.kind if via else ""
        return Launch(where, self.offload_params, self.use_orig_params, self.version, launcher, self.settings)


@dataclass
class ProjectLaunches:
    """What a project's launch files say (``read_project``)."""

    root: str
    configs: Dict[str, _Config] = field(default_factory=dict)  # absolute path -> FSDP accelerate config
    scripts: Dict[str, Launch] = field(default_factory=dict)  # absolute script path -> its FSDP launch
    launched_plain: List[str] = field(default_factory=list)  # scripts some command launches without FSDP
    plain_launchers: Dict[str, Launcher] = field(default_factory=dict)  # script -> its one launcher without FSDP
    tied: List[str] = field(default_factory=list)  # configs a launch command names
    unread: Dict[str, str] = field(default_factory=dict)  # a YAML file that could not be read -> why
    notes: List[str] = field(default_factory=list)  # a named config that cannot be read: for the user

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
        if config.path in self.tied:
            return None  # a command ties it to its script (and what that imports) alone
        return config.launch(self.root)

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


def _config_at(name: str, folder: str, root: str, configs: Dict[str, _Config], kind: str) -> Optional[_Config]:
    for base in (folder, root):
        config = configs.get(os.path.normpath(os.path.join(base, name)))
        if config is not None and config.kind == kind:
            return config
    return None


def _option(words: List[str], *names: str) -> Optional[str]:
    """The value of ``--name value`` / ``--name=value`` among ``words`` (the last one given)."""
    found = None
    for i, word in enumerate(words):
        name, equals, inline = word.partition("=")
        if name in names:
            found = inline if equals else (words[i + 1] if i + 1 < len(words) else None)
    return found


def _tune_run(words: List[str]) -> Optional[Tuple[str, Optional[str]]]:
    """(recipe, config) of ``tune run [launcher options] <recipe> --config X.yaml``."""
    for start in range(min(3, len(words) - 1)):
        if os.path.basename(words[start]) == "tune" and words[start + 1] == "run":
            break
    else:
        return None
    rest = words[start + 2:]
    i = 0
    while i < len(rest) and rest[i].startswith("-"):
        i += 1 if "=" in rest[i] else 2  # torchrun's options take a value
    if i >= len(rest):
        return None
    return rest[i], _option(rest[i + 1:], "--config")


def _script_path(script: str, folder: str, root: str) -> str:
    path = os.path.normpath(os.path.join(folder, script)) if not os.path.isabs(script) else script
    if not os.path.isfile(path):
        path = os.path.normpath(os.path.join(root, script))
    return path


def _launch_in_command(words: List[str], folder: str, root: str, found: "ProjectLaunches", source: str):
    """(script, Launch or None) for a command that runs a Python script, else None."""
    configs = found.configs
    tune = _tune_run(words)
    if tune is not None:  # torchtune: ``tune run recipe.py --config configs/x.yaml``
        recipe, config_name = tune
        if not recipe.endswith(".py"):
            return None  # one of torchtune's own recipes: no file of this project
        config = _config_at(config_name, folder, root, configs, "torchtune") if config_name else None
        if config_name and config is None:
            _note_unread(found, config_name, folder, root, source)
        if config is not None:
            found.tied.append(config.path)
        return _script_path(recipe, folder, root), config.launch(root, f"tune run, {source}") if config else None
    if not any(os.path.basename(w) in _LAUNCHERS for w in words[:3]) and "launch" not in words[:3]:
        return None
    script = next((w for w in words if w.endswith(".py")), None)
    if script is None:
        return None
    script_path = _script_path(script, folder, root)
    index = words.index(script)
    launcher_words, script_words = words[:index], words[index + 1:]
    launch = None
    for i, word in enumerate(launcher_words):
        value = launcher_words[i + 1] if i + 1 < len(launcher_words) else ""
        name, _, inline = word.partition("=")
        if name == "--config_file":
            target = inline or value
            config = _config_at(target, folder, root, configs, "accelerate")
            if config is not None:
                found.tied.append(config.path)
                launch = config.launch(root, source)
            else:
                _note_unread(found, target, folder, root, source)
        elif name == "--use_fsdp":
            offload = next((_bool(launcher_words[j + 1]) for j, w in enumerate(launcher_words[:-1])
                            if w == "--fsdp_offload_params"), None)
            orig = next((_bool(launcher_words[j + 1]) for j, w in enumerate(launcher_words[:-1])
                         if w == "--fsdp_use_orig_params"), None)
            launch = Launch(f"{source} (accelerate launch --use_fsdp)", offload, orig, None, "accelerate")
    # transformers' ``--fsdp "full_shard auto_wrap offload"`` (``--fsdp_config`` alone turns
    # nothing on: "`--fsdp_config` is useful only when `--fsdp` is specified")
    value = _option(script_words, "--fsdp")
    if value is not None and _FSDP_FLAG_VALUE.search(value):
        launch = _trainer_launch(found, value, _option(script_words, "--fsdp_config"), folder, root, source)
    # LightningCLI: ``python train.py fit --config configs/fsdp.yaml``
    lightning = _option(script_words, "--config", "-c")
    if launch is None and lightning is not None and lightning.endswith((".yaml", ".yml")):
        config = _config_at(lightning, folder, root, configs, "lightning")
        if config is not None:
            found.tied.append(config.path)
            launch = config.launch(root, source)
    return script_path, launch


def _note_unread(found: "ProjectLaunches", name: str, folder: str, root: str, source: str) -> None:
    """A config a command names that is not read as one: say why when it is too big or
    cannot be read (a missing file, or one that is no FSDP config, is no news)."""
    for base in (folder, root):
        path = os.path.normpath(os.path.join(base, name))
        if not os.path.isfile(path):
            continue
        why = found.unread.get(path)
        if why:
            found.notes.append(f"{os.path.relpath(path, root)} (named by {source}): {why}; its launch is not known")
        return


def _trainer_launch(found: "ProjectLaunches", value: str, config_name: Optional[str], folder: str, root: str,
                    source: str) -> Launch:
    """transformers' ``--fsdp`` with its ``--fsdp_config`` JSON file, read as transformers
    reads it (huggingface/transformers fd798335, ``src/transformers/training_args.py``,
    ``TrainingArguments.__post_init__``: ``json.load``, a leading ``fsdp_`` dropped from each
    key; ``offload`` in ``--fsdp`` sets ``FSDP_OFFLOAD_PARAMS``, ``use_orig_params`` defaults to
    "true", ``cpu_ram_efficient_loading`` to "false"; newer versions' ``_process_fsdp_args``
    also read ``version`` (default 2) and ``cpu_offload``).  A JSON file that cannot be read
    is a note naming it (and its line); FSDP stays on."""
    offload = "offload" in value.lower()
    where = f"{source} (--fsdp {value!r}"
    orig = version = None
    settings: List[Tuple[str, str]] = []
    if config_name:
        where += f", --fsdp_config {config_name}"
        if config_name.endswith(".json"):
            data = _json_config(found, config_name, folder, root, source)
            if data is not None:
                orig = _bool(str(data["use_orig_params"])) if "use_orig_params" in data else None
                raw_version = str(data.get("version", ""))
                version = int(raw_version) if raw_version.isdigit() else None
                if _bool(str(data.get("cpu_offload", ""))) is True:
                    offload = True
                for key in ("cpu_ram_efficient_loading", "sync_module_states", "state_dict_type"):
                    if key in data:
                        settings.append((key, str(data[key])))
    return Launch(where + ")", offload, orig, version, "", tuple(settings))


def _json_config(found: "ProjectLaunches", name: str, folder: str, root: str, source: str) -> Optional[dict]:
    """A JSON config's keys as transformers reads them (``fsdp_`` dropped), or None with a
    note when it is missing, too big, not JSON or not an object."""
    for base in (folder, root):
        path = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(path):
            break
    else:
        found.notes.append(f"{name} (named by {source}): not found; its settings are not known")
        return None
    shown = os.path.relpath(path, root)
    try:
        if os.path.getsize(path) > MAX_BYTES:
            found.notes.append(f"{shown} (named by {source}): over {MAX_BYTES // 1024} KiB, not read; "
                               "its settings are not known")
            return None
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, UnicodeDecodeError) as exc:
        found.notes.append(f"{shown} (named by {source}): cannot be read ({exc}); its settings are not known")
        return None
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        found.notes.append(f"{shown}{':' + str(line) if line else ''} (named by {source}): not valid JSON "
                           f"({getattr(exc, 'msg', exc)}); its settings are not known")
        return None
    if not isinstance(data, dict):
        found.notes.append(f"{shown} (named by {source}): not a JSON object; its settings are not known")
        return None
    return {(k[5:] if isinstance(k, str) and k.startswith("fsdp_") else k): v for k, v in data.items()}


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


def _yaml_keys(text: str):
    """(line, key path, value) of each ``key: value`` line of a block-style YAML text, read as
    data line by line (no YAML library: no tags, anchors or flow collections are looked at,
    nothing is constructed).  A list item's keys are skipped."""
    stack: List[Tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        match = _YAML_KEY.match(line)
        if not match:
            continue
        indent = len(match.group(1).expandtabs())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key, value = match.group(2), match.group(3).strip("'\"")
        stack.append((indent, key))
        yield number, tuple(k for _, k in stack), value


def read_torchtune_config(path: str, text: str) -> Optional[_Config]:
    """A torchtune recipe config (``_component_:`` entries) with a top-level ``fsdp_*`` key
    (``fsdp_cpu_offload: True``, ``fsdp_reshard_after_forward``): its distributed recipes
    shard with FSDP2 (``fully_shard``); ``dtype`` is kept for ``--show-settings``."""
    if "_component_" not in text:
        return None
    line, values = None, {}
    for number, keys, value in _yaml_keys(text):
        if len(keys) == 1:
            values[keys[0]] = value
            if keys[0].startswith("fsdp_") and line is None:
                line = number
    if line is None:
        return None
    settings = tuple((k, values[k]) for k in ("dtype", "fsdp_reshard_after_forward") if values.get(k))
    offload = _bool(values.get("fsdp_cpu_offload", ""))
    what = f"fsdp_cpu_offload: {values['fsdp_cpu_offload']}" if "fsdp_cpu_offload" in values else "fsdp_* keys"
    return _Config(path, line, offload, None, 2, "torchtune", what, settings)


def read_lightning_config(path: str, text: str) -> Optional[_Config]:
    """A LightningCLI config whose ``trainer.strategy`` is FSDP: ``strategy: fsdp`` (or
    ``fsdp_cpu_offload``), or ``class_path: ...FSDPStrategy`` with ``init_args.cpu_offload``."""
    line, offload, what = None, None, ""
    for number, keys, value in _yaml_keys(text):
        if keys == ("trainer", "strategy") and value and "fsdp" in value.lower():
            line, what = number, f"trainer.strategy: {value}"
            offload = True if "offload" in value.lower() else offload
        elif keys == ("trainer", "strategy", "class_path") and value.endswith("FSDPStrategy"):
            line, what = number, f"trainer.strategy.class_path: {value}"
        elif keys == ("trainer", "strategy", "init_args", "cpu_offload"):
            offload = _bool(value)
    if line is None:
        return None
    return _Config(path, line, offload, None, None, "lightning", what)


def _read_config(path: str, text: str) -> Optional[_Config]:
    if "distributed_type" in text:
        config = read_accelerate_config(path, text)
        if config is not None:
            return config
    if "fsdp_" in text:
        config = read_torchtune_config(path, text)
        if config is not None:
            return config
    if "trainer" in text and ("fsdp" in text or "FSDPStrategy" in text):
        return read_lightning_config(path, text)
    return None


def read_project(root: str) -> ProjectLaunches:
    """Every FSDP config (accelerate, torchtune, LightningCLI) and launch command under
    ``root`` (bounded)."""
    found = ProjectLaunches(root)
    scripts: List[str] = []
    seen = 0
    for folder, dirs, files in os.walk(root):
        depth = os.path.relpath(folder, root).count(os.sep) + (folder != root)
        dirs[:] = sorted(
            d for d in dirs
            if not d.startswith(".") and d not in SKIPPED_DIRS and depth < MAX_DEPTH
            and not os.path.isfile(os.path.join(folder, d, "pyproject.toml"))  # a project of its own
        )
        for name in sorted(files):
            if seen >= MAX_FILES:
                break
            path = os.path.join(folder, name)
            if name.endswith((".yaml", ".yml")):
                seen += 1
                text = _read(path)
                if text is None:
                    found.unread[os.path.normpath(path)] = _why_unread(path)
                    continue
                config = _read_config(path, text)
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
            result = _launch_in_command(words, os.path.dirname(path), root, found, source)
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


def _why_unread(path: str) -> str:
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return f"over {MAX_BYTES // 1024} KiB ({size // 1024} KiB), not read" if size > MAX_BYTES else "cannot be read"


class LaunchFinder:
    """The launch of each file, one project read per root per run."""

    def __init__(self) -> None:
        self._projects: Dict[str, Optional[ProjectLaunches]] = {}
        self._roots: Dict[str, Optional[str]] = {}  # folder -> its project root (one walk up per folder)
        self._noted: set = set()

    def _project(self, path: str) -> Optional[ProjectLaunches]:
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in self._roots:
            self._roots[folder] = project_root(path)
        root = self._roots[folder]
        if root is None:
            return None
        if root not in self._projects:
            self._projects[root] = read_project(root)
        return self._projects[root]

    def notes(self, path: str) -> List[str]:
        """What could not be read of the configs ``path``'s project names (each project's
        notes once per finder)."""
        project = self._project(path)
        if project is None or project.root in self._noted:
            return []
        self._noted.add(project.root)
        return list(project.notes)

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
