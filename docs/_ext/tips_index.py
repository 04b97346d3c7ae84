"""Sphinx extension: find any tip fast -- the card grid, tag pages, search keywords, related tips.

* ``.. tip-cards::`` renders one card per tip: title, one-line takeaway, the verdict its run
  computed, tags and devices. ``:filter:`` adds the in-page filter bar that
  ``_static/tips_filter.js`` fills in (no server, no framework); ``:tag: <tag>`` keeps the tips
  with that tag. Cards carry their facets as classes (``tc-verdict-holds``, ``tc-tag-autograd``,
  ``tc-device-cpu``), which is all the script reads.
* At builder-inited, once sphinx-gallery has executed the tips, this writes
  ``docs/generated/tips_manifest.json`` (what every card shows) and one page per tag in use under
  ``docs/generated/tags/``. Pages showing cards depend on the manifest, so a new tip or a changed
  verdict re-reads them and nothing else.
* Every ``:tip-tag:`` badge on the site links to its tag page.
* :func:`search_keywords` and :func:`related_tips` serve ``tips_pages.header_rst``; they need no
  Sphinx application, so the tiny test builds that load ``tips_pages`` alone keep working.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from conf import gallery, tipmeta

logger = logging.getLogger(__name__)

GENERATED = "generated"
TAGS_DIR = "tags"
MANIFEST = "tips_manifest.json"


# --- helpers for tips_pages.header_rst (no Sphinx app needed) --------------------------------

@lru_cache(maxsize=8)
def _tips_cached(gallery_dir: Path, signature: tuple) -> tuple[tipmeta.Tip, ...]:
    return tuple(tipmeta.read_all(gallery_dir))


# gallery folder -> the tips this build validated and ran (set at builder-inited), so a tip
# file appearing mid-build is never linked to before it has a page.
_BUILD_TIPS: dict[Path, tuple[tipmeta.Tip, ...]] = {}


def gallery_tips(tip: tipmeta.Tip) -> tuple[tipmeta.Tip, ...]:
    """Every tip of the gallery ``tip`` belongs to: this build's, else read (and cached) now."""
    gallery_dir = tip.path.resolve().parent.parent
    if gallery_dir in _BUILD_TIPS:
        return _BUILD_TIPS[gallery_dir]
    signature = tuple((p.name, p.stat().st_mtime_ns) for p in tipmeta.tip_files(gallery_dir))
    return _tips_cached(gallery_dir, signature)


_API_URL_RE = re.compile(r"/generated/((?:torch|numpy)[\w.]*?)(?:\.html|#|$)")


def api_names(tip: tipmeta.Tip) -> list[str]:
    """Dotted API names the tip is about: its ``torch.*`` keywords and documentation pages."""
    names = [k for k in tip.keywords if re.fullmatch(r"torch(\.\w+)+", k)]
    for url in tip.docs:
        m = _API_URL_RE.search(url)
        if m:
            names.append(m.group(1))
    return list(dict.fromkeys(names))


def search_keywords(tip: tipmeta.Tip) -> list[str]:
    """Words the search index should tie to the tip's page: its keywords and API names.

    They become *main* index entries on the tip's page, which Sphinx's search ranks above
    plain text matches: a reader typing an API name or a problem the tip names finds it first.
    """
    words: dict[str, str] = {}
    for word in (*tip.keywords, *api_names(tip)):
        # "," separates entries and ";" sub-entries in an index directive; "!" marks main ones.
        clean = re.sub(r"[,;]+", " ", word).strip().lstrip("!").strip()
        if clean:
            words.setdefault(clean.lower(), clean)
    return list(words.values())


def _words(text: str) -> str:
    """Lower case, punctuation as spaces: ``torch.inference_mode()`` -> `` torch inference mode ``."""
    return " " + " ".join(re.split(r"[^0-9a-z]+", text.lower())).strip() + " "


def subject_keywords(tip: tipmeta.Tip) -> set[str]:
    """The keywords naming what the tip is about, rather than what it mentions on the way.

    The first keyword is the tip's subject by the contract's convention; any other keyword
    counts when the tip's title, its takeaway, or a claim it examines (as restated and as quoted
    in conf/claims.toml) names it. Search ranks the tip first for these; it lists the tip
    after the other results for the rest (they stay in the general index too).
    """
    keywords = search_keywords(tip)
    claims = tipmeta.claims()
    told = _words(" ".join([tip.title, tip.takeaway,
                            *(claims[c]["claim"] + " " + claims[c]["quote"] for c in tip.claims)]))
    subject = set(keywords[:1])
    subject |= {k for k in keywords if _words(k).strip() and _words(k) in told}
    return subject


def _same(tip: tipmeta.Tip, ref: str) -> bool:
    ref = ref.strip().removesuffix(".py").strip("/")
    return ref in (tip.name, f"{tip.topic}/{tip.name}", tip.docname)


