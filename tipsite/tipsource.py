"""A tip's source: its own code, the helpers it imports, the download, and its version.

A tip imports its helpers from :mod:`tipsite.tipkit`, in one statement in its "How this tip
measures and decides" cell::

    from tipsite.tipkit import compare_times, decide, plot_ratios, report

A reader who downloads the tip has no ``tipsite``, so the build never runs that file: it runs the
**download**, the same file with that statement replaced by the source of each helper it needs
(the ones it names and the ones those call, in :data:`tipkit.HELPERS` order). :func:`write_gallery`
writes the downloads of a gallery into a folder of their own, and sphinx-gallery executes and
publishes those: the page, the ``.py`` and the ``.ipynb`` a reader gets are the very script the
build ran.

A tip's **version** says which measurements a record of it can stand for. It has two digests:

* ``code_sha256``: the tip's own code, without its docstring, comment lines, blank lines and
  helpers (imported or inlined), so editing prose leaves it alone;
* ``helpers_sha256``: the helpers that measure and decide (:data:`tipkit.DECIDES`) that the tip
  uses, docstrings and comments left out, so a change to how results are printed or drawn
  (:data:`tipkit.PRESENTS`) leaves it alone.

The file, its download and any older copy of the tip that carried the helpers verbatim give the
same version when their code is the same.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from conf import settings
from tipsite import tipkit

HELPER_MODULE = "tipsite.tipkit"


class TipSourceError(ValueError):
    """A tip's helpers cannot be resolved; the message names the file and the problem."""


@dataclass(frozen=True)
class Kit:
    """One version of tipsite/tipkit.py: its helpers' source, and which of them decide."""

    sources: dict[str, str]  # helper name -> its source, in HELPERS order
    nodes: dict[str, ast.FunctionDef | ast.ClassDef]
    decides: tuple[str, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.sources)


def kit_from_text(text: str) -> Kit:
    """The helpers of a tipkit.py of any commit: ``HELPERS`` and ``DECIDES`` as it lists them
    (before ``DECIDES`` existed, every helper but report and the plots decided)."""
    module = ast.parse(text)
    listed: dict[str, tuple] = {}
    for node in module.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("HELPERS", "DECIDES"):
                listed[node.targets[0].id] = tuple(ast.literal_eval(node.value))
    nodes = {n.name: n for n in module.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names = listed.get("HELPERS", ())
    decides = listed.get("DECIDES", tuple(n for n in names if n not in ("report", "plot_ratios", "plot_series")))
    return Kit({n: ast.get_source_segment(text, nodes[n]) for n in names}, {n: nodes[n] for n in names}, decides)


def current_kit() -> Kit:
    return _kit_of(_kit_text())


def _kit_text() -> str:
    # read each time, parsed once per content: an edit within the clock's resolution counts
    return Path(tipkit.__file__).read_text(encoding="utf-8")


@lru_cache(maxsize=16)
def _kit_of(text: str) -> Kit:
    return kit_from_text(text)


def helper_sources() -> dict[str, str]:
    """The source of each helper in :data:`tipkit.HELPERS`, as written in tipkit.py."""
    return dict(current_kit().sources)


def _calls(node: ast.AST, kit: Kit) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & set(kit.names)


def closure(names, kit: Kit | None = None) -> list[str]:
    """``names`` and every helper they call, in :data:`tipkit.HELPERS` order."""
    kit = kit or current_kit()
    todo, found = list(names), set()
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        todo += sorted(_calls(kit.nodes[name], kit) - {name})
    return [h for h in kit.names if h in found]


@dataclass(frozen=True)
class Parsed:
    """Where a tip's helpers sit in its source."""

    imports: tuple[ast.ImportFrom, ...]  # from tipsite.tipkit import ... (top level)
    copies: tuple[ast.FunctionDef | ast.ClassDef, ...]  # helpers carried verbatim (a download, an older tip)
    docstring: tuple[int, int] | None  # first and last line of the module docstring
    used: tuple[str, ...]  # helpers the tip's own code calls, with what they call


def parse(source: str, path: Path | str = "<tip>", kit: Kit | None = None) -> Parsed:
    kit = kit or current_kit()
    try:
        module = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise TipSourceError(f"{path}: cannot be read as Python: {exc}") from None
    imports, copies, own = [], [], []
    for node in module.body:
        if isinstance(node, ast.ImportFrom) and node.module == HELPER_MODULE:
            unknown = [a.name for a in node.names if a.name not in kit.names or a.asname]
            if unknown:
                raise TipSourceError(f"{path}: line {node.lineno}: imports {', '.join(unknown)} from "
                                     f"{HELPER_MODULE}, which are not helpers a download can carry "
                                     f"(known: {', '.join(kit.names)}; no 'as')")
            imports.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in kit.names:
            copies.append(node)
        else:
            own.append(node)
    for node in ast.walk(module):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tipsite" for a in node.names) or (
                isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tipsite"
                and node not in imports):
            raise TipSourceError(f"{path}: line {node.lineno}: a tip imports project code only as "
                                 f"'from {HELPER_MODULE} import <helpers>' at the top level")
    imported = {a.name for node in imports for a in node.names}
    clash = imported & {c.name for c in copies}
    if clash:
        raise TipSourceError(f"{path}: both imports and defines {', '.join(sorted(clash))}")
    called = set().union(*(_calls(n, kit) for n in own)) if own else set()
    missing = sorted(called - imported - {c.name for c in copies})
    if imports and missing:
        raise TipSourceError(f"{path}: calls {', '.join(missing)} without importing it from {HELPER_MODULE}")
    doc = None
    first = module.body[0] if module.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        doc = (first.lineno, first.end_lineno)
    # what the download carries: the imported helpers and what they call
    used = closure(imported, kit) if imports else closure(called, kit)
    return Parsed(tuple(imports), tuple(copies), doc, tuple(used))


