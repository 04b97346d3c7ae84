"""The shape of the code: no import circles in tipsite/, whatever level an import is written at, and
an execution fingerprint that covers every module the build runs tips with."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "tipsite"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The tipsite modules ``name`` imports anywhere in its file (in functions too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    found = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target not in (name, "tipsite"):
            found.add(target)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_in_tipsite():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    assert len(graph) > 30 and graph["tipsite.sphinxext.benchpage"] >= {"tipsite.bench"}
    assert circles(graph) == [], "modules that import each other (a function-level import counts too)"


# Imported by the execution layer, yet no part of what a tip records (not fingerprinted):
NOT_EXECUTION = {"tipsite.checker.registry": "tipmeta checks that the rule codes a tip names exist"}


def test_the_execution_fingerprint_covers_every_module_the_build_runs_tips_with():
    """A change to any module the hooks that run and record tips use must run every tip again
    (tipsite.build.EXECUTION_LAYER, tipsite/sphinxext/freshness.py)."""
    from tipsite import build

    known = modules()
    layer = {".".join(Path(p).with_suffix("").parts).removesuffix(".__init__")
             for p in build.EXECUTION_LAYER if p.startswith("tipsite/")}
    assert "tipsite.gallery" in layer
    reached, todo = set(), sorted(layer)
    while todo:
        name = todo.pop()
        if name in reached or name in NOT_EXECUTION:
            continue
        reached.add(name)
        todo += sorted(imports(name, known[name], known))
    assert reached <= layer, f"imported by the execution layer, missing from EXECUTION_LAYER: {sorted(reached - layer)}"