def related_tips(tip: tipmeta.Tip, tips: tuple[tipmeta.Tip, ...] | list[tipmeta.Tip] | None = None,
                 limit: int = 3) -> list[tipmeta.Tip]:
    """The tip's ``related`` field first, then the tips sharing most claims and tags with it."""
    tips = gallery_tips(tip) if tips is None else tips
    others = [t for t in tips if t.name != tip.name]
    chosen: list[tipmeta.Tip] = []
    for ref in tip.related:
        match = next((t for t in others if _same(t, ref)), None)
        if match is None:
            logger.warning("%s: sphinx_gallery_tips_related: no tip named %r", tip.path.name, ref)
        elif match not in chosen:
            chosen.append(match)

    def score(other: tipmeta.Tip) -> int:
        return (3 * len(set(tip.claims) & set(other.claims))
                + 2 * len(set(tip.tags) & set(other.tags))
                + (1 if other.topic == tip.topic else 0))

    ranked = sorted((t for t in others if t not in chosen and score(t) >= 2),
                    key=lambda t: (-score(t), t.title.lower()))
    return chosen + ranked[:max(0, limit - len(chosen))]


# --- the manifest and the generated pages ----------------------------------------------------

def _dirs(app: Sphinx) -> tuple[Path, Path]:
    from tips_pages import _gallery_dirs

    return _gallery_dirs(app)


def _topic_order(tip: tipmeta.Tip) -> tuple:
    topics = list(tipmeta.vocab()["topics"])
    return (topics.index(tip.topic) if tip.topic in topics else len(topics), tip.name)


def manifest(app: Sphinx) -> list[dict]:
    """What each card shows, in gallery order (topic, then file name)."""
    _, out_dir = _dirs(app)
    rows = []
    for tip in sorted(app.env.tips_metadata, key=_topic_order):  # type: ignore[attr-defined]
        record = gallery.load_result(out_dir / tip.topic / tip.path.name) or {}
        rows.append({
            "name": tip.name, "docname": tip.docname, "title": tip.title, "topic": tip.topic,
            "takeaway": tip.takeaway, "tags": list(tip.tags), "devices": list(tip.devices),
            "kind": tip.kind, "min_torch": tip.min_torch, "claims": list(tip.claims),
            "verdict": record.get("verdict"), "measured_on": record.get("device"),
        })
    return rows


