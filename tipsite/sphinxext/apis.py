"""PyTorch APIs: which tips use each one, and links to PyTorch's documentation that work offline.

* :func:`code_api_names` reads a tip's own code (not the helpers every tip copies) and resolves
  the dotted ``torch.*`` names it uses through its imports (``import torch.nn as nn``,
  ``from torch.utils.data import DataLoader``), the way sphinx-gallery's backreferences do.
* :func:`generate` (builder-inited, after the views) writes ``generated/apis.rst``: one entry per
  API, linked to PyTorch's documentation, with every tip that uses it (its code, or its
  ``keywords``/``docs`` metadata). Each entry has the target ``api-<name>`` that tip pages link to.
* The links resolve through intersphinx from a committed inventory,
  ``docs/_data/torch-objects.inv``, so a build without network links API names too (see
  ``docs/conf.py``). ``python -m tipsite.sphinxext.apis fetch`` replaces it with PyTorch's own
  ``objects.inv`` where the network allows; ``python -m tipsite.sphinxext.apis compile`` writes
  it from ``docs/_data/torch-inventory.txt`` (one ``name role uri`` line per API the tips use,
  following PyTorch's documentation layout), the copy committed while no network was at hand.
"""

from __future__ import annotations

import ast
import re
import sys
import zlib
from pathlib import Path

from conf import settings
from tipsite import tipkit, tipmeta

GENERATED = "generated"
PAGE = "apis"
DATA_DIR = settings.DOCS_DIR / "_data"
INVENTORY = DATA_DIR / "torch-objects.inv"
INVENTORY_TEXT = DATA_DIR / "torch-inventory.txt"
TORCH_DOCS = "https://docs.pytorch.org/docs/stable/"


# --- what a tip's code uses ------------------------------------------------------------------------

def _imports(tree: ast.Module) -> dict[str, str]:
    """Local name -> the torch name it stands for."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch" or a.name.startswith("torch."):
                    if a.asname:
                        aliases[a.asname] = a.name
                    else:
                        aliases["torch"] = "torch"
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and (
                node.module == "torch" or node.module.startswith("torch.")):
            for a in node.names:
                if a.name != "*":
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def code_api_names(path: Path) -> list[str]:
    """The ``torch.*`` names a tip's own code uses, sorted; the copied helpers are left out."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    aliases = _imports(tree)
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_Attribute(self, node: ast.Attribute) -> None:
            parts = []
            cur: ast.AST = node
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in aliases:
                found.add(".".join([aliases[cur.id], *reversed(parts)]))
                return
            self.generic_visit(node)

        def visit_Name(self, node: ast.Name) -> None:
            if node.id in aliases and aliases[node.id] != "torch":
                found.add(aliases[node.id])

    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) and stmt.name in tipkit.HELPERS:
            continue
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue
        Visitor().visit(stmt)
    return sorted(n for n in found if _worth_listing(n))


def _worth_listing(name: str) -> bool:
    """API names, not values: no dunders (``torch.__version__``), no enum members."""
    parts = name.split(".")
    if any(p.startswith("__") for p in parts):
        return False
    return not (len(parts) >= 3 and parts[-1].isupper())  # ProfilerActivity.CPU


def tip_apis(tip: tipmeta.Tip, declared: list[str]) -> list[str]:
    """What the tip uses: the APIs its metadata names first, then those of its code."""
    return list(dict.fromkeys([*declared, *code_api_names(tip.path)]))


def anchor(name: str) -> str:
    """``torch.no_grad`` -> ``api-torch-no-grad``; a capitalised last part (a class) adds
    ``-class``: reST labels ignore case, and ``torch.Tensor`` is not ``torch.tensor``."""
    slug = "api-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug + "-class" if name.rsplit(".", 1)[-1][:1].isupper() else slug


# --- the APIs page ---------------------------------------------------------------------------------