def inline(source: str, path: Path | str = "<tip>", kit: Kit | None = None) -> str:
    """The download: ``source`` with its helper import replaced by the helpers' source."""
    kit = kit or current_kit()
    parsed = parse(source, path, kit)
    if not parsed.imports:
        return source
    if len(parsed.imports) > 1:
        raise TipSourceError(f"{path}: import the helpers in one statement, not {len(parsed.imports)}")
    node = parsed.imports[0]
    names = closure((a.name for a in node.names), kit)
    text = "\n\n\n".join(kit.sources[n] for n in names)
    lines = source.splitlines(keepends=True)
    end = lines[node.end_lineno - 1]
    newline = "\n" if end.endswith("\n") else ""
    return "".join(lines[:node.lineno - 1]) + text + newline + "".join(lines[node.end_lineno:])


def _code_lines(source: str, skip: list[tuple[int, int]]) -> list[str]:
    out = []
    for number, line in enumerate(source.splitlines(), 1):
        if any(a <= number <= b for a, b in skip):
            continue
        text = line.rstrip()
        if text.strip() and not text.lstrip().startswith("#"):
            out.append(text)
    return out


def _digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def _function_lines(node: ast.FunctionDef | ast.ClassDef, text: str) -> list[str]:
    """A helper's code lines, its docstring, comments and blank lines left out."""
    skip = []
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        skip.append((first.lineno - node.lineno + 1, first.end_lineno - node.lineno + 1))
    return _code_lines(text, skip)


def helpers_digest(names, sources: dict[str, str] | None = None, kit: Kit | None = None) -> str:
    """The digest of the measuring and deciding helpers among ``names`` and what they call.

    ``sources`` gives a helper's text where a file carries its own copy (a download, an older
    tip); the others are read from ``kit`` (tipkit.py as it is now, unless another is given).
    """
    kit = kit or current_kit()
    lines = []
    # a file carrying its helpers (a download, an older tip) is digested as it is
    chosen = [h for h in kit.names if h in sources] if sources else closure(names, kit)
    for name in chosen:
        if name not in kit.decides:
            continue
        text = (sources or {}).get(name, kit.sources[name])
        node = ast.parse(text).body[0]
        lines += [f"# {name}", *_function_lines(node, text)]
    return _digest(lines)


