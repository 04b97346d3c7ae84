"""Every code example outside the gallery scripts is a doctest, and every doctest passes.

The README, CONTRIBUTING.md and the hand-written pages under ``docs/`` (and the gallery's topic
READMEs) show Python examples as ``>>>`` sessions; this module runs them with the standard
library's doctest machinery, one test per file (the quick reference's block by block, each as a
reader pastes it alone). It is plain pytest, so ``nox -s tests`` runs it with the default torch
and ``nox -s matrix`` runs it with every release of the matrix (no Sphinx needed there:
``sphinx.ext.doctest`` would need a full site build, every tip included, per release).

A Python code block without ``>>>`` is allowed only when the line right above it says it is not
executed (``<!-- not a doctest: why -->`` in Markdown, ``.. not a doctest: why`` in reST), so
a template cannot pass for a tested example. A file that should hold doctests but yields none
fails, as does a quick-reference page that misses a tip.
"""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

from conf import settings
from tipsite import tipmeta

README = settings.ROOT / "README.md"
CONTRIBUTING = settings.ROOT / "CONTRIBUTING.md"
QUICK = settings.DOCS_DIR / "reference" / "quick.rst"
# Folders under docs/ that the build generates (git-ignored): not hand-written examples.
GENERATED = (settings.TIPS_OUT_DIR, settings.DOCS_DIR / "generated", settings.DOCS_DIR / "_build")
# Files that exist to show examples: each must yield doctests.
MUST_HAVE_DOCTESTS = (CONTRIBUTING, QUICK)

OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
NOT_A_DOCTEST = re.compile(r"^\s*(<!--\s*not a doctest:.+-->|\.\.\s+not a doctest:.+)$", re.IGNORECASE)
PY_LANGS = {"python", "py", "python3", "pycon"}


def doc_sources() -> list[Path]:
    """README.md, CONTRIBUTING.md, the hand-written reST under docs/ and the gallery's topic READMEs."""
    rst = [p for p in settings.DOCS_DIR.rglob("*.rst")
           if not any(p.is_relative_to(g) for g in GENERATED) and p.name != "sg_execution_times.rst"]
    return [README, CONTRIBUTING, *sorted(rst), *sorted(settings.GALLERY_DIR.rglob("README.rst"))]


