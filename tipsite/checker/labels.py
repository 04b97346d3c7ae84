"""The checker's precision on real code: hand labels of its findings on pinned public codebases.

The data lives in ``tests/checker_data/``:

* ``labels.json``: the codebases (repository, commit, files, lines, licence), the configurations
  the checker ran with (``--torch 2.13 --device cuda``, ...), every finding of those runs with its
  label (``useful``: a maintainer would want to change the code after reading the finding and
  its evidence; ``not applicable``: the pattern is there but the advice does not apply to this
  code; ``wrong``: the finding misreads the code, or its advice would break it) and why; and the
  ``regressions``: findings an earlier checker reported on the same code, labelled wrong or not
  applicable, which must stay gone; and the ``lost`` ones: findings labelled useful that the
  current rules, run on the checkout amid its project, no longer make, each with why
  (``lost_because``): the project's own torch requirement, under which the advice cannot apply,
  or a change of the rule (a recall loss). They are a record, counted on the docs page, not a
  precision row.
* ``excerpts/<owner>+<name>/<path>.txt``: for each file with a labelled finding, the lines the
  findings need (and the lines that keep the regressions away), at their line numbers in the
  file, with the repository, commit and path. Not whole files: :func:`minimize` keeps only the
  statements without which the checker's findings on the file change.
* ``excerpts/<owner>+<name>/project.json``: what the rules read from the codebase's project
  around those files (the torch lines of its requirement files, pyproject.toml, setup.py,
  conda env*.yml, install*.sh and READMEs, at their relative paths, and the few lines of its
  other Python files that the rules read as project facts: :func:`_package_facts`), so that the
  excerpts are checked amid them as a real run checks the files (:func:`placed`).

The tests run the checker on every excerpt in every configuration: it must give exactly the
labelled findings and none of the regressions, and the labels must meet the targets (at least
90% useful, none wrong). ``docs/reference/checker.rst`` publishes :func:`render_rst`.

Commands (in the repository; ``CORPUS`` holds one folder per codebase, ``owner+name``, checked
out at the commit ``labels.json`` pins)::

    python -m tipsite.checker.labels run CORPUS        # findings not labelled, labels not found
    python -m tipsite.checker.labels excerpts CORPUS   # rewrite the excerpts from the checkouts
    python -m tipsite.checker.labels excerpts --projects CORPUS  # only what the rules read
                                                       # from the projects (project.json)
    python -m tipsite.checker.labels table [--write]   # the table (--write: into the docs page)
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tipsite.checker.registry import RULES, STATUS_PATH, is_stable

ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = ROOT / "tests" / "checker_data"
LABELS = DATA_DIR / "labels.json"  # the tuning set: the codebases the rules were written against
HELDOUT = DATA_DIR / "heldout.json"  # the held-out set: labelled after the rules were frozen
STABLE_MIN_FINDINGS, STABLE_MIN_USEFUL = 5, 0.9
EXCERPTS = DATA_DIR / "excerpts"
DOCS_PAGE = ROOT / "docs" / "reference" / "checker.rst"
KINDS = ("useful", "not applicable", "wrong")
BEGIN, END = ".. precision-table-begin", ".. precision-table-end"
README = ROOT / "README.md"
README_BEGIN, README_END = "<!-- precision-table -->", "<!-- /precision-table -->"
RULES_BEGIN, RULES_END = ".. rules-table-begin", ".. rules-table-end"
HELD_BEGIN, HELD_END = ".. heldout-table-begin", ".. heldout-table-end"
README_HELD_BEGIN, README_HELD_END = "<!-- heldout-table -->", "<!-- /heldout-table -->"
NOT_YET = ("Not yet labelled. The held-out codebases are labelled after the rules are frozen, by "
           "someone who did not write them, in ``tests/checker_data/heldout.json``; this table is "
           "generated from that file, and until it exists every rule's status comes from the tuning set.")


@dataclass
class Labels:
    corpora: list[dict] = field(default_factory=list)
    configurations: list[dict] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)
    regressions: list[dict] = field(default_factory=list)
    misses: list[dict] = field(default_factory=list)  # what a labeller saw and no rule reported
    lost: list[dict] = field(default_factory=list)  # useful findings the rules no longer make

    def config(self, name: str) -> dict:
        return next(c for c in self.configurations if c["name"] == name)


def load(path: Path = LABELS) -> Labels:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    out = Labels(**{k: data.get(k, []) for k in ("corpora", "configurations", "findings", "regressions",
                                                 "misses", "lost")})
    for f in out.findings + out.regressions:
        if f["label"] not in KINDS:
            raise ValueError(f"{f['repo']} {f['path']}:{f['line']} {f['code']}: unknown label {f['label']!r}")
    return out


def dump(labels: Labels, path: Path = LABELS) -> None:
    key = lambda f: (f["repo"], f["path"], f["line"], f["code"])  # noqa: E731
    data = {"corpora": labels.corpora, "configurations": labels.configurations,
            "findings": sorted(labels.findings, key=key), "regressions": sorted(labels.regressions, key=key)}
    if labels.misses:
        data["misses"] = labels.misses
    if labels.lost:
        data["lost"] = sorted(labels.lost, key=key)
    Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


# --- excerpts ----------------------------------------------------------------------------------------

def excerpt_path(repo: str, path: str) -> Path:
    return EXCERPTS / repo.replace("/", "+") / (path + ".txt")


def write_excerpt(repo: str, commit: str, path: str, licence: str, text: str, keep: set[int]) -> Path:
    lines = text.splitlines()
    width = len(str(len(lines)))
    out = [f"# {repo}@{commit} {path} ({licence}): the lines the labelled findings need, at their "
           "line numbers"]
    out += [f"{n:>{width}}|{lines[n - 1]}" for n in sorted(keep) if lines[n - 1].strip()]
    target = excerpt_path(repo, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(out) + "\n", encoding="utf-8")
    return target


def read_excerpt(repo: str, path: str) -> str:
    """The excerpt as source: each kept line at its line number, blank lines elsewhere."""
    kept: dict[int, str] = {}
    for line in excerpt_path(repo, path).read_text(encoding="utf-8").splitlines():
        m = re.match(r"\s*(\d+)\|(.*)$", line)
        if m:
            kept[int(m.group(1))] = m.group(2)
    last = max(kept) if kept else 0
    return "\n".join(kept.get(n, "") for n in range(1, last + 1)) + "\n"


# --- the project files the rules read (torch requirements), carried beside the excerpts ---------------

PROJECT = "project.json"  # in each codebase's excerpt folder: {relative path: the lines kept}
GIT = ".git"  # a key of project.json: the checkout had a .git folder at its root (a project's root)
_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg")  # a project's root (as the engine reads it)


def _project_names(name: str) -> bool:
    """A file the engine reads for the project's torch: requirement files, pyproject.toml,
    setup.py/cfg, conda env*.yml, install*.sh, cog.yaml, READMEs."""
    from tipsite.checker import engine as E

    return (name in E._REQ_FILES or name in E._READMES or bool(E._PIN_FILE.search(name))
            or bool(E._INSTALL_DOC.match(name)) or bool(E._DOCKERFILE.match(name))
            or (name.startswith("requirements") and name.endswith(".txt")))


_EXTENSION_BUILD = re.compile(r"cpp_extension|install_requires")  # (see engine._is_root)
_DOCKER_FROM_ARG = re.compile(r"pytorch/pytorch:\$")  # (see engine._docker_args)


def torch_lines(text: str) -> str:
    """The lines of a project file that name torch the ways the engine reads (a requirement,
    a pin, a companion's pin, a README's release or "newer versions"; a setup.py's build of a
    torch extension and its install_requires, which make it a root or not; a Dockerfile's
    pytorch/pytorch image named by a build argument, with its ARG lines), at no other line."""
    from tipsite.checker import engine as E

    keep: set[int] = set()
    extension = (_EXTENSION_BUILD,) if "cpp_extension" in text else ()
    if "pytorch/pytorch:$" in text:  # FROM pytorch/pytorch:${PYTORCH}-...: its ARG lines
        extension += (_DOCKER_FROM_ARG, E._DOCKER_ARG)
    for pattern in (E._TORCH_REQ, E._TORCH_MIN, E._TORCH_PROSE, E._TORCH_PIN, E._TORCH_OPEN,
                    E._TORCH_NAMED, E._NEWER_TORCH, E._COMPANION_PIN, E._TORCH_IMAGE, E._TORCH_CEIL, E._TORCH_BULLET,
                    E._TORCH_LEAST, E._TORCH_OR_LATER, *extension):
        for m in pattern.finditer(text):
            first = text.count("\n", 0, m.start())
            keep |= set(range(first, first + text.count("\n", m.start(), m.end()) + 1))
    lines = text.splitlines()
    return "".join(lines[i] + "\n" for i in sorted(keep) if i < len(lines))


def project_of(base: Path, paths: list[str]) -> dict[str, str]:
    """For the files ``paths`` of the checkout ``base``: each project file the engine would read
    from their folders up to the project's root (a folder with pyproject.toml, setup.py,
    setup.cfg or .git, but not a setup.py that only builds a torch extension inside a package,
    whose package's __init__.py is kept; or the checkout's own folder), the install documents of their docs
    folders (docs/, doc/, readme/) and the pin files of their install folders (scripts/,
    docker/, ...) among them, reduced to its torch lines; a root's
    marker file is kept even with none (it ends the engine's walk); in a checkout with no
    marker, its licence files (empty: PTT037 roots such a checkout at its highest licensed
    folder); and ``GIT`` where the checkout has a .git folder."""
    from tipsite.checker import engine as E

    out: dict[str, str] = {}
    for path in paths:
        folder = (base / path).parent
        while True:
            names = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
            for name in sorted(names):
                file = folder / name
                if not file.is_file() or not (_project_names(name) or name in _MARKERS):
                    continue
                rel = file.relative_to(base).as_posix()
                if rel not in out and file.stat().st_size <= 1_000_000:
                    out[rel] = torch_lines(file.read_text(encoding="utf-8", errors="replace"))
                    if name == "setup.py" and E._extension_build(str(file)) and (folder.parent / "__init__.py").is_file():
                        # a vendored extension's build in a package is no root (engine._is_root)
                        out.setdefault((folder.parent / "__init__.py").relative_to(base).as_posix(), "")
            for name, text in E._req_dir_texts(str(folder), names):  # requirements/requirements.txt
                rel = (folder / E._REQ_DIR / name).relative_to(base).as_posix()
                if rel not in out:
                    out[rel] = torch_lines(text)
            for sub, name, text in E.install_texts(str(folder), names):  # scripts/install.bat
                rel = (Path(sub) / name).relative_to(base).as_posix()
                if rel not in out:
                    out[rel] = torch_lines(text)
            for docs in E.doc_folders(str(folder), names):  # readme/INSTALL.md, docs/install.rst
                for name, text in E._small_texts(docs, E._listing(docs), E._INSTALL_DOC.match):
                    rel = (Path(docs) / name).relative_to(base).as_posix()
                    if rel not in out:
                        out[rel] = torch_lines(text)
            if E._is_root(str(folder), names):  # (not a vendored extension's setup.py)
                break
            if folder == base:  # no marker: PTT037 roots at the highest licensed folder
                for licensed in (base / path).parents:
                    out.update({(licensed / name).relative_to(base).as_posix(): "" for name in E._LICENSES
                                if (licensed / name).is_file()})
                    if licensed == base:
                        break
                break
            folder = folder.parent
    if (base / ".git").exists():
        out[GIT] = ""
    for rel, text in (*_package_facts(base, paths).items(), *_proof_of_torch(base, paths).items()):
        out[rel] = _merged(out[rel], text) if out.get(rel) else text
    return {k: v for k, v in sorted(out.items())
            if v or k == GIT or k.rsplit("/", 1)[-1] in (*_MARKERS, *E._LICENSES, "__init__.py")}


def _package_facts(base: Path, paths: list[str]) -> dict[str, str]:
    """The facts the engine reads from a file's package and project beyond its torch
    requirement, as the lines that give them: an ``__init__.py`` above the file that sets
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD (PTT001; the ``__init__.py`` files between are kept, empty,
    as the engine walks up while the folders are a package), a folder of Python files that
    loads state dicts and trains nowhere (PTT037: their ``load_state_dict(`` lines), and each
    helper's lines below (PTT004, PTT012, PTT013, PTT020/PTT021, PTT023, PTT030, PTT031, PTT032,
    PTT035, PTT037; PTT019's file that turns gradients back on, PTT037's that downloads released
    weights). Two facts read from one file are merged (:func:`_merged`)."""
    from tipsite.checker import engine as E

    out: dict[str, str] = {}

    def add(rel: str, text: str) -> None:
        out[rel] = _merged(out[rel], text) if out.get(rel) else text

    for path in paths:
        folder, chain = (base / path).parent, []
        while folder != base.parent and (folder / "__init__.py").is_file():
            init = folder / "__init__.py"
            chain.append(init.relative_to(base).as_posix())
            text = init.read_text(encoding="utf-8", errors="replace")
            if E._sets_force_unsafe(text):
                for rel in chain[:-1]:
                    out.setdefault(rel, "")
                add(chain[-1], "".join(line + "\n" for line in text.splitlines() if E._FORCE_UNSAFE in line))
                break
            folder = folder.parent
        file = base / path
        text = file.read_text(encoding="utf-8", errors="replace")
        for rel, lines in (*_grad_free_helpers(base, file, text), *_complex_maker(base, file, text),
                           *_module_reader(base, file, text), *_reduced_maker(base, file, text),
                           *_module_bases(base, file, text), *_twin_models(base, file, text),
                           *_graph_free_getters(base, file, text), *_part_evidence(base, file, text),
                           *_second_order_adapters(base, file, text), *_numpy_collates(base, file, text),
                           *_batchnorm_freezer(base, file, text), *_weight_downloader(base, file, text),
                           *_grad_reenabler(base, file, text), *_release_docs(base, file, text),
                           *_collective_helpers(base, file, text), *_dict_makers(base, file, text),
                           *_loaded_networks(base, file, text), *_number_returns(base, file, text)):
            add(rel, "".join(lines))
        folder = (base / path).parent
        if E._folder_serves_checkpoints(str(folder)):
            for file in sorted(folder.glob("*.py")):
                if not file.is_file():  # a folder named like a Python file (fastMRI has one)
                    continue
                text = file.read_text(encoding="utf-8", errors="replace")
                kept = "".join(line + "\n" for line in text.splitlines() if "load_state_dict(" in line)
                if kept:
                    add(file.relative_to(base).as_posix(), kept)
    return out


def _blocks(text: str) -> list[tuple[tuple[str, str], str, list[str] | None]]:
    """The top-level statements of ``text`` as (key, lines, members): a class is keyed by its
    name, with its header's lines and its members' lines; an import or other statement by its
    lines. Raises SyntaxError where the text is not Python alone (lines cut from a function)."""
    lines = text.splitlines(keepends=True)
    out: list[tuple[tuple[str, str], str, list[str] | None]] = []

    def span(n: ast.stmt) -> tuple[int, int]:
        return min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])]), n.end_lineno

    for n in ast.parse(text).body:
        first, last = span(n)
        if isinstance(n, ast.ClassDef):
            if n.body[0].lineno == n.lineno:
                raise SyntaxError("a class on one line")
            members = ["".join(lines[a - 1:b]) for a, b in map(span, n.body)]
            out.append((("class", n.name), "".join(lines[first - 1:span(n.body[0])[0] - 1]), members))
        else:
            kind = "import" if isinstance(n, (ast.Import, ast.ImportFrom)) else "code"
            out.append(((kind, "".join(lines[first - 1:last])), "".join(lines[first - 1:last]), None))
    return out


def _merged(old: str, new: str) -> str:
    """Two facts' lines of one file as one text: where both are Python, their imports first,
    then their statements, a class once with the members of both (its ``pass`` dropped where it
    has another); else (lines cut from their functions) the one that holds every line of the
    other, or the old lines and the new ones not among them, in that order."""
    old, new = (t if t.endswith("\n") else t + "\n" for t in (old, new))
    try:
        blocks = _blocks(old) + _blocks(new)
    except (SyntaxError, ValueError):
        have, adding = old.splitlines(keepends=True), new.splitlines(keepends=True)
        if all(line in adding for line in have):
            return new  # a def that holds the lines: cutting them out of it would break it
        if all(line in have for line in adding):
            return old
        return old + "".join(line for line in adding if line not in have)
    merged: dict[tuple[str, str], list] = {}
    for key, head, members in blocks:
        if key not in merged:
            merged[key] = [head, list(members) if members is not None else None]
        elif members is not None:
            merged[key][1] += [m for m in members if m not in merged[key][1]]
    text = ""
    for key in sorted(merged, key=lambda k: k[0] != "import"):  # stable: the imports first
        head, members = merged[key]
        if members is not None:
            head += "".join([m for m in members if m.strip() != "pass"] or members[:1])
        text += head
    return text


def _twin_models(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT037: the files of the project, named like ``file``, that define a class of it which
    names BatchNorm (a copy of the same model, the engine's _twin_classes): each such class's
    header with the first line of its body that names BatchNorm and stands alone."""
    from tipsite.checker import engine as E

    if "BatchNorm" not in text or "Conv" not in text:
        return []
    twins = E._twin_classes(str(file), text)
    if not twins:
        return []
    root = E._project_root(str(file.parent))
    out = []
    for where in sorted({f for name in twins for f in E._tree_scan(root).norm_classes.get(name, ())}):
        other = Path(where)
        if other.resolve() == file.resolve() or other.name != file.name:
            continue
        source = other.read_text(encoding="utf-8", errors="replace")
        lines = source.splitlines()
        kept = []
        for node in ast.parse(source).body:
            if not (isinstance(node, ast.ClassDef) and node.name in twins):
                continue
            for i in range(node.lineno, node.end_lineno):
                line = lines[i].strip().rstrip(",")
                if "BatchNorm" in line:
                    try:
                        ast.parse(line)
                    except SyntaxError:
                        continue
                    kept += [lines[node.lineno - 1].strip() + "\n", f"    {line}\n"]
                    break
        if kept:
            out.append((other.relative_to(base).as_posix(), kept))
    return out


def _proof_of_torch(base: Path, paths: list[str]) -> dict[str, str]:
    """Where the project's own code already needs a newer torch than its declared floor (an
    advised API it uses unguarded: the engine's proved_torch), the one statement that shows it,
    first in the project's walk, dedented under the file's imports of torch (``import torch as
    pt``; ``import torch`` where it has none at the top): the rules read it as the real
    run does (their advice is not silenced by that stale floor)."""
    from tipsite.checker import engine as E

    out: dict[str, str] = {}
    for path in paths:
        file = base / path
        folder = E._file_folder(str(file))
        if folder is None:
            continue
        root = E._project_root(folder)
        proved, floor = E._tree_proves(root), E.declared_torch(str(file))
        if proved is None or floor is None or floor >= proved:
            continue
        for where, names in E._project_code(root):
            for name in sorted(names):
                other = Path(where) / name
                text = other.read_text(encoding="utf-8", errors="replace")
                if E.proves_torch(text) != proved:
                    continue
                tree = ast.parse(text)
                # the file's own imports of torch (import torch as pt): its statements name torch so
                imports = "".join(ast.get_source_segment(text, n) + "\n" for n in tree.body
                                  if isinstance(n, ast.Import)
                                  and any(a.name.split(".")[0] == "torch" for a in n.names)) or "import torch\n"
                stmts = sorted((n for n in ast.walk(tree) if isinstance(n, ast.stmt)),
                               key=lambda n: (n.end_lineno - n.lineno, n.lineno))
                for stmt in stmts:
                    candidate = imports + textwrap.dedent(ast.get_source_segment(text, stmt, padded=True)) + "\n"
                    if E.proves_torch(candidate) == proved:
                        out[other.relative_to(base).as_posix()] = candidate
                        return out
    return out


def _lines_of(file: Path, nodes: list[ast.AST], headers: tuple = ()) -> list[str]:
    """The lines of ``nodes`` in ``file`` (decorators included; of a class or def in
    ``headers``, its header only), in the file's order."""
    lines = file.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    keep: set[int] = set()
    for n in nodes:
        first = min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])])
        last = n.body[0].lineno - 1 if n in headers else n.end_lineno
        keep |= set(range(first, max(first, last) + 1))
    return [lines[i - 1] if lines[i - 1].endswith("\n") else lines[i - 1] + "\n" for i in sorted(keep)]