def version(source: str, path: Path | str = "<tip>", kit: Kit | None = None) -> dict[str, str]:
    """``{"code_sha256", "helpers_sha256"}`` of a tip's source, its download or an older copy;
    ``kit`` is the tipkit.py the source was written against (default: today's)."""
    kit = kit or current_kit()
    parsed = parse(source, path, kit)
    skip = [(n.lineno, n.end_lineno) for n in (*parsed.imports, *parsed.copies)]
    if parsed.docstring:
        skip.append(parsed.docstring)
    copies = {n.name: ast.get_source_segment(source, n) for n in parsed.copies}
    return {"code_sha256": _digest(_code_lines(source, skip)),
            "helpers_sha256": helpers_digest(parsed.used, copies, kit)}


def file_version(path: Path | str) -> dict[str, str]:
    """:func:`version` of the tip at ``path`` against today's tipkit.py. A build asks for each
    tip's version on several pages; the text is read every time, the parse is done once."""
    return dict(_text_version(Path(path).read_text(encoding="utf-8"), str(path), _kit_text()))


@lru_cache(maxsize=1024)
def _text_version(source: str, path: str, kit_text: str) -> tuple:
    return tuple(version(source, path, _kit_of(kit_text)).items())


def write_download(path: Path | str, dest_dir: Path | str) -> Path:
    """Write the download of the tip at ``path`` into ``dest_dir`` under the tip's file name."""
    path = Path(path)
    target = Path(dest_dir) / path.name
    target.write_text(inline(path.read_text(encoding="utf-8"), path), encoding="utf-8")
    return target


# --- the downloads of a gallery --------------------------------------------------------------

def write_gallery(gallery_dir: Path | None = None, out_dir: Path | None = None) -> list[Path]:
    """Mirror ``gallery_dir`` into ``out_dir`` with every tip's helpers inlined.

    Only files whose content changes are written (sphinx-gallery's MD5 cache and Sphinx's
    timestamps see no change otherwise); files gone from the gallery are removed. Returns the
    files written. A tip whose helpers cannot be resolved stops with its file and problem named.
    """
    gallery_dir = Path(gallery_dir or settings.GALLERY_DIR)
    out_dir = Path(out_dir or settings.DOWNLOADS_DIR)
    wanted: dict[Path, str | bytes] = {}
    for path in sorted(p for p in gallery_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(gallery_dir)
        if "__pycache__" in rel.parts:
            continue
        if path.suffix == ".py":
            wanted[rel] = inline(path.read_text(encoding="utf-8"), path)
        else:
            wanted[rel] = path.read_bytes()
    written = []
    for rel, content in wanted.items():
        target = out_dir / rel
        data = content.encode("utf-8") if isinstance(content, str) else content
        if target.is_file() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(target)
        written.append(target)
    if out_dir.is_dir():
        for path in sorted(out_dir.rglob("*"), reverse=True):
            rel = path.relative_to(out_dir)
            if path.is_file() and rel not in wanted:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tipsite.tipsource", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    dl = sub.add_parser("download", help="print the download of a tip (its helpers inlined)")
    dl.add_argument("tip", type=Path)
    ver = sub.add_parser("version", help="print the digests that say which version of a tip a file is")
    ver.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "download":
            sys.stdout.write(inline(args.tip.read_text(encoding="utf-8"), args.tip))
        else:
            for path in args.files:
                v = file_version(path)
                print(f"{path}: code {v['code_sha256'][:12]} helpers {v['helpers_sha256'][:12]}")
    except (OSError, TipSourceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