def page_rows(views: dict) -> list[dict]:
    """One row per API: its name, module, the tips naming it in metadata and those using it."""
    by_api: dict[str, dict] = {}
    for view in views.values():
        declared = set(view.apis)
        for name in tip_apis(view.tip, view.apis):
            row = by_api.setdefault(name, {"name": name, "subject": [], "uses": []})
            (row["subject"] if name in declared else row["uses"]).append(view.tip)
    rows = []
    for name in sorted(by_api, key=lambda n: (_module(n), n.lower())):
        row = by_api[name]
        order = sorted(row["subject"], key=lambda t: t.title.lower()) + \
            sorted(row["uses"], key=lambda t: t.title.lower())
        rows.append({"name": name, "anchor": anchor(name), "module": _module(name),
                     "tips": [{"docname": t.docname, "subject": t in row["subject"]} for t in order]})
    return rows


def _module(name: str) -> str:
    """The section an API is listed under: ``torch.nn.functional.gelu`` -> ``torch.nn.functional``."""
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        head = ".".join(parts[:i])
        if all(p[:1].islower() for p in parts[1:i]):
            return head
    return "torch"


def generate(app) -> None:
    """builder-inited, after the views: ``generated/apis.rst``."""
    from tipsite.sphinxext import state
    from tipsite.sphinxext.cards import _write_if_changed
    from tipsite.sphinxext.render import render

    rows = page_rows(state.views(app))
    modules: dict[str, list[dict]] = {}
    for row in rows:
        modules.setdefault(row["module"], []).append(row)
    text = render("apis.rst.jinja", modules=modules, n_tips=len(state.views(app)),
                  offline=INVENTORY.exists())
    _write_if_changed(Path(app.srcdir) / GENERATED / f"{PAGE}.rst", text)
    app.env.tips_api_anchors = {r["name"]: r["anchor"] for r in rows}  # type: ignore[attr-defined]


# --- the inventory ---------------------------------------------------------------------------------

HEADER = "# Sphinx inventory version 2\n# Project: PyTorch\n# Version: {version}\n" \
         "# The remainder of this file is compressed using zlib.\n"


def compile_inventory(text_path: Path = INVENTORY_TEXT, out: Path = INVENTORY) -> int:
    """Write a Sphinx inventory from ``name role uri`` lines (``#`` starts a comment)."""
    lines = []
    version = "stable"
    for raw in text_path.read_text(encoding="utf-8").splitlines():
        if raw.startswith("# version:"):
            version = raw.split(":", 1)[1].strip()
        line = "" if raw.lstrip().startswith("#") else raw.strip()
        if not line:
            continue
        name, role, uri = line.split()
        if uri.endswith("#" + name):
            uri = uri[: -len(name)] + "$"  # Sphinx's shorthand: the anchor is the name
        lines.append(f"{name} {role} 1 {uri} -")
    body = zlib.compress(("\n".join(sorted(set(lines))) + "\n").encode("utf-8"), 9)
    out.write_bytes(HEADER.format(version=version).encode("utf-8") + body)
    return len(set(lines))


def fetch_inventory(url: str = TORCH_DOCS + "objects.inv", out: Path = INVENTORY) -> int:
    """Replace the committed inventory with PyTorch's own (needs the network)."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - a fixed https URL
        data = response.read()
    if not data.startswith(b"# Sphinx inventory version 2"):
        raise SystemExit(f"error: {url} is not a Sphinx inventory")
    out.write_bytes(data)
    return len(data)


def main(argv: list[str]) -> int:
    if argv[:1] == ["compile"]:
        n = compile_inventory()
        print(f"wrote {INVENTORY} ({n} entries from {INVENTORY_TEXT.name})")
        return 0
    if argv[:1] == ["fetch"]:
        n = fetch_inventory(*argv[1:2])
        print(f"wrote {INVENTORY} ({n} bytes)")
        return 0
    if argv[:1] == ["names"]:
        for tip in tipmeta.read_all():
            print(tip.name, " ".join(code_api_names(tip.path)))
        return 0
    print("usage: python -m tipsite.sphinxext.apis compile | fetch [URL] | names", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