def _grad_free_helpers(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT023: the project's own helpers the file calls in a ``with`` (``from pkg.utils import
    inference_context``) that return ``torch.no_grad()``/``inference_mode()``: their defs."""
    from tipsite.checker import engine as E

    wanted = {m.group(1) for m in E._WITH_CALL.finditer(text)}
    if not wanted:
        return []
    out = []
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for a in node.names:
                if (a.asname or a.name) in wanted:
                    target = E._project_module_file(str(file.parent), node.module)
                    if target and E._defines_grad_free(target, a.name):
                        defs = [n for n in ast.parse(Path(target).read_text(encoding="utf-8")).body
                                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == a.name]
                        out.append((Path(target).relative_to(base).as_posix(), _lines_of(Path(target), defs)))
    return out


def _reduced_precision_line(text: str) -> str | None:
    from tipsite.checker import engine as E

    return next((line + "\n" for line in text.splitlines() if E._in_code(E._REDUCED, line)), None)


def _reduced_maker(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT032: where the file computes in full precision but its project, read as the engine
    reads it (``_tree_reduced``), computes in reduced precision somewhere, the first line that
    shows it, in the first file of the walk that has one."""
    from tipsite.checker import engine as E

    if "Linear" not in text or E._in_code(E._REDUCED, text):
        return []
    folder = E._file_folder(str(file))
    root = E._project_root(folder) if folder is not None else None
    if root is None or not E._tree_reduced(root):
        return []
    for where, names in E._precision_files(root):
        for name, t in E._small_texts(where, names, lambda n: True):
            if E._in_code(E._REDUCED, t) and (line := _reduced_precision_line(t)) is not None:
                return [((Path(where) / name).relative_to(base).as_posix(), [line])]
    return []