def python_blocks(path: Path) -> list[tuple[int, str, str]]:
    """(line number, the line above, code) for every Python code block in a md or rst file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    if path.suffix == ".md":
        i = 0
        while i < len(lines):
            m = re.match(r"^\s*```+\s*(\w*)", lines[i])
            if m:
                j = i + 1
                while j < len(lines) and not re.match(r"^\s*```", lines[j]):
                    j += 1
                if m.group(1).lower() in PY_LANGS:
                    above = next((ln for ln in reversed(lines[:i]) if ln.strip()), "")
                    blocks.append((i + 1, above, "\n".join(lines[i + 1:j])))
                i = j + 1
            else:
                i += 1
        return blocks
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)\.\. (code-block|code|sourcecode)::\s*(\w+)", line)
        if m and m.group(3).lower() in PY_LANGS:
            indent = len(m.group(1))
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
                j += 1
            above = next((ln for ln in reversed(lines[:i]) if ln.strip()), "")
            blocks.append((i + 1, above, "\n".join(lines[i + 1:j])))
    return blocks


def doctest_for(path: Path) -> doctest.DocTest:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        # a closing ``` fence would otherwise read as expected output; blank keeps line numbers
        text = re.sub(r"(?m)^[ \t]*```.*$", "", text)
    return doctest.DocTestParser().get_doctest(
        text, globs={"__name__": path.stem}, name=path.name, filename=str(path), lineno=0)


def _id(path: Path) -> str:
    return str(path.relative_to(settings.ROOT))


def test_doc_sources_are_found():
    sources = doc_sources()
    for path in MUST_HAVE_DOCTESTS:
        assert path in sources, f"{_id(path)} is not among the scanned documentation sources"


@pytest.mark.parametrize("path", doc_sources(), ids=_id)
def test_python_blocks_are_doctests_or_marked(path):
    """A Python block either runs (>>>) or says, right above it, why it is not executed."""
    unmarked = [f"{_id(path)}:{line}: a Python code block with no >>> example and no "
                f"'not a doctest: why' marker on the line above"
                for line, above, code in python_blocks(path)
                if ">>>" not in code and not NOT_A_DOCTEST.match(above)]
    assert not unmarked, "\n".join(unmarked)


def test_files_that_show_examples_yield_doctests():
    """A collector that silently finds nothing would pass forever: refuse it."""
    for path in doc_sources():
        if path in MUST_HAVE_DOCTESTS or python_blocks(path):
            assert doctest_for(path).examples, f"{_id(path)}: no >>> examples found; this file must hold doctests"


# the quick reference's examples run block by block (test_each_quick_reference_block_runs_pasted_alone)
@pytest.mark.parametrize("path", [p for p in doc_sources() if p != QUICK and ">>>" in p.read_text(encoding="utf-8")],
                         ids=_id)
def test_doctests_pass(path):
    test = doctest_for(path)
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    report: list[str] = []
    runner.run(test, out=report.append)
    outcome = runner.summarize(verbose=False)
    assert outcome.failed == 0, f"{_id(path)}: {outcome.failed} of {outcome.attempted} examples failed\n" + "".join(report)


QUICK_LINK = re.compile(r":doc:`(?:[^`<]*<)?/tips/([\w]+)/(tip_\w+)>?`")


def quick_entries() -> dict[str, str]:
    """tip name -> the text of its quick-reference entry (from its link to the next link)."""
    text = QUICK.read_text(encoding="utf-8")
    matches = list(QUICK_LINK.finditer(text))
    entries = {}
    for k, m in enumerate(matches):
        end = matches[k + 1].start() if k + 1 < len(matches) else len(text)
        entries[m.group(2)] = (m.group(1), text[m.start():end])
    return entries


def test_quick_reference_covers_every_tip():
    entries = quick_entries()
    missing = [f"{p.parent.name}/{p.stem}" for p in tipmeta.tip_files() if p.stem not in entries]
    assert not missing, (
        "tips without a quick-reference entry in docs/reference/quick.rst (add one short >>> "
        "example of the tip's key fact, linking :doc:`/tips/<topic>/<tip>`): " + ", ".join(missing))


def test_quick_reference_links_real_tips_and_shows_an_example():
    tips = {p.stem: p.parent.name for p in tipmeta.tip_files()}
    problems = []
    for name, (topic, body) in quick_entries().items():
        if tips.get(name) != topic:
            problems.append(f"{topic}/{name}: no such tip")
        elif ">>>" not in body:
            problems.append(f"{topic}/{name}: the entry shows no >>> example")
    assert not problems, "\n".join(problems)


def quick_blocks() -> list[tuple[int, str]]:
    """(line, text) of each code block of the quick reference as its page shows it, and as a
    reader copies it: a paragraph that starts with ``>>>`` (docutils' doctest block), up to the
    next blank line."""
    lines = QUICK.read_text(encoding="utf-8").splitlines()
    blocks, start = [], None
    for i, line in enumerate([*lines, ""]):
        if start is None and line.lstrip().startswith(">>>") and (i == 0 or not lines[i - 1].strip()):
            start = i
        elif start is not None and not line.strip():
            blocks.append((start + 1, "\n".join(lines[start:i])))
            start = None
    return blocks


def test_each_quick_reference_block_runs_pasted_alone():
    """A reader copies one block (the copy button takes one): it runs in a fresh interpreter,
    with no name from the blocks above it, ``import torch`` included."""
    blocks = quick_blocks()
    assert len(blocks) >= len(quick_entries()), "fewer code blocks than entries: the parser missed some"
    tests = [doctest.DocTestParser().get_doctest(text, globs={"__name__": "__main__"}, name=f"quick.rst:{line}",
                                                 filename=str(QUICK), lineno=line - 1) for line, text in blocks]
    # the file's examples run here only (not in test_doctests_pass): every one must be in a block
    whole = len(doctest_for(QUICK).examples)
    assert sum(len(t.examples) for t in tests) == whole, (
        f"the blocks hold {sum(len(t.examples) for t in tests)} of the file's {whole} examples: "
        "the block parser missed some")
    failed = []
    for (line, text), test in zip(blocks, tests):
        if "init_process_group" in text:  # in a process of its own: see _run_alone
            failed += _run_alone(line, text)
            continue
        try:
            doctest.DebugRunner(optionflags=OPTIONS).run(test, out=lambda _: None)
        except doctest.UnexpectedException as exc:
            kind, error, _ = exc.exc_info
            failed.append(f"quick.rst:{line + exc.example.lineno}: {exc.example.source.strip()!r} raised "
                          f"{kind.__name__}: {error}")
        except doctest.DocTestFailure as exc:
            failed.append(f"quick.rst:{line + exc.example.lineno}: {exc.example.source.strip()!r} printed "
                          f"{exc.got.strip()!r}, not {exc.example.want.strip()!r}")
    assert not failed, "blocks that fail when pasted alone:\n" + "\n".join(failed)


def _run_alone(line: int, text: str) -> list[str]:
    """A block that starts a gloo process group runs in a fresh interpreter, which leaves by
    ``os._exit`` once its examples have passed. Freeing a DDP model whose comm hook ran Python
    callbacks on gloo's threads joined those threads while holding the GIL and hung the suite
    once (2026-11-28: ``~ProcessGroupGloo`` in ``std::thread::join``, from the doctest clearing
    its names, in a pytest worker); the examples had passed. That teardown is torch's, not the
    block's claim, and a hang must fail here in seconds, not stop the suite for 30 minutes."""
    import subprocess
    import sys

    script = (
        "import doctest, os, sys\n"
        f"test = doctest.DocTestParser().get_doctest({text!r}, {{'__name__': '__main__'}}, "
        f"'quick.rst:{line}', {str(QUICK)!r}, {line - 1})\n"
        f"r = doctest.DocTestRunner(optionflags={OPTIONS}).run(test, clear_globs=False)\n"
        "sys.stdout.flush()\n"
        "os._exit(1 if r.failed else 0)\n")
    try:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return [f"quick.rst:{line}: the block did not finish in 300 s"]
    if proc.returncode != 0:
        return [f"quick.rst:{line}: failed alone:\n{(proc.stdout + proc.stderr)[-2000:]}"]
    return []
