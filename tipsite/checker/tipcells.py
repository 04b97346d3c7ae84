"""Which lines of a tip are its anti-pattern and which its recommended pattern.

The checker's tests run every rule a tip names (``sphinx_gallery_tips_rules``) on the tip itself:
each rule must flag the tip's anti-pattern and must not flag its recommended pattern. This module
finds both from the tip's source, without running it, by its cells (``# %%`` blocks):

* A cell whose heading starts with "The anti-pattern" or "The article's" holds the anti-pattern;
  one whose heading starts with "The recommended pattern", "The fix" or "The corrected" holds the
  recommended pattern. An anti-pattern heading that also says "recommended", "replacement",
  "fix" or "corrected" (the exemplar's "The anti-pattern and the recommended pattern") holds
  both.
* Inside such a cell each top-level statement (a ``def`` or ``class`` with its decorators, or a
  plain statement) is one *unit*. A marker comment gives a unit its role: the comment line right
  above it (not an earlier line of a longer comment), or a comment at the end of its first line,
  that starts with ``anti-pattern`` or
  ``Don't`` marks the anti-pattern; one that starts with ``recommended``, ``fix`` or ``Do``
  marks the recommended pattern (quotes and a leading "the" are ignored, so the article's
  ``# the "Don't" line`` counts). A marker on its own line holds for the units below it until
  the next one; a marker at the end of a line holds for that unit only.
* Without any marker, a cell that holds both gives the first ``def``/``class`` the anti-pattern
  and every later ``def``/``class`` the recommended pattern (the exemplar's shape: one function
  per pattern, the anti-pattern first), and other statements neither; a cell that holds only
  one pattern gives it all its statements.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

_CELL = re.compile(r"^# %%")
_ANTI = re.compile(r"""^(the\s+)?["'`]*(anti-pattern|don'?t|do not)\b""")
_FIX = re.compile(r"""^(the\s+)?["'`]*(recommended|fix(ed)?|do(?!n)|corrected)\b""")


@dataclass
class Patterns:
    anti: list[tuple[int, int]] = field(default_factory=list)  # (first line, last line), 1-based
    fix: list[tuple[int, int]] = field(default_factory=list)
    cells: list[tuple[str, str]] = field(default_factory=list)  # (heading, role) of pattern cells

    @staticmethod
    def _inside(line: int, spans: list[tuple[int, int]]) -> bool:
        return any(a <= line <= b for a, b in spans)

    def in_anti(self, line: int) -> bool:
        return self._inside(line, self.anti)

    def in_fix(self, line: int) -> bool:
        return self._inside(line, self.fix)


def marker(comment: str) -> str | None:
    text = comment.lstrip("#").strip().lower()
    if _ANTI.match(text):
        return "anti"
    if _FIX.match(text):
        return "fix"
    return None


def cell_role(heading: str) -> str | None:
    h = heading.strip().lower()
    if h.startswith(("the anti-pattern", "the article's", "the article’s")):
        both = any(w in h for w in ("recommended", "replacement", "fix", "corrected"))
        return "both" if both else "anti"
    if h.startswith(("the recommended pattern", "the fix", "the corrected")):
        return "fix"
    return None


def _comments(source: str) -> dict[int, str]:
    found = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                found[tok.start[0]] = tok.string
    except (tokenize.TokenError, IndentationError):
        pass
    return found


def patterns(source: str | Path) -> Patterns:
    """The anti-pattern and recommended-pattern line spans of a tip (its path or its source)."""
    if isinstance(source, Path):
        source = source.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    comments = _comments(source)
    starts = [i + 1 for i, line in enumerate(lines) if _CELL.match(line)]
    bounds = list(zip(starts, starts[1:] + [len(lines) + 1]))
    out = Patterns()
    for first, nxt in bounds:
        head_line = first + 1
        heading = lines[head_line - 1].lstrip("#").strip() if head_line <= len(lines) else ""
        role = cell_role(heading)
        if role is None:
            continue
        out.cells.append((heading, role))
        skip = {first, head_line}
        if head_line + 1 <= len(lines) and re.fullmatch(r"#\s*-+\s*", lines[head_line].strip()):
            skip.add(head_line + 1)
        units = []
        for node in tree.body:
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            if first < start < nxt:
                units.append((start, node.end_lineno, node))
        marks = []
        for start, _end, _node in units:
            lead = None
            line = start - 1  # only the comment line right above the unit: prose above it is not a marker
            if line >= 1 and line not in skip and lines[line - 1].lstrip().startswith("#"):
                lead = marker(lines[line - 1])
            trail = None
            if start in comments and not lines[start - 1].lstrip().startswith("#"):
                trail = marker(comments[start])
            marks.append((lead, trail))
        roles: list[str | None]
        if role in ("anti", "fix") and not any(a or b for a, b in marks):
            roles = [role] * len(units)
        elif any(a or b for a, b in marks):
            section = "anti" if role == "anti" else None
            roles = []
            for lead, trail in marks:
                section = lead or section
                roles.append(trail or section)
        else:  # both, unmarked: the exemplar's shape
            defs = [i for i, (_, _, n) in enumerate(units)
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
            if defs:
                roles = [None] * len(units)
                roles[defs[0]] = "anti"
                for i in defs[1:]:
                    roles[i] = "fix"
            else:
                roles = ["anti"] * len(units)
        for (start, end, _), r in zip(units, roles):
            if r == "anti":
                out.anti.append((start, end))
            elif r == "fix":
                out.fix.append((start, end))
    return out
