"""The checker's configuration: ``[tool.torch-tips]`` in ``pyproject.toml``, then the command line.

The section is looked for in the ``pyproject.toml`` closest to each checked path (its folder or a
parent folder; the first file that has the section wins, as ruff finds its own), or in the file
``--config`` names. Files under different configurations are checked with each one's selection,
exclusions and ignores; the settings of the whole run (``fail-on``, ``torch``, ``device``,
``site-url``) come from the configuration of the first path named. A ``pyproject.toml`` on the
way that is not valid TOML, or a section that is not a table, is an error (exit status 2). Its
paths (``exclude``, ``per-file-ignores``) are relative to that file's folder. Keys, all optional::

    [tool.torch-tips]
    select = ["PTT"]                 # code prefixes to run (default: every rule on by default)
    extend-select = ["PTT019"]       # added to the selection
    ignore = ["PTT031"]              # code prefixes never reported
    exclude = ["legacy/*"]           # files or folders not checked (globs)
    per-file-ignores = {"tests/*" = ["PTT023"]}
    fail-on = "holds"                # holds | any | never
    torch = "2.5"                    # whose verdicts (default: the installed torch; "any")
    device = "cuda"                  # cpu | cuda (default: the best device present)
    site-url = "https://example.org/tips"   # where the links point
    preview = true                   # run the preview rules too (default: false)

A prefix shorter than a full code (``PTT``, ``PTT01``) selects only the stable rules (and the
preview ones with ``preview``); a full code selects its rule even when it is in preview. The command line's
``--select``, ``--extend-select``, ``--ignore``, ``--fail-on``, ``--torch``, ``--device`` and
``--site-url`` override the file's values.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tipsite.checker.evidence import FAIL_ON
from tipsite.checker.registry import RULES, default_codes, is_stable

SECTION = "torch-tips"
KEYS = {"select", "extend-select", "ignore", "exclude", "per-file-ignores", "fail-on", "torch", "device",
        "site-url", "preview"}


class ConfigError(ValueError):
    pass


@dataclass
class Config:
    path: Path | None = None  # the pyproject.toml read, if any
    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    fail_on: str | None = None
    torch: str | None = None
    device: str | None = None
    site_url: str | None = None
    preview: bool = False  # run the preview rules too (--preview)

    @property
    def root(self) -> Path:
        return self.path.parent if self.path else Path.cwd()

    def codes(self) -> set[str]:
        """The rules that run: the selection, extended, minus the ignored ones."""
        chosen = (pick(self.select, self.preview) if self.select is not None
                  else set(RULES) if self.preview else set(default_codes()))
        chosen |= pick(self.extend_select, self.preview)
        return {c for c in chosen if not any(c.startswith(p) for p in self.ignore)}

    def ignored_in(self, path: Path) -> set[str]:
        """Code prefixes ``per-file-ignores`` ignores in ``path``."""
        rel = _relative(path, self.root)
        out: set[str] = set()
        for pattern, codes in self.per_file_ignores.items():
            if _matches(rel, pattern):
                out |= set(codes)
        return out

    def excluded(self, path: Path) -> bool:
        """Whether ``exclude`` leaves ``path`` out (globs relative to the configuration's folder)."""
        rel = _relative(path, self.root)
        return any(_matches(rel, p) for p in self.exclude)


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _matches(rel: str, pattern: str) -> bool:
    pattern = pattern.rstrip("/")
    return (fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(rel, pattern + "/*")
            or fnmatch.fnmatch(Path(rel).name, pattern))


def check_prefixes(prefixes: list[str], key: str) -> list[str]:
    out = []
    for p in prefixes:
        p = p.strip().upper()
        if not p:
            continue
        if not any(c.startswith(p) for c in RULES):
            raise ConfigError(f"{key}: {p!r} matches no rule (see --list-rules)")
        out.append(p)
    return out


def pick(prefixes: list[str], preview: bool = False) -> set[str]:
    """The codes ``prefixes`` select: a full code its rule (stable or preview), a shorter prefix
    the stable rules (and the preview ones with ``preview``), as ruff does."""
    out = set()
    for p in prefixes:
        if p in RULES:
            out.add(p)
        else:
            out |= {c for c in RULES if c.startswith(p) and (preview or is_stable(c))}
    return out


def _read_toml(path: Path) -> dict:
    try:
        if not path.is_file():
            raise ConfigError(f"{path}: not a regular file")
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def _section(data: dict, path: Path) -> dict | None:
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: [tool] must be a table")
    if SECTION not in tool:
        return None
    if not isinstance(tool[SECTION], dict):
        raise ConfigError(f"{path}: tool.{SECTION} must be a table ([tool.{SECTION}]), got {tool[SECTION]!r}")
    return tool[SECTION]


def find_pyproject(start: Path) -> Path | None:
    """The closest ``pyproject.toml`` with a ``[tool.torch-tips]`` section, from ``start`` (a
    folder, or a file's folder) up, as ruff finds its own. A pyproject.toml on the way that is
    not valid TOML is an error (its settings would be lost in silence)."""
    start = start if start.is_dir() else start.parent
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.exists():
            if _section(_read_toml(candidate), candidate) is not None:
                return candidate
    return None


def _strings(value, key: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{key} must be a list of strings")
    return value


def load(path: Path | None = None, start: Path | None = None) -> Config:
    """The configuration in ``path``, or in the closest pyproject.toml that has the section."""
    if path is None:
        path = find_pyproject((start or Path.cwd()).resolve())
        if path is None:
            return Config()
    section = _section(_read_toml(Path(path)), Path(path)) or {}
    where = f"{path} [tool.{SECTION}]"
    unknown = set(section) - KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(KEYS))})")
    cfg = Config(path=Path(path))
    if "select" in section:
        cfg.select = check_prefixes(_strings(section["select"], "select"), f"{where} select")
    cfg.extend_select = check_prefixes(_strings(section.get("extend-select", []), "extend-select"),
                                       f"{where} extend-select")
    cfg.ignore = check_prefixes(_strings(section.get("ignore", []), "ignore"), f"{where} ignore")
    cfg.exclude = _strings(section.get("exclude", []), "exclude")
    pfi = section.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(f"{where}: per-file-ignores must be a table of glob = [codes]")
    cfg.per_file_ignores = {k: check_prefixes(_strings(v, k), f"{where} per-file-ignores {k!r}")
                            for k, v in pfi.items()}
    if "preview" in section:
        if not isinstance(section["preview"], bool):
            raise ConfigError(f"{where}: preview must be true or false")
        cfg.preview = section["preview"]
    for key in ("fail-on", "torch", "device", "site-url"):
        if key in section:
            if not isinstance(section[key], str):
                raise ConfigError(f"{where}: {key} must be a string")
            setattr(cfg, key.replace("-", "_"), section[key])
    if cfg.fail_on is not None and cfg.fail_on not in FAIL_ON:
        raise ConfigError(f"{where}: fail-on must be {', '.join(FAIL_ON[:-1])} or {FAIL_ON[-1]}")
    if cfg.device is not None and cfg.device not in ("cpu", "cuda"):
        raise ConfigError(f"{where}: device must be cpu or cuda")
    return cfg