def _write_if_changed(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def generate(app: Sphinx) -> None:
    """builder-inited, after the tips ran: the manifest, one page per tag, the tag index."""
    examples_dir, _ = _dirs(app)
    _BUILD_TIPS[examples_dir.resolve()] = tuple(app.env.tips_metadata)  # type: ignore[attr-defined]
    rows = manifest(app)
    gen = Path(app.srcdir) / GENERATED
    _write_if_changed(gen / MANIFEST, json.dumps(rows, indent=1, sort_keys=True) + "\n")

    vocab_tags = tipmeta.vocab()["tags"]
    used = [t for t in vocab_tags if any(t in r["tags"] for r in rows)]
    tag_dir = gen / TAGS_DIR
    for tag in used:
        n = sum(tag in r["tags"] for r in rows)
        title = f"Tag: {tag}"
        _write_if_changed(tag_dir / f"{tag}.rst", "\n".join([
            f".. _tips-tag-{tag}:", "",
            title, "=" * len(title), "",
            f"{vocab_tags[tag]} {n} tip{'s' if n != 1 else ''} carry this tag.", "",
            ".. tip-cards::", f"   :tag: {tag}", "",
        ]))
    for stale in tag_dir.glob("*.rst"):
        if stale.stem != "index" and stale.stem not in used:
            stale.unlink()
    lines = [
        ".. _tips-tags:", "",
        "Tips by tag", "===========", "",
        "Every tag in use, with the tips that carry it. The home page filters by tag, verdict",
        "and device at once.", "",
        ".. toctree::", "   :maxdepth: 1", "",
    ]
    for tag in used:
        n = sum(tag in r["tags"] for r in rows)
        lines.append(f"   {tag} ({n}) <{tag}>")
    _write_if_changed(tag_dir / "index.rst", "\n".join(lines) + "\n")
    app.env.tips_tags_used = set(used)  # type: ignore[attr-defined]


# --- the card grid ---------------------------------------------------------------------------

def _chip(text: str, cls: str) -> nodes.inline:
    return nodes.inline(text, text, classes=[cls])


class TipCards(SphinxDirective):
    """One card per tip (all tips, or those with ``:tag:``); ``:filter:`` adds the filter bar."""

    has_content = False
    option_spec = {"tag": directives.unchanged_required, "filter": directives.flag}

    def run(self) -> list[nodes.Node]:
        path = Path(self.env.srcdir) / GENERATED / MANIFEST
        self.env.note_dependency(str(path))
        rows = json.loads(path.read_text(encoding="utf-8"))
        tag = self.options.get("tag")
        if tag:
            rows = [r for r in rows if tag in r["tags"]]
        out: list[nodes.Node] = []
        if "filter" in self.options:
            out.append(nodes.raw(
                "", '<div id="tip-filter" class="tip-filter" hidden></div>\n', format="html"))
        grid = nodes.container(classes=["tip-cards"])
        for row in rows:
            grid += self._card(row)
        out.append(grid)
        return out

    def _inline(self, text: str) -> list[nodes.Node]:
        parsed, messages = self.parse_inline(text, lineno=self.lineno)
        return [*parsed, *messages]

    def _card(self, row: dict) -> nodes.container:
        verdict = row["verdict"] or "not-run"
        classes = ["tip-card", f"tc-verdict-{verdict}", f"tc-topic-{row['topic']}"]
        classes += [f"tc-tag-{t}" for t in row["tags"]] + [f"tc-device-{d}" for d in row["devices"]]
        card = nodes.container(classes=classes)

        link = nodes.reference("", "", *self._inline(row["title"]), internal=True, refuri="#",
                               classes=["tip-card-link"])
        link["tips_target"] = row["docname"]
        card += nodes.paragraph("", "", link, classes=["tip-card-title"])

        badges = nodes.paragraph(classes=["tip-card-badges"])
        badges += nodes.inline(verdict, verdict, classes=["tip-verdict", f"tip-verdict-{verdict}"])
        badges += nodes.Text(" ")
        badges += _chip(f"{row['kind']} · since torch {row['min_torch']}", "tip-card-kind")
        card += badges

        card += nodes.paragraph("", "", *self._inline(row["takeaway"]), classes=["tip-card-takeaway"])

        meta = nodes.paragraph(classes=["tip-card-meta"])
        for t in row["tags"]:
            meta += _chip(t, "tip-tag")
            meta += nodes.Text(" ")
        for d in row["devices"]:
            meta += _chip(d, "tip-device")
            meta += nodes.Text(" ")
        card += meta
        return card


def resolve_links(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """doctree-resolved: card titles point at their tip, tag badges at their tag page."""
    builder = app.builder
    if builder.format != "html":
        return
    for ref in list(doctree.findall(nodes.reference)):
        target = ref.get("tips_target")
        if target:
            ref["refuri"] = builder.get_relative_uri(docname, target)
    used = getattr(app.env, "tips_tags_used", set())
    for chip in list(doctree.findall(nodes.inline)):
        if "tip-tag" not in chip["classes"] or isinstance(chip.parent, nodes.reference):
            continue
        tag = chip.astext()
        if tag not in used:
            continue
        ref = nodes.reference("", "", internal=True, classes=["tip-tag-link"],
                              refuri=builder.get_relative_uri(docname, f"{GENERATED}/{TAGS_DIR}/{tag}"))
        chip.replace_self(ref)
        ref += chip


def keep_index_entries(app: Sphinx, doctree: nodes.document) -> None:
    """doctree-read: record the page's index entries in the environment as it is read.

    Sphinx 9.0's search index takes index entries only from the pages it writes in this build,
    and the environment is saved before that: after an incremental build, the unchanged pages'
    entries (the tips' search keywords) would be missing from searchindex.js. Stored at read
    time, in the very dict the search index uses, they are saved with the environment.
    """
    store = getattr(app.env, "_search_index_index_entries", None)
    if not isinstance(store, dict):
        return
    from sphinx import addnodes
    from sphinx.util.index_entries import split_index_msg

    found: set[tuple[str, str, str]] = set()
    for node in doctree.findall(addnodes.index):
        for entry_type, value, target_id, main, *_ in node["entries"]:
            try:
                parts = split_index_msg(entry_type, value)
            except ValueError:
                continue
            found |= {(part, target_id or "", main) for part in parts}
    if found:
        store[app.env.docname] = sorted(found)
    else:
        store.pop(app.env.docname, None)


def forget_index_entries(app: Sphinx, env, docname: str) -> None:
    store = getattr(env, "_search_index_index_entries", None)
    if isinstance(store, dict):
        store.pop(docname, None)


def merge_index_entries(app: Sphinx, env, docnames: set[str], other) -> None:
    """env-merge-info: bring the entries read by a parallel reader (-j N) back."""
    store = getattr(env, "_search_index_index_entries", None)
    theirs = getattr(other, "_search_index_index_entries", None)
    if isinstance(store, dict) and isinstance(theirs, dict):
        store.update({d: theirs[d] for d in docnames if d in theirs})


def setup(app: Sphinx) -> dict:
    app.setup_extension("tips_pages")
    app.add_directive("tip-cards", TipCards)
    # After tips_pages checked every tip's result (builder-inited, priority 900).
    app.connect("builder-inited", generate, priority=950)
    app.connect("doctree-resolved", resolve_links)
    app.connect("doctree-read", keep_index_entries)
    app.connect("env-purge-doc", forget_index_entries)
    app.connect("env-merge-info", merge_index_entries)
    app.add_js_file("tips_filter.js", loading_method="defer")
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
