"""The tip contract: read and validate a tip's metadata and the RESULT it computes.

A tip is a sphinx-gallery script ``gallery/<topic>/tip_<name>.py``. Its metadata sits in
comment lines right below the docstring, one field a line, each value a Python literal::

    # sphinx_gallery_tips_claims = ["S0-5"]
    # sphinx_gallery_tips_tags = ["autograd", "inference"]
    # sphinx_gallery_tips_devices = ["cpu", "cuda"]
    # sphinx_gallery_tips_kind = "speed"
    # sphinx_gallery_tips_min_torch = "1.9"
    # sphinx_gallery_tips_takeaway = "One line for the index card."

sphinx-gallery keeps these lines out of the rendered page and notebook
(``remove_config_comments``), so readers see code, while the validator, the index and the tests
read them straight from the file without running it. By the end of its run a tip defines a
``RESULT`` dict (checked by :func:`tipsite.records.result_problems`); the build collects it.

Every problem is reported as ``<file>: <field>: <what is wrong>``.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from conf import settings

FIELD_PREFIX = "sphinx_gallery_tips_"
_FIELD_RE = re.compile(r"#\s*sphinx_gallery_tips_(\w+)\s*=\s*(.+?)\s*$")
_VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+)?$")
_CLAIM_ID_RE = re.compile(r"^S\d+-\d+$")

# field -> (required, type description, checker). Checkers live below.
REQUIRED = ("claims", "tags", "devices", "kind", "min_torch", "takeaway")
OPTIONAL = ("keywords", "docs", "related", "single_size", "statement", "rules", "errors")
# An error or warning line a tip explains, as torch prints it (search finds the tip by it).
ERROR_LINE_MAX = 600


class TipError(ValueError):
    """A tip breaks the contract. ``str(err)`` names the file and the field."""

    def __init__(self, path: Path | str, problems: list[str]):
        self.path = Path(path)
        self.problems = problems
        super().__init__("\n".join(f"{_rel(self.path)}: {p}" for p in problems))


@dataclass(frozen=True)
class Tip:
    """What the build, the index and the tests know about a tip without running it."""

    path: Path
    title: str
    claims: tuple[str, ...]
    tags: tuple[str, ...]
    devices: tuple[str, ...]
    kind: str
    min_torch: str
    takeaway: str
    keywords: tuple[str, ...] = ()
    docs: tuple[str, ...] = ()
    related: tuple[str, ...] = ()
    # Why a speed or memory tip measures at one size only (otherwise it sweeps sizes and draws them).
    single_size: str | None = None
    # The claim the verdicts judge, in one short line, for a tip that examines no seed claim.
    statement: str | None = None
    # Codes of the checker's rules this tip's evidence backs (tipsite/checker/registry.py).
    rules: tuple[str, ...] = ()
    # Error and warning lines the tip explains, each as torch prints it ("RuntimeError: ...");
    # the search indexes them, and a reader pasting such a line finds the tip.
    errors: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def name(self) -> str:
        """``tip_inference_mode`` for ``gallery/speed/tip_inference_mode.py``."""
        return self.path.stem

    @property
    def topic(self) -> str:
        return self.path.parent.name

    @property
    def docname(self) -> str:
        """The Sphinx document name of the tip's page, e.g. ``tips/speed/tip_inference_mode``."""
        return f"{settings.TIPS_OUT_DIR.name}/{self.topic}/{self.name}"


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(settings.ROOT))
    except ValueError:
        return str(path)


@cache
def vocab() -> dict[str, dict[str, str]]:
    return tomllib.loads((settings.CONF_DIR / "vocab.toml").read_text(encoding="utf-8"))


@cache
def claims_data() -> dict[str, Any]:
    return tomllib.loads((settings.CONF_DIR / "claims.toml").read_text(encoding="utf-8"))


def claims() -> dict[str, dict[str, str]]:
    """Claim id -> its row in conf/claims.toml, in article order."""
    return {c["id"]: c for c in claims_data()["claim"]}


def sources() -> dict[str, dict[str, str]]:
    """Article id (S0..S4) -> title, kind, file."""
    return {s["id"]: s for s in claims_data()["source"]}