def _module_bases(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT030: where a class of the file derives from an nn.Module only through classes of other
    project files (the engine follows the imports: ``nn_module_classes``), each file on that
    chain reduced to its top-level imports and the chain's class headers (``class B(A): pass``)."""
    from tipsite.checker import engine as E

    if "class " not in text:
        return []
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    if E.nn_module_classes(tree, str(file)) <= E.nn_module_classes(tree, None):
        return []
    classes, imports = E._classes_of(tree)
    kept: dict[str, set[str]] = {}
    folder = str(file.parent.resolve())
    for name in E.nn_module_classes(tree, str(file)) - E.nn_module_classes(tree, None):
        seen = {(folder, name)}  # the engine's own walk: the classes it stepped through, by file
        any(E._is_nn_module(b, folder, classes, imports, 0, seen) for b in classes[name])
        for where, cls in seen:
            if os.path.isfile(where):  # an imported class's file (a folder: the same file's class)
                kept.setdefault(where, set()).add(cls)
    out = []
    for target, names in sorted(kept.items()):
        source = Path(target).read_text(encoding="utf-8", errors="replace")
        body = ast.parse(source).body
        chain = [n for n in body if isinstance(n, ast.ClassDef) and n.name in names]
        wanted = set(names) | {ast.unparse(b).partition(".")[0] for c in chain for b in c.bases}
        lines = []
        for node in body:  # the imports that bind a name the chain needs (a base, a re-export)
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                bound = [a for a in node.names if (a.asname or a.name).partition(".")[0] in wanted]
                if bound:
                    lines.append(ast.unparse(type(node)(**{**node.__dict__, "names": bound})) + "\n")
            elif node in chain:
                bases = ", ".join(ast.unparse(b) for b in node.bases)
                lines.append(f"class {node.name}({bases}):\n    pass\n")
        out.append((Path(target).relative_to(base).as_posix(), lines))
    return out


def _module_reader(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT004: where the file saves a whole module and another file of its part of the project
    reads whole modules back on purpose (the engine's ``_modules_read_back``), the first such
    file's smallest function that does (or, failing one, the file's statements that do)."""
    from tipsite.checker import engine as E

    if "save(" not in text:
        return []
    for reader in E._readers_beside(str(file)):
        source = Path(reader).read_text(encoding="utf-8", errors="replace")
        tree = ast.parse(source)
        defs = sorted((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
                      key=lambda n: n.end_lineno - n.lineno)
        for d in defs:
            if E._loads_whole_module("import torch\n" + textwrap.dedent(ast.get_source_segment(source, d, padded=True))):
                kept = textwrap.dedent("".join(_lines_of(Path(reader), [d])))  # a method: at the top level
                return [(Path(reader).relative_to(base).as_posix(), ["import torch\n", *kept.splitlines(keepends=True)])]
        return [(Path(reader).relative_to(base).as_posix(), source.splitlines(keepends=True))]
    return []


def _complex_maker(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT031: where the file is silent because another file of its project creates complex
    parameters, the first such file's statements that do, with their class and def headers."""
    from tipsite.checker import engine as E

    if "Adam" not in text or E._makes_complex_params(text) or not E._complex_params(str(file), text):
        return []
    for folder, names in E._project_code(E._project_root(str(file.parent))):
        for name in sorted(names):
            other = Path(folder) / name
            if other == file:
                continue
            source = other.read_text(encoding="utf-8", errors="replace")
            if not E._makes_complex_params(source):
                continue
            tree = ast.parse(source)
            for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
                for init in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"):
                    for stmt in init.body:
                        if E._makes_complex_params(f"class C:\n    def __init__(self):\n        {ast.unparse(stmt)}\n"):
                            return [(other.relative_to(base).as_posix(),
                                     _lines_of(other, [cls, init, stmt], headers=(cls, init)))]
    return []


def _first_line(source: str, found) -> str | None:
    """The first line of ``source`` of which ``found`` holds (a line read alone, as the
    engine's line-wise searches read it)."""
    return next((line + "\n" for line in source.splitlines() if found(line)), None)


def _first_lines(source: str, *tests) -> list[str]:
    """The first line of ``source`` that each of ``tests`` holds of (:func:`_first_line`), each
    line once, in the order of the tests."""
    return list(dict.fromkeys(_first_line(source, found) for found in tests))


def _name_line(source: str, name: str) -> str | None:
    """The first line of ``source`` where ``name`` is a name of its code (not a word of a
    comment or a docstring); None where it is none or the source does not tokenize."""
    import io
    import tokenize

    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.NAME and tok.string == name:
                return source.splitlines()[tok.start[0] - 1] + "\n"
    except (tokenize.TokenError, SyntaxError):
        return None
    return None


def _def_lines(file: Path, name: str, inner=None) -> list[str] | None:
    """The def ``name`` of ``file`` (at the top level, or a method of a top-level class: then
    with its class's header) as its lines; with ``inner`` (a test of a node), only the def's
    header and the innermost statement holding such a node, with the headers of the statements
    around it, where that text still gives what the whole def gives (else the whole def)."""
    source = file.read_text(encoding="utf-8", errors="replace")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for top in tree.body:
        owner = top if isinstance(top, ast.ClassDef) else None
        for d in (top.body if owner else [top]):
            if not (isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) and d.name == name):
                continue
            body = d.body[1:] if len(d.body) > 1 and ast.get_docstring(d) is not None else d.body
            whole = _lines_of(file, [owner, d, *body] if owner else [d, *body],  # no docstring
                              headers=(owner, d) if owner else (d,))
            if inner is None:
                return whole
            chain: list[ast.stmt] = []

            def find(node: ast.AST, around: list[ast.stmt], chain: list[ast.stmt] = chain) -> bool:
                for child in ast.iter_child_nodes(node):
                    here = [*around, child] if isinstance(child, ast.stmt) else around
                    if inner(child):
                        chain.extend(here)
                        return True
                    if find(child, here):
                        return True
                return False

            if not find(d, []):
                return whole
            heads = [owner, d, *chain[:-1]] if owner else [d, *chain[:-1]]
            cut = _lines_of(file, [*heads, chain[-1]], headers=tuple(heads))
            try:
                ast.parse(textwrap.dedent("".join(cut)))
            except SyntaxError:
                return whole
            return cut
    return None


def _project_defs(file: Path, names: set[str], defines) -> list[tuple[Path, str]]:
    """(the project file, the name) for each file of ``file``'s project whose text ``defines``
    the name: other files before the file itself, those that share the most folders with the
    file first, else in the engine's walk."""
    from tipsite.checker import engine as E

    folder = E._file_folder(str(file))
    if folder is None or not names:
        return []
    own = file.resolve()
    texts = [(Path(where) / name, text) for where, name, text in E._project_texts(E._project_root(folder))]
    near = own.parent.parts

    def distance(other: Path) -> tuple[bool, int]:  # the file last; the nearest folder first
        parts = other.resolve().parent.parts
        shared = next((i for i, (a, b) in enumerate(zip(parts, near)) if a != b), min(len(parts), len(near)))
        return other.resolve() == own, -shared

    texts.sort(key=lambda ft: distance(ft[0]))  # stable: else the walk's order
    return [(f, name) for name in sorted(names) for f, t in texts if name in defines(t)]


def _shortest(base: Path, found: list[tuple[Path, str]], lines_of) -> list[tuple[str, list[str]]]:
    """For each name of ``found`` ((file, name), in :func:`_project_defs`' order), the fewest
    lines ``lines_of(file, name)`` gives (the first where several tie), at the file's path."""
    best: dict[str, tuple[Path, list[str]]] = {}
    for other, name in found:
        lines = lines_of(other, name)
        if lines and (name not in best or len(lines) < len(best[name][1])):
            best[name] = (other, lines)
    return [(other.relative_to(base).as_posix(), lines) for other, lines in best.values()]


def _graph_free_getters(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT012: the project's functions that return only values holding no graph (the engine's
    project_graph_free: a gradient getter, ``torch.cat`` of ``p.grad``) which the file calls in a
    value added to a running total (``fish += net.get_grads() ** 2``): a definition of each, in
    its class (the shortest one)."""
    from tipsite.checker import engine as E

    if "+=" not in text:
        return []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    called = {E._last_name(c.func) for n in ast.walk(tree) if isinstance(n, ast.AugAssign)
              and isinstance(n.op, ast.Add) for c in ast.walk(n.value) if isinstance(c, ast.Call)} - {None}
    if not called or not (names := called & E.project_graph_free(str(file))):
        return []
    return _shortest(base, _project_defs(file, names, E._graph_free_defs), _def_lines)


def _second_order_adapters(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT035: the project's functions that differentiate with ``create_graph`` (the engine's
    second-order functions: MAML's ``adapt``) which a file wrapping a module in DataParallel
    calls: the def's header and the ``grad(..., create_graph=...)`` statement, in its class (of
    the definitions, the one that gives the fewest lines)."""
    from tipsite.checker import engine as E

    if "DataParallel" not in text:
        return []
    names = E.trained_beside(str(file))[1] & set(E._CALLED.findall(text))

    def cut(other: Path, name: str) -> list[str] | None:
        lines = _def_lines(other, name, E._second_order_call)
        return lines if lines and name in E._second_order_defs(textwrap.dedent("".join(lines))) else None

    return _shortest(base, _project_defs(file, names, E._second_order_defs), cut)


def _part_evidence(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT035: where the file wraps a module in DataParallel, what the engine reads of its part
    of the project (:func:`engine.trained_beside`): the first line that evaluates a model
    (``no_grad``, ``inference_mode``, ``.eval()``) in the part's first other file that does, and,
    where the part trains all the same, the first training line (``backward()``, ``step()``) of
    its first file that trains (outside the part: with the line importing the part's package)."""
    from tipsite.checker import engine as E

    folder = E._file_folder(str(file)) if "DataParallel" in text else None
    if folder is None:
        return []
    root = E._project_root(folder)
    flow = E._tree_flow(root)
    trains = E.trained_beside(str(file))[0]
    rel = os.path.relpath(folder, root)
    own = os.path.abspath(str(file))
    if rel in (".", "") or rel.startswith(".."):
        top = None
        inferers = sorted(flow.inferers, key=lambda f: (f == own, f))
        trainers = sorted(flow.trainers)
    else:
        top = rel.split(os.sep)[0]
        part = os.path.join(root, top) + os.sep
        inferers = sorted(f for f in flow.inferers if f.startswith(part) and f != own)
        trainers = sorted(f for f, roots in flow.trainers.items() if f.startswith(part) or top in roots)
    out = []
    if inferers:
        source = Path(inferers[0]).read_text(encoding="utf-8", errors="replace")
        line = _first_line(source, lambda s: E._in_code(E._INFERS, s))
        if line:
            out.append((Path(inferers[0]).relative_to(base).as_posix(), [line]))
        if trains and trainers:
            source = Path(trainers[0]).read_text(encoding="utf-8", errors="replace")
            kept = [_first_line(source, E._trains_in)]
            if top is not None and not trainers[0].startswith(os.path.join(root, top) + os.sep):
                kept.insert(0, _first_line(source, lambda s: top in E._IMPORT_ROOT.findall(s)))
            if None not in kept:
                out.append((Path(trainers[0]).relative_to(base).as_posix(), kept))
    return out


def _numpy_collates(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT020/PTT021: where a DataLoader's collate_fn is a function or a dataset's method of
    another project file shown to return NumPy arrays (the engine's _numpy_collate, which
    follows the methods and project functions it calls), each such file's functions and
    methods the engine read (a method in its class's header) and the imports that bind the
    names they use."""
    from tipsite.checker import engine as E

    if "collate_fn" not in text or "DataLoader(" not in text:
        return []
    read: list[list[tuple[str, ast.AST, ast.ClassDef | None]]] = []
    kept: list[tuple[str, ast.AST, ast.ClassDef | None]] = []
    real_collate, real_only = E._numpy_collate, E._numpy_only

    def only(func, cls, tree, path, seen, budget):
        if read:
            read[-1].append((path, func, cls))
        return real_only(func, cls, tree, path, seen, budget)

    def collate(*args, **kwargs):
        read.append([])
        got = real_collate(*args, **kwargs)
        mine = read.pop()
        if got:
            kept.extend(mine)
        return got

    E._numpy_collate, E._numpy_only = collate, only
    try:
        E.Checker(None, "cuda", codes=["PTT020", "PTT021"]).check_source(text, str(file))
    finally:
        E._numpy_collate, E._numpy_only = real_collate, real_only
    own = file.resolve()
    by_file: dict[Path, list[tuple[ast.AST, ast.ClassDef | None]]] = {}
    for path, func, cls in kept:
        if Path(path).resolve() != own:
            by_file.setdefault(Path(path), []).append((func, cls))
    out = []
    for target, nodes in sorted(by_file.items()):
        source = target.read_text(encoding="utf-8", errors="replace")
        tree = ast.parse(source)
        # the nodes read are from the engine's own parse: find them again by name and line
        spots = {(type(f).__name__, f.name, f.lineno) for f, _ in nodes}
        owners = {(c.name, c.lineno) for _, c in nodes if c is not None}
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and (type(n).__name__, n.name, n.lineno) in spots]
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and (n.name, n.lineno) in owners]
        used = {n.id for f in funcs for n in ast.walk(f) if isinstance(n, ast.Name)}
        lines = []
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                bound = [a for a in node.names if (a.asname or a.name).partition(".")[0] in used]
                if bound:
                    lines.append(ast.unparse(type(node)(**{**node.__dict__, "names": bound})) + "\n")
        lines += _lines_of(target, [*classes, *funcs], headers=tuple(classes))
        out.append((target.relative_to(base).as_posix(), lines))
    return out


def _loaded_networks(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT037: where the file's classes are networks the project never trains but loads weights
    into (the engine's evaluator_classes), what shows the loading: in the first other file that
    names one of the classes and calls ``load_state_dict``, its first line naming the class
    (an import of it where there is one, else the first where it is a name of the code) and its
    first ``load_state_dict(`` line. (An unmarked checkout's root fallback is carried by
    :func:`project_of`: its licence files.)"""
    from tipsite.checker import engine as E

    if "class" not in text or not (mine := E.evaluator_classes(str(file), text)):
        return []
    root, whole = E._evaluator_root(E._file_folder(str(file)), str(file), text)  # as the engine
    own = os.path.abspath(str(file))
    users = E._class_users(root, tuple(sorted(mine)), whole)
    for cls in sorted(mine):
        word = re.compile(r"\b" + re.escape(cls) + r"\b")
        for user, loads in users[cls]:
            if user == own or not loads:
                continue
            source = Path(user).read_text(encoding="utf-8", errors="replace")
            named = (_first_line(source, lambda s, word=word: s.lstrip().startswith(("import ", "from ")) and word.search(s))
                     or _name_line(source, cls) or _first_line(source, word.search))
            load = _first_line(source, lambda s: E._in_code(E._LOADS_STATE, s))
            if named and load:
                return [(Path(user).relative_to(base).as_posix(), [named, load] if named != load else [load])]
    return []


def _project_files(file: Path):
    """(the file's folder, then each Python file of its project as the engine walks them: its
    folder, name and text); nothing for a path that is not a file."""
    from tipsite.checker import engine as E

    folder = E._file_folder(str(file))
    if folder is None:
        return
    for where, name, other in E._project_texts(E._project_root(folder)):
        yield folder, where, name, other


def _weight_downloader(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT037: where the file names BatchNorm, the first file of its project in its folder or a
    folder above it that downloads released checkpoints (the engine's releases_weights): its
    first download call's line and its first checkpoint URL's line."""
    from tipsite.checker import engine as E

    if "BatchNorm" not in text:
        return []
    for folder, where, name, other in _project_files(file):
        if E._within(folder, where) and E._downloads_weights(other):
            return [(Path(where, name).relative_to(base).as_posix(), _first_lines(
                other, lambda s: E._in_code(E._LOAD_URL, s), lambda s: E._WEIGHT_URL.search(s) is not None))]
    return []


def _grad_reenabler(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT019: where the file has a grad-free block and does not turn gradients back on itself,
    the first file of its project in its folder or below that does and differentiates (the
    engine's grad_reenabled_below): its first such line of each kind."""
    from tipsite.checker import engine as E

    if "no_grad" not in text or E._reenables_grad(text):
        return []
    for folder, where, name, other in _project_files(file):
        if E._within(where, folder) and E._reenables_grad(other):
            return [(Path(where, name).relative_to(base).as_posix(), _first_lines(
                other, lambda s: E._in_code(E._REENABLES, s), lambda s: E._in_code(E._DIFFERENTIATES, s)))]
    return []


def _release_docs(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT037: where the project publishes checkpoints of the file's models and loads them
    strictly (the engine's released_evidence): the documenting README's first release line and
    first link line, the line of the README naming one of the file's classes, and the first
    strict load_state_dict line of the loading file."""
    from tipsite.checker import engine as E

    if "BatchNorm" not in text or "Conv" not in text:
        return []
    found = E.released_evidence(str(file), text)
    if found is None:
        return []
    documented, loader = Path(found[0]), Path(found[2])
    named = None if found[1] is None else Path(found[1])
    out = []
    doc = documented.read_text(encoding="utf-8", errors="replace")
    out.append((documented.relative_to(base).as_posix(), _first_lines(
        doc, lambda s: E._RELEASE_DOC.search(s) is not None, lambda s: "http" in s)))
    if named is not None:
        names = [c for c in E._CLASS_DEF.findall(text) if E._MODEL_NAME.match(c)]
        body = named.read_text(encoding="utf-8", errors="replace")
        out.append((named.relative_to(base).as_posix(), _first_lines(
            body, lambda s: any(re.search(r"\b" + re.escape(c) + r"\b", s) for c in names))))
    code = loader.read_text(encoding="utf-8", errors="replace")
    out.append((loader.relative_to(base).as_posix(), _first_lines(code, lambda s: E._loads_strictly(s))))
    return out


def _dict_makers(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT004: each function of another module of the project that the file imports and that
    returns only dict literals (the engine's dict_returns: ``package = serialize_model(m)``),
    as the rule reads it for a save: its def cut to its returns where that gives as much."""
    from tipsite.checker import engine as E

    if "torch.save" not in text and "save(" not in text:
        return []
    asked: set[tuple[str, str]] = set()
    real = E._defined_dict_returns

    def recorded(module: str, name: str) -> bool:
        got = real(module, name)
        if got:
            asked.add((module, name))
        return got

    E._defined_dict_returns = recorded
    try:
        for release in ((2, 13), (2, 5)):
            E.Checker(release, "cuda", codes=["PTT004"]).check_source(text, str(file))
    finally:
        E._defined_dict_returns = real
    def returns_dicts(cut: list[str], name: str) -> bool:
        try:
            tree = ast.parse(textwrap.dedent("".join(cut)))
        except SyntaxError:
            return False
        return any(isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == name
                   and E._returns_dicts(f) for f in ast.walk(tree))

    out = []
    for module, name in sorted(asked):
        kept = _def_to_returns(Path(module), name, lambda cut, name=name: returns_dicts(cut, name))
        if kept is not None:
            out.append((Path(module).relative_to(base).as_posix(), kept))
    return out


def _collective_helpers(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT019: where the file has a grad-free block, each function of another file of its
    project that hands a parameter to an in-place collective (the engine's
    collective_functions) and that the file calls: its def cut to that call's statement."""
    from tipsite.checker import engine as E

    if "no_grad" not in text:
        return []
    folder = E._file_folder(str(file))
    if folder is None:
        return []
    helpers = {n for n in E._tree_collectives(E._project_root(folder)) if f"{n}(" in text}
    try:
        helpers -= E.collective_defs(ast.parse(text))
    except (SyntaxError, ValueError):
        return []
    out = []
    own = file.resolve()
    for name in sorted(helpers):
        for other, _ in _project_defs(file, {name}, lambda t, name=name: {name} if f"def {name}" in t else set()):
            if other.resolve() == own:
                continue
            cut = _def_lines(other, name, lambda n: isinstance(n, ast.Call) and E._collective_callee(n.func))
            if cut:
                out.append((other.relative_to(base).as_posix(), cut))
                break
    return out


def _batchnorm_freezer(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT037: where the file names BatchNorm and does not keep it frozen itself, the first
    file of its project that does (the engine's freezes_batchnorm): the lines of the statement
    that does (``isinstance(m, nn.BatchNorm2d)`` to ``m.eval()``, or the freezing def's line)."""
    from tipsite.checker import engine as E

    if "BatchNorm" not in text or E._freezes_batchnorm(text):
        return []
    for _folder, where, name, other in _project_files(file):
        if not E._freezes_batchnorm(other):
            continue
        m = E._BN_SET_EVAL.search(other) or E._BN_FREEZER.search(other)
        first = other.count("\n", 0, m.start())
        lines = other.splitlines()[first:first + m.group(0).count("\n") + 1]
        return [(Path(where, name).relative_to(base).as_posix(), [line + "\n" for line in lines])]
    return []


def _number_returns(base: Path, file: Path, text: str) -> list[tuple[str, list[str]]]:
    """PTT012/PTT013: the project's methods whose every definition returns a value holding no
    graph (the engine's project_returns: ``return loss.item(), meta``) which the rules read for
    a value of the file they would report: per method, the shortest definition that gives what
    all of them give together (its header and the statement holding its ``return``, in its
    class, where that gives as much; else the whole def); where none alone does, each one that
    shows what it returns; and for a plain call of a function the file imports from a module of
    its project (the engine's imported_returns), that module's def of it, cut the same way."""
    from tipsite.checker import engine as E

    if "return" not in text and "=" not in text:  # no value bound from a call to read
        return []
    asked: dict[str, frozenset] = {}
    imported: dict[tuple[str, str], frozenset] = {}  # (module file, name): a plain call's import
    real, real_defined = E.project_returns, E._defined_returns

    def recorded(path: str, name: str) -> frozenset:
        got = real(path, name)
        if got:
            asked[name] = got
        return got

    def recorded_defined(module: str, name: str) -> frozenset | None:
        got = real_defined(module, name)
        if got is not None:
            imported[(module, name)] = got
        return got

    E.project_returns, E._defined_returns = recorded, recorded_defined
    try:
        for release in ((2, 13), (2, 5)):
            E.Checker(release, "cuda", codes=["PTT012", "PTT013"]).check_source(text, str(file))
    finally:
        E.project_returns, E._defined_returns = real, real_defined

    def items_of(lines: list[str] | None, name: str):
        if not lines:
            return None
        try:
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except SyntaxError:
            return None
        return next((E._returned_items(f, name) for f in ast.walk(tree)
                     if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == name), None)

    out: list[tuple[str, list[str]]] = []
    own = file.resolve()
    for name, items in sorted(asked.items()):
        shown = []
        for other, _ in _project_defs(file, {name}, lambda t, name=name: {name} if f"def {name}" in t else set()):
            if other.resolve() == own:
                continue
            whole = _def_lines(other, name)
            if items_of(whole, name) is None:
                continue
            cut = _def_lines(other, name, lambda n: isinstance(n, ast.Return))
            shown.append((other, cut if items_of(cut, name) == items_of(whole, name) else whole))
        exact = sorted((len(lines), i) for i, (_, lines) in enumerate(shown) if items_of(lines, name) == items)
        for _, i in exact[:1] or [(0, i) for i in range(len(shown))]:
            out.append((shown[i][0].relative_to(base).as_posix(), shown[i][1]))
    for (module, name), items in sorted(imported.items()):  # from .utils import evaluate: its def
        other = Path(module)
        if other.resolve() == own:
            continue
        kept = _def_to_returns(other, name, lambda cut, name=name, items=items: items_of(cut, name) == items)
        if kept is not None:
            out.append((other.relative_to(base).as_posix(), kept))
    return out


def _def_to_returns(file: Path, name: str, enough) -> list[str] | None:
    """The def ``name`` of ``file`` as its lines: cut to its header and the statements holding
    its returns (:func:`_def_lines`) where ``enough`` holds of the cut lines, else whole; None
    where the file has no such def."""
    whole = _def_lines(file, name)
    if whole is None:
        return None
    cut = _def_lines(file, name, lambda n: isinstance(n, ast.Return))
    return cut if cut and enough(cut) else whole


def write_project(repo: str, files: dict[str, str]) -> Path | None:
    target = EXCERPTS / repo.replace("/", "+") / PROJECT
    if not files:
        target.unlink(missing_ok=True)
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(files, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return target


_PLACED: dict[str, Path] = {}


def placed(repo: str, path: str) -> str | None:
    """A file system path at which the engine finds the codebase's carried project files around
    ``path`` as a real run finds them (None when the codebase carries none): a folder holding
    them at their relative places, ``.git`` at its root only where the checkout had one (a
    marker-less checkout's walk goes on up, as the real run's did: no folder above a temporary
    folder is a project), and an empty file at ``path`` (the source itself is given to the
    checker)."""
    import atexit
    import shutil
    import tempfile

    project = EXCERPTS / repo.replace("/", "+") / PROJECT
    if not project.is_file():
        return None
    if repo not in _PLACED:
        if not _PLACED:
            _PLACED[""] = Path(tempfile.mkdtemp(prefix="checker-projects-"))
            atexit.register(shutil.rmtree, _PLACED[""], True)
        root = Path(tempfile.mkdtemp(dir=_PLACED[""])) / repo.replace("/", "+")
        root.mkdir()  # a fresh folder: the engine caches by folder
        for rel, text in json.loads(project.read_text(encoding="utf-8")).items():
            if rel == GIT:  # the checkout had .git at its root
                (root / ".git").mkdir()
                continue
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")
        _PLACED[repo] = root
    file = _PLACED[repo] / path
    if not file.exists():
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text("", encoding="utf-8")
    return str(file)


def _checker(config: dict):
    from tipsite.checker.engine import Checker

    release = tuple(int(x) for x in config["torch"].split(".")) if config.get("torch") else None
    return Checker(release, config["device"])  # every rule, preview included: all are measured


def findings_of(text: str, config: dict, path: str = "<excerpt>", checker=None,
                repo: str | None = None) -> set[tuple[int, str]]:
    """The findings on ``text``; with ``repo``, amid the project files it carries (:func:`placed`)."""
    from tipsite.checker.engine import is_test_path

    checker = checker or _checker(config)
    where = placed(repo, path) if repo else None
    if where is None:
        return {(f.line, f.code) for f in checker.check_source(text, path)}
    return {(f.line, f.code) for f in checker.check_source(text, where, test=is_test_path(path))}


def _by_file(items: list[dict]) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = {}
    for f in items:
        out.setdefault((f["repo"], f["path"]), []).append(f)
    return out


def expected(items: list[dict], config: str) -> set[tuple[int, str]]:
    return {(f["line"], f["code"]) for f in items if config in f["configs"]}


def _runs(labels: Labels, items: list[dict]):
    """(repo, path, configuration, the file's items, the findings) for each excerpt and configuration."""
    checkers = {c["name"]: _checker(c) for c in labels.configurations}
    for (repo, path), mine in _by_file(items).items():
        text = read_excerpt(repo, path)
        for name, checker in checkers.items():
            yield repo, path, name, mine, findings_of(text, {}, path, checker, repo)


def check_excerpts(labels: Labels) -> list[str]:
    """Problems: an excerpt whose findings in a configuration differ from its labels."""
    problems = []
    for repo, path, name, items, got in _runs(labels, labels.findings):
        want = expected(items, name)
        problems += [f"{repo} {path}:{line} {code} [{name}]: found, not labelled" for line, code in sorted(got - want)]
        problems += [f"{repo} {path}:{line} {code} [{name}]: labelled, not found" for line, code in sorted(want - got)]
    return problems


def check_regressions(labels: Labels) -> list[str]:
    """Problems: a regression (an earlier checker's wrong finding) reported again."""
    return [f"{repo} {path}:{f['line']} {f['code']} [{name}]: reported again ({f['label']}: {f['why']})"
            for repo, path, name, items, got in _runs(labels, labels.regressions)
            for f in items if name in f.get("configs", [name]) and (f["line"], f["code"]) in got]


def statements(tree: ast.AST) -> list[tuple[int, int]]:
    """Every statement's lines (decorators included), largest first."""
    spans = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            spans.add((first, node.end_lineno))
    return sorted(spans, key=lambda s: (s[0] - s[1], s[0]))


def minimize(text: str, ok, required: set[int] = frozenset()) -> set[int]:
    """The lines to keep: drop each statement (largest first) whose removal leaves ``ok(text)``
    true, except those holding a ``required`` line; ``ok`` must hold for ``text`` itself."""
    lines = text.splitlines()
    keep = set(range(1, len(lines) + 1))

    def render(kept: set[int]) -> str:
        return "\n".join(line if i + 1 in kept else "" for i, line in enumerate(lines)) + "\n"

    assert ok(render(keep)), "the full file does not give the labelled findings"
    for first, last in statements(ast.parse(text)):
        span = set(range(first, last + 1))
        if not span & keep or span & required:
            continue
        trial = keep - span
        candidate = render(trial)
        try:
            ast.parse(candidate)
        except SyntaxError:
            continue
        if ok(candidate):
            keep = trial
    # lines outside every statement, and comment lines that hold no noqa, are rarely needed;
    # a rule that reads the file's words (a comment naming cuda, a reason) may need them: then
    # the comments stay, or, failing that, everything the statements left
    inside = set()
    for first, last in statements(ast.parse(render(keep))):
        inside |= set(range(first, last + 1))
    comments = {i + 1 for i, line in enumerate(lines)
                if line.strip().startswith("#") and "noqa" not in line}
    for trimmed in ((keep & inside) - comments, keep & (inside | comments)):
        if ok(render(trimmed)):
            return trimmed
    return keep


# --- held-out labels and the rules' status ---------------------------------------------------------

def load_heldout(path: Path = HELDOUT) -> Labels | None:
    """The held-out labels, or None until they exist (same format as ``labels.json``; each
    finding may carry its ``excerpt``: the lines read to label it)."""
    if not Path(path).is_file():
        return None
    out = load(path)
    return out if out.corpora else None


_ROUND = re.compile(r"held-out round (\d+)")


def previous_round(tuning: Labels, heldout: Labels | None = None) -> tuple[int | None, dict[str, Counter], set[str]]:
    """The latest spent held-out round in the tuning labels (not the held-out round itself, once
    moved there too): its number, its blind labels per rule (not the findings labelled at the
    move), and the rules whose findings on its code changed since it was labelled (a regression
    from its codebases, or a new finding there)."""
    current = {c["repo"] for c in heldout.corpora} if heldout is not None else set()
    numbered = [(int(m.group(1)), f) for f in tuning.findings
                if (m := _ROUND.match(f.get("round", ""))) and f["repo"] not in current]
    if not numbered:
        return None, {}, set()
    latest = max(n for n, _ in numbered)
    rows = [f for n, f in numbered if n == latest]
    repos = {f["repo"] for f in rows}
    changed = {f["code"] for f in tuning.regressions if f["repo"] in repos}
    changed |= {f["code"] for f in rows if f.get("labelled_after_freeze")}
    counts: dict[str, Counter] = {}
    for f in rows:
        if not f.get("labelled_after_freeze"):
            counts.setdefault(f["code"], Counter())[f["label"]] += 1
    return latest, counts, changed


def _precise(row: dict) -> bool:
    """A table row with none wrong and at least STABLE_MIN_USEFUL of its findings useful."""
    return row["wrong"] == 0 and row["useful"] >= STABLE_MIN_USEFUL * row["findings"]


def status(tuning: Labels, heldout: Labels | None) -> dict:
    """Each rule's counts on the basis set (held-out once labelled, else tuning) and whether it
    is stable there: at least 5 findings, at least 90% useful, none wrong. ``status.json``.
    A rule with fewer than 5 findings in the held-out round also counts its blind labels of the
    round before, where its findings on that round's code are still exactly those labelled (no
    regression, no new finding there): a round whose code has little of a pattern then does not
    flip the rule's status by itself, and evidence of an older version of a rule never counts.
    With a held-out basis, a stable rule must also hold on the tuning labels (every round labelled
    before, re-checked on the current rules): at least 90% useful and none wrong there."""
    basis = heldout if heldout is not None else tuning
    t = table(basis)
    # and on every round labelled before (the tuning labels, re-checked on the current rules):
    # a rule that holds on one new round but not on the rounds before is not stable either
    tt = table(tuning) if heldout is not None else {}
    before, carried, changed = previous_round(tuning, heldout) if heldout is not None else (None, {}, set())
    rules = {}
    for code in RULES:
        row = dict(t.get(code, {"findings": 0, **{k: 0 for k in KINDS}}))
        extra = {}
        if row["findings"] < STABLE_MIN_FINDINGS and code in carried and code not in changed:
            for k in KINDS:
                row[k] += carried[code][k]
            row["findings"] += sum(carried[code].values())
            extra = {"with_round": before}
        stable = row["findings"] >= STABLE_MIN_FINDINGS and _precise(row)
        if code in tt:
            extra["tuning"] = {k: tt[code][k] for k in ("findings", *KINDS)}
            stable = stable and _precise(tt[code])
        rules[code] = {**{k: row[k] for k in ("findings", *KINDS)}, **extra, "stable": stable}
    return {"basis": "held-out" if heldout is not None else "tuning",
            "rule": f"stable: at least {STABLE_MIN_FINDINGS} findings, at least {STABLE_MIN_USEFUL:.0%} useful "
                    "and none wrong on the basis set (a rule with fewer findings there adds the round before, "
                    "with_round, where its findings on that code are unchanged), and, with a held-out basis, "
                    f"at least {STABLE_MIN_USEFUL:.0%} useful and none wrong on the tuning set too (tuning); "
                    "every other rule is in preview",
            "rules": rules}


def dumps_status(data: dict) -> str:
    return json.dumps(data, indent=1) + "\n"


# --- the table ---------------------------------------------------------------------------------------

def table(labels: Labels) -> dict:
    rows: dict[str, Counter] = {}
    for f in labels.findings:
        rows.setdefault(f["code"], Counter())[f["label"]] += 1
    total = Counter()
    for c in rows.values():
        total.update(c)
    files = sum(c["files"] for c in labels.corpora)
    lines = sum(c["lines"] for c in labels.corpora)
    out = {code: {"findings": sum(c.values()), **{k: c[k] for k in KINDS}} for code, c in sorted(rows.items())}
    out["total"] = {"findings": sum(total.values()), **{k: total[k] for k in KINDS}, "files": files,
                    "lines": lines}
    return out


def _pct(n: int, d: int) -> str:
    return f"{100 * n / d:.0f}%" if d else "-"


def render_rst(labels: Labels) -> str:
    t = table(labels)
    configs = "; ".join(f"``{c['args']}``" for c in labels.configurations)
    head = ["Measured on " + ", ".join(f"`{c['repo']} <https://github.com/{c['repo']}/tree/{c['commit']}>`__ "
                                       f"({c['files']} files)" for c in labels.corpora)
            + f": {t['total']['files']} files, {t['total']['lines']:,} lines of Python, checked with {configs}.",
            "", ".. list-table::", "   :header-rows: 1", "",
            "   * - rule", "     - findings", "     - useful", "     - not applicable", "     - wrong",
            "     - precision"]
    body = []
    for code, row in t.items():
        if code == "total":
            continue
        body += [f"   * - {code} {RULES[code].title}", f"     - {row['findings']}", f"     - {row['useful']}",
                 f"     - {row['not applicable']}", f"     - {row['wrong']}",
                 f"     - {_pct(row['useful'], row['findings'])}"]
    tot = t["total"]
    body += ["   * - all rules", f"     - {tot['findings']}", f"     - {tot['useful']}",
             f"     - {tot['not applicable']}", f"     - {tot['wrong']}", f"     - {_pct(tot['useful'], tot['findings'])}"]
    silent = sorted(c for c in RULES if c not in t)
    tail = ["", f"Rules with no finding on these codebases (precision not measured): {', '.join(silent)}."
            ] if silent else []
    regress = Counter(f["label"] for f in labels.regressions)
    if labels.regressions:
        tail += ["", f"The earlier checker's findings on the same code that the rules now leave alone, kept as "
                 f"regression tests: {regress['wrong']} wrong, {regress['not applicable']} not applicable."]
    if labels.lost:
        pinned = sum(1 for f in labels.lost if f["lost_because"].startswith("the project"))
        tail += ["", f"Findings labelled useful that the rules no longer make on the real code, run amid "
                 f"its project: {len(labels.lost)}; {pinned} because the project's own torch requirement "
                 f"makes the advice inapplicable there (the rule reads it), {len(labels.lost) - pinned} "
                 "lost to a change of a rule (a recall loss, listed in ``labels.json`` as ``lost``)."]
    return "\n".join(head + body + tail) + "\n"


def carried_note(heldout: Labels) -> str:
    """A sentence naming the rules whose status also counts the round before (status.json's
    ``with_round``), so that a reader sees why a stable rule has few findings in the table."""
    t = table(heldout)
    from tipsite.checker import registry

    rows = [(code, row) for code, row in registry.STATUS["rules"].items()
            if row.get("with_round") and registry.is_stable(code)]
    if not rows:
        return ""
    parts = [f"{code} ({t.get(code, {}).get('findings', 0)} here; with round {row['with_round']}: "
             f"{row['findings']} findings, {row['useful']} useful, {row['wrong']} wrong)" for code, row in rows]
    return ("Stable with the round before counted, as the rule has fewer than 5 findings here and gives "
            "the same findings as then on that round's code: " + ", ".join(parts) + ".\n")


def render_heldout_rst(heldout: Labels | None) -> str:
    """The held-out set's table: generated from ``heldout.json``, or "not yet labelled"."""
    if heldout is None:
        return NOT_YET + "\n"
    note = carried_note(heldout)
    return render_rst(heldout) + ("\n" + note if note else "")


def render_heldout_markdown(heldout: Labels | None) -> str:
    if heldout is None:
        return NOT_YET.replace("``", "`") + "\n"
    note = carried_note(heldout)
    return render_markdown(heldout) + ("\n" + note.replace("``", "`") if note else "")


def excerpt_lines(heldout: Labels) -> set[str]:
    """The held-out findings' excerpt lines worth matching (stripped, 20 characters or more)."""
    out = set()
    for f in heldout.findings + heldout.regressions:
        for line in _stripped_lines(str(f.get("excerpt", ""))):
            if len(line) >= 20 and not line.startswith(("#", "import ", "from ")):
                out.add(line)
    return out


def own_test_data() -> dict[str, str]:
    """The rules' own test data: the registry's examples and clean forms, the checker's tests,
    the tuning excerpts. Held-out code must never appear in them."""
    texts = {f"registry {code}": r.example + r.clean for code, r in RULES.items()}
    for path in sorted((ROOT / "tests").glob("test_checker*.py")) + sorted(EXCERPTS.rglob("*.txt")):
        texts[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    return texts


def leaks(heldout: Labels, texts: dict[str, str] | None = None, spent: set[str] | None = None) -> list[str]:
    """Held-out excerpt lines found in the rules' own test data.

    A held-out codebase that is now a tuning corpus (``spent``: by default the repositories of
    ``labels.json``) was spent once labelled: it moved into the tuning set, its excerpts with
    it (rounds 1 to 3), and stays in ``heldout.json`` only until the next round's labels
    replace it.

    Only lines of at least :data:`LEAK_MIN` characters count: a short line such as
    ``with torch.no_grad():``, or a canonical API call such as ``scaler =
    torch.cuda.amp.GradScaler()`` (36 characters, in every mixed-precision script and in
    the oldest tuning excerpts), says nothing of where it came from, while a longer one
    (names, arguments) is the held-out code itself.

    The tuning excerpts are cut by :func:`write_all_excerpts` from pinned checkouts of other
    codebases, not written by hand: there one line a held-out excerpt shares is an idiom both
    codebases use (``with torch.cuda.amp.autocast(enabled=False):``), and a leak is held-out
    code itself, so such a line counts only with a line next to it in the held-out excerpt
    (of 20 characters or more: a closing bracket says nothing) next to it there too. The
    registry's examples and the checker's tests are written by the rules' authors: any one such
    line counts."""
    texts = own_test_data() if texts is None else texts
    spent = {c["repo"] for c in load().corpora} if spent is None else spent
    heldout = Labels(corpora=heldout.corpora,
                     findings=[f for f in heldout.findings if f.get("repo") not in spent],
                     regressions=[f for f in heldout.regressions if f.get("repo") not in spent])
    listed = {name: _stripped_lines(text) for name, text in texts.items()}
    stripped = {name: set(lines) for name, lines in listed.items()}
    held_pairs = set()
    for f in heldout.findings + heldout.regressions:
        held_pairs |= _pairs(_stripped_lines(str(f.get("excerpt", ""))))
    cut = str(EXCERPTS.relative_to(ROOT))
    # for each tuning excerpt, the lines that sit next to a line of 20 characters or more in
    # both it and a held-out excerpt
    paired = {name: {line for pair in _pairs(lines) & held_pairs if min(map(len, pair)) >= 20
                     for line in pair}
              for name, lines in listed.items() if name.startswith(cut)}

    def found(line: str, name: str) -> bool:
        if len(line) < LEAK_MIN or line not in stripped[name]:
            return False
        return name not in paired or line in paired[name]

    return [f"{name}: {line!r}" for line in sorted(excerpt_lines(heldout))
            for name in stripped if found(line, name)]


def _stripped_lines(text: str) -> list[str]:
    """A text's non-blank lines, stripped, without an excerpt's ``123|`` line numbers."""
    return [s for s in (line.strip() for line in re.sub(r"(?m)^\s*\d+\|", "", text).splitlines()) if s]


def _pairs(lines: list[str]) -> set[tuple[str, str]]:
    """Each two lines next to each other."""
    return set(zip(lines, lines[1:]))


LEAK_MIN = 40  # characters of a stripped line that identify code, see leaks()


def render_markdown(labels: Labels) -> str:
    """The precision table for the README: a row for each stable rule (the ones a plain run
    reports), one for the preview rules together, and all rules; the docs page has every rule."""
    t = table(labels)
    out = ["| rules | findings | useful | not applicable | wrong | precision |",
           "|---|--:|--:|--:|--:|--:|"]

    def line(name: str, row: dict) -> str:
        return (f"| {name.replace('|', '/')} | {row['findings']} | {row['useful']} | "
                f"{row['not applicable']} | {row['wrong']} | {_pct(row['useful'], row['findings'])} |")

    codes = [c for c in t if c != "total"]
    for code in codes:
        if is_stable(code):
            out.append(line(f"{code} {RULES[code].title} (stable)", t[code]))
    preview = [c for c in codes if not is_stable(c)]
    if preview:
        together = {k: sum(t[c][k] for c in preview) for k in ("findings", *KINDS)}
        out.append(line(f"{len(preview)} preview rules with findings", together))
    out.append(line("all rules", t["total"]))
    return "\n".join(out) + "\n"


def render_rules_rst() -> str:
    """Every rule: its code, what it flags, whether it runs by default, the tip that judges it,
    and what it leaves alone."""
    out = [".. list-table::", "   :header-rows: 1", "   :widths: 10 30 10 20 30", "",
           "   * - code", "     - flags", "     - status", "     - judged by", "     - leaves alone"]
    for code, rule in RULES.items():
        via = f" (TorchFix {rule.torchfix})" if rule.torchfix else ""
        status = "stable" if is_stable(code) else "preview"
        out += [f"   * - {code}{via}", f"     - {_escape(rule.short)}", f"     - {status}",
                f"     - :doc:`{rule.tip} </tips/{_topic(rule.tip)}/{rule.tip}>`",
                f"     - {_escape(rule.scope) or '-'}"]
    return "\n".join(out) + "\n"


def _escape(text: str) -> str:
    """Plain text for reStructuredText: no emphasis, references or literals by accident."""
    return re.sub(r"([*_`|\\])", r"\\\1", text)


def _topic(tip: str) -> str:
    found = sorted((ROOT / "gallery").glob(f"*/{tip}.py"))
    return found[0].parent.name if found else "unknown"


def _replace(text: str, begin: str, end: str, body: str) -> str:
    start, stop = text.index(begin) + len(begin), text.index(end)
    return text[:start] + "\n\n" + body + "\n" + text[stop:]


def write_docs(labels: Labels, page: Path = DOCS_PAGE) -> None:
    text = page.read_text(encoding="utf-8")
    text = _replace(text, BEGIN, END, render_rst(labels))
    text = _replace(text, RULES_BEGIN, RULES_END, render_rules_rst())
    heldout = load_heldout()
    text = _replace(text, HELD_BEGIN, HELD_END, render_heldout_rst(heldout))
    page.write_text(text, encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    readme = _replace(readme, README_BEGIN, README_END, render_markdown(labels))
    readme = _replace(readme, README_HELD_BEGIN, README_HELD_END, render_heldout_markdown(heldout))
    README.write_text(readme, encoding="utf-8")


# --- the commands ------------------------------------------------------------------------------------

def corpus_files(corpus: Path, repo: str) -> list[Path]:
    from tipsite.checker.runner import collect

    files, _ = collect([str(corpus / repo.replace("/", "+"))])
    return files


def run(labels: Labels, corpus: Path) -> int:
    """Compare the checker on the checkouts with the labels."""
    known = {(f["repo"], f["path"], f["line"], f["code"], c) for f in labels.findings for c in f["configs"]}
    seen = set()
    missing = 0
    for config in labels.configurations:
        checker = _checker(config)
        for c in labels.corpora:
            base = corpus / c["repo"].replace("/", "+")
            for file in corpus_files(corpus, c["repo"]):
                rel = file.relative_to(base).as_posix()
                for f in checker.check_source(file.read_text(encoding="utf-8"), rel):
                    key = (c["repo"], rel, f.line, f.code, config["name"])
                    seen.add(key)
                    if key not in known:
                        missing += 1
                        print(f"unlabelled: {c['repo']} {rel}:{f.line}:{f.col} {f.code} [{config['name']}]")
    for key in sorted(known - seen):
        print(f"labelled, not found: {key[0]} {key[1]}:{key[2]} {key[3]} [{key[4]}]")
    return 1 if missing or known - seen else 0


def write_projects(labels: Labels, corpus: Path, repos: set[str] | None = None) -> None:
    """Rewrite each codebase's carried project files (:func:`project_of`) from its checkout in
    ``corpus`` (codebases not checked out there are left as they are)."""
    keys = set(_by_file(labels.findings)) | set(_by_file(labels.regressions))
    for repo in sorted({r for r, _ in keys}):
        base = corpus / repo.replace("/", "+")
        if (repos and repo not in repos) or not base.is_dir():
            continue
        target = write_project(repo, project_of(base, sorted(p for r, p in keys if r == repo)))
        _PLACED.pop(repo, None)
        print(f"{repo}: {'no project file names torch' if target is None else target.name}")


def write_all_excerpts(labels: Labels, corpus: Path, baseline=None, only: set[str] | None = None) -> None:
    """Rewrite every excerpt: the smallest set of statements that keeps, in every configuration,
    the file's labelled findings exactly, and (with ``baseline``, an earlier checker) the
    regressions it reported."""
    checkers = {c["name"]: _checker(c) for c in labels.configurations}
    files = _by_file(labels.findings)
    regress = _by_file(labels.regressions)
    commits = {c["repo"]: c for c in labels.corpora}
    keys = sorted(set(files) | set(regress))
    write_projects(labels, corpus, {o.partition(":")[0] for o in only} if only else None)
    for key in keys:
        repo, path = key
        if only and f"{repo}:{path}" not in only:
            continue
        text = (corpus / repo.replace("/", "+") / path).read_text(encoding="utf-8")
        items, olds = files.get(key, []), regress.get(key, [])

        def ok(candidate: str, path=path, items=items, olds=olds, repo=repo) -> bool:
            for name, checker in checkers.items():
                try:
                    got = findings_of(candidate, {}, path, checker, repo)
                except SyntaxError:
                    return False
                if got != expected(items, name):
                    return False
            if olds and baseline is not None:
                old = {(f.line, f.code) for f in baseline.check_source(candidate, path)}
                if not {(f["line"], f["code"]) for f in olds} <= old:
                    return False
            return True

        required = {f["line"] for f in olds}  # the regressions' own lines (their context: by ok())
        if olds and baseline is None:  # without the earlier checker: keep what qualifies the names
            required |= {n.lineno for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.Import, ast.ImportFrom))}
        keep = minimize(text, ok, required)
        write_excerpt(repo, commits[repo]["commit"], path, commits[repo]["licence"], text, keep)
        print(f"{repo} {path}: {len(keep)} of {len(text.splitlines())} lines")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tipsite.checker.labels", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="compare the checker on the checkouts with the labels")
    p.add_argument("corpus", type=Path)
    p = sub.add_parser("excerpts", help="rewrite the excerpts from the checkouts")
    p.add_argument("corpus", type=Path)
    p.add_argument("--only", action="append", metavar="REPO:PATH", help="only this file's excerpt")
    p.add_argument("--projects", action="store_true",
                   help=f"only the project files the rules read ({PROJECT} of each codebase)")
    p = sub.add_parser("table", help="print the precision table (reStructuredText)")
    p.add_argument("--write", action="store_true",
                   help=f"write it and the rules table into {DOCS_PAGE.relative_to(ROOT)}, "
                        f"and its Markdown form into {README.name}")
    p = sub.add_parser("status", help="print each rule's status (stable or preview) from the labels")
    p.add_argument("--write", action="store_true",
                   help=f"write it into {STATUS_PATH.name}, which the checker reads")
    args = parser.parse_args(argv)
    labels = load()
    if args.command == "status":
        text = dumps_status(status(labels, load_heldout()))
        if args.write:
            STATUS_PATH.write_text(text, encoding="utf-8")
        else:
            print(text, end="")
        return 0
    if args.command == "run":
        return run(labels, args.corpus)
    if args.command == "excerpts" and args.projects:
        write_projects(labels, args.corpus, {o.partition(":")[0] for o in args.only or ()} or None)
        return 0
    if args.command == "excerpts":
        write_all_excerpts(labels, args.corpus, only=set(args.only or ()))
        return 0
    if args.write:
        write_docs(labels)
    else:
        print(render_rst(labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