def parse_version(text: str) -> tuple[int, ...]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``; raises ValueError on anything else."""
    core = text.split("+", 1)[0]
    if not _VERSION_RE.match(core):
        raise ValueError(f"not a version like 2.4 or 2.4.1: {text!r}")
    return tuple(int(p) for p in core.split("."))


def _title(docstring: str | None) -> str | None:
    """The reST title: first non-empty docstring line, underlined by = of at least its length."""
    if not docstring:
        return None
    lines = [ln.rstrip() for ln in docstring.strip("\n").splitlines()]
    while lines and not lines[0].strip():
        lines.pop(0)
    if len(lines) < 2:
        return None
    title, underline = lines[0].strip(), lines[1].strip()
    if not title or not re.fullmatch(r"=+", underline) or len(underline) < len(title):
        return None
    return title


def _str_list(name: str, value: Any, problems: list[str], allowed: dict | None = None,
              what: str = "", nonempty: bool = True) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.append(f"{FIELD_PREFIX}{name}: must be a list of strings, got {value!r}")
        return ()
    if nonempty and not value:
        problems.append(f"{FIELD_PREFIX}{name}: must not be empty")
    if len(set(value)) != len(value):
        problems.append(f"{FIELD_PREFIX}{name}: lists a value twice: {value!r}")
    if allowed is not None:
        for v in value:
            if v not in allowed:
                problems.append(
                    f"{FIELD_PREFIX}{name}: unknown {what} {v!r} (known: {', '.join(sorted(allowed))})"
                )
    return tuple(value)


def _metadata_comments(source: str) -> list[re.Match]:
    """The ``# sphinx_gallery_tips_<field> = <literal>`` comments: real comment lines only, never
    text inside a string that happens to look like one."""
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and tok.line.lstrip().startswith("#"):
            m = _FIELD_RE.fullmatch(tok.string.strip())
            if m:
                found.append(m)
    return found


CODE_WIDTH = 88  # what a code block shows at 1440 px without scrolling


def long_code_lines(source: str, width: int = CODE_WIDTH) -> list[tuple[int, int]]:
    """(line number, length) of code lines wider than ``width``; prose (the docstring and the
    comment block that opens each ``# %%`` cell) becomes text on the page and may be wider."""
    body_start = 1
    try:
        module = ast.parse(source)
        if module.body and isinstance(module.body[0], ast.Expr) and isinstance(
                getattr(module.body[0], "value", None), ast.Constant):
            body_start = module.body[0].end_lineno + 1
    except SyntaxError:
        return []
    found, in_text = [], False
    for number, line in enumerate(source.splitlines(), 1):
        if number < body_start:
            continue
        if line.startswith("# %%"):
            in_text = True
            continue
        if in_text and line.startswith("#"):
            continue
        in_text = False
        if len(line) > width and not line.startswith("# sphinx_gallery_"):
            found.append((number, len(line)))
    return found


_READ: dict[tuple, Tip] = {}  # (path, source, vocabulary) -> Tip: a build reads each tip once


def read_tip(path: Path | str) -> Tip:
    """Parse and validate one tip file. Raises :class:`TipError` listing every problem."""
    path = Path(path)
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TipError(path, [f"cannot be read as Python: {exc}"]) from exc
    # the path as given: the Tip carries it, so two spellings of one file stay two entries
    key = (str(path), source, id(vocab()), id(claims_data()))
    if key not in _READ:
        if len(_READ) > 512:
            _READ.clear()
        _READ[key] = _parse_tip(path, source)
    return _READ[key]


def _parse_tip(path: Path, source: str) -> Tip:
    problems: list[str] = []
    try:
        module = ast.parse(source, filename=str(path))
        comments = _metadata_comments(source)
    except (SyntaxError, tokenize.TokenError) as exc:
        raise TipError(path, [f"cannot be read as Python: {exc}"]) from exc

    title = _title(ast.get_docstring(module, clean=True))
    if title is None:
        problems.append(
            "title: the docstring must open with a title line underlined by '=' characters"
        )

    raw: dict[str, Any] = {}
    for match in comments:
        name, text = match.group(1), match.group(2)
        if name in raw:
            problems.append(f"{FIELD_PREFIX}{name}: given twice")
            continue
        try:
            raw[name] = ast.literal_eval(text)
        except (SyntaxError, ValueError):
            problems.append(f"{FIELD_PREFIX}{name}: not a Python literal: {text!r}")
            raw[name] = None
    for name in raw:
        if name not in REQUIRED + OPTIONAL:
            problems.append(
                f"{FIELD_PREFIX}{name}: unknown field (known: {', '.join(REQUIRED + OPTIONAL)})"
            )
    for name in REQUIRED:
        if name not in raw:
            problems.append(f"{FIELD_PREFIX}{name}: missing")

    v = vocab()
    known_claims = claims()
    values: dict[str, Any] = {}
    if "claims" in raw:
        ids = _str_list("claims", raw["claims"], problems, nonempty=False)
        for cid in ids:
            if cid not in known_claims:
                shape = "" if _CLAIM_ID_RE.match(cid) else " (ids look like S0-5)"
                problems.append(f"{FIELD_PREFIX}claims: unknown claim id {cid!r}{shape}")
        values["claims"] = ids
    if "tags" in raw:
        values["tags"] = _str_list("tags", raw["tags"], problems, v["tags"], "tag")
    if "devices" in raw:
        values["devices"] = _str_list("devices", raw["devices"], problems, v["devices"], "device")
    if "kind" in raw:
        if raw["kind"] not in v["kinds"]:
            problems.append(
                f"{FIELD_PREFIX}kind: unknown kind {raw['kind']!r} (known: {', '.join(v['kinds'])})"
            )
        values["kind"] = raw["kind"]
    if "min_torch" in raw:
        if not isinstance(raw["min_torch"], str):
            problems.append(f"{FIELD_PREFIX}min_torch: must be a string like \"2.4\", got {raw['min_torch']!r}")
        else:
            try:
                parse_version(raw["min_torch"])
            except ValueError as exc:
                problems.append(f"{FIELD_PREFIX}min_torch: bad version string: {exc}")
        values["min_torch"] = raw["min_torch"]
    if "takeaway" in raw:
        t = raw["takeaway"]
        if not isinstance(t, str) or not t.strip() or "\n" in t or len(t) > 160:
            problems.append(f"{FIELD_PREFIX}takeaway: must be one non-empty line of at most 160 characters")
        values["takeaway"] = t
    for name in ("keywords", "docs", "related"):
        if name in raw:
            values[name] = _str_list(name, raw[name], problems, nonempty=False)
    if "rules" in raw:
        values["rules"] = _str_list("rules", raw["rules"], problems, nonempty=False)
        problems += rule_problems(path.stem, values["rules"])
    if "errors" in raw:
        values["errors"] = _str_list("errors", raw["errors"], problems, nonempty=False)
        for line in values["errors"]:
            if not line.strip() or "\n" in line or len(line) > ERROR_LINE_MAX:
                problems.append(f"{FIELD_PREFIX}errors: each is one line of at most {ERROR_LINE_MAX} "
                                f"characters, as torch prints it: {line[:60]!r}")
            elif not re.match(r"^([\w.]*(Error|Warning|Exception)\b|\w+ error:)", line):
                problems.append(f"{FIELD_PREFIX}errors: {line[:60]!r} does not start with the "
                                "exception or warning class torch prints (\"RuntimeError: ...\")")
    if "statement" in raw:
        st = raw["statement"]
        if not isinstance(st, str) or not st.strip() or "\n" in st or len(st) > 200:
            problems.append(f"{FIELD_PREFIX}statement: must be the judged claim in one line of at "
                            "most 200 characters")
        values["statement"] = st
    for url in values.get("docs", ()):
        if not re.fullmatch(r"https://[\w.-]+(/[\w.~%+:@!$&'()*,;=/-]*)?(#[\w.~%+-]*)?", url):
            problems.append(f"{FIELD_PREFIX}docs: {url!r} is not a plain https:// address")
    if "single_size" in raw:
        why = raw["single_size"]
        if not isinstance(why, str) or not why.strip() or "\n" in why or len(why) > 300:
            problems.append(f"{FIELD_PREFIX}single_size: must say in one line (at most 300 "
                            "characters) why the tip measures at one size only")
        values["single_size"] = why

    if path.parent.name not in v["topics"]:
        problems.append(
            f"topic folder: {path.parent.name!r} is not a topic (known: {', '.join(v['topics'])})"
        )
    if not path.name.startswith("tip_"):
        problems.append("file name: tips are named tip_<what_it_shows>.py")
    lines = source.splitlines()
    for i in range(len(lines) - 1):
        head, under = lines[i].strip(), lines[i + 1].strip()
        if (head.startswith("# ") and re.fullmatch(r"# [-=~^]{3,}", under)
                and not re.fullmatch(r"# [-=~^]{3,}", head) and len(under) < len(head)):
            problems.append(f"line {i + 2}: the underline of the cell heading {head[2:]!r} is shorter "
                            "than the heading (Sphinx stops on it)")
    for number, length in long_code_lines(source):
        problems.append(f"line {number}: code lines are at most {CODE_WIDTH} characters ({length} "
                        "here): a longer one scrolls sideways on the page")
    if "RESULT" not in source:
        problems.append("RESULT: the tip never defines the RESULT dict the build collects")

    if problems:
        raise TipError(path, problems)
    return Tip(path=path, title=title, **values)


def rule_problems(tip_name: str, codes: tuple[str, ...]) -> list[str]:
    """A tip names only rules that exist and whose findings quote this tip's verdict."""
    from tipsite.checker.registry import RULES  # pure data: no libcst needed

    problems = []
    for code in codes:
        rule = RULES.get(code)
        if rule is None:
            problems.append(f"{FIELD_PREFIX}rules: unknown rule {code!r} (known: {', '.join(sorted(RULES))})")
        elif rule.tip != tip_name:
            problems.append(f"{FIELD_PREFIX}rules: {code} quotes {rule.tip}'s verdict, not this tip's "
                            "(tipsite/checker/registry.py)")
    return problems


def tip_files(gallery_dir: Path | None = None) -> list[Path]:
    """Every tip file under the gallery, sorted."""
    gallery_dir = gallery_dir or settings.GALLERY_DIR
    return sorted(gallery_dir.glob(f"*/{settings.TIP_GLOB}"))


def read_all(gallery_dir: Path | None = None) -> list[Tip]:
    """Read every tip; raise one :class:`TipError`-style ValueError listing all problems."""
    tips, errors = [], []
    for path in tip_files(gallery_dir):
        try:
            tips.append(read_tip(path))
        except TipError as exc:
            errors.append(str(exc))
    seen: dict[str, Path] = {}
    for tip in tips:
        if tip.name in seen:
            errors.append(f"{_rel(tip.path)}: file name: {tip.name} also exists as {_rel(seen[tip.name])}")
        seen[tip.name] = tip.path
    if errors:
        raise ValueError("tip metadata is invalid:\n" + "\n".join(errors))
    return tips
