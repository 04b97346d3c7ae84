"""Find any tip fast: the card grid, tag pages, the claims page and related tips.

* ``.. tip-cards::`` renders one card per tip (``templates/cards.rst.jinja``): its thumbnail,
  title, the claim it judges and each device's verdict with its key figure, its takeaway, tags
  and devices. ``:filter:`` adds the filter bar that ``_static/tips_filter.js`` fills in;
  ``:tag: <tag>`` keeps the tips with that tag. Cards carry their facets as classes
  (``tc-d-cuda-older-tip-version-wrong``: a device's state and verdict together;
  ``tc-tag-autograd``), which is all the script reads.
* At builder-inited, once the views exist, :func:`generate` writes ``generated/tips_manifest.json``
  (what every card shows), one page per tag in use, the tag index and the claims page, each from
  its template. Pages showing cards depend on the manifest, so a new tip or a changed verdict
  re-reads them and nothing else.
* Every ``:tip-tag:`` badge on the site links to its tag page.
* A device's state is shown in the words of the one table, :data:`.vocabulary.STATES`, through
  :mod:`.view` (``DeviceView.label``: ``holds``, ``holds, older tip version (2026-11-20)``,
  ``not measured``, ``not applicable``) in a badge styled by its token
  (``DeviceView.token``): :func:`state_badge` writes the ``:tip-state:`` role for it, which the
  cards, the claims page and any template use. The filter's chips read the same words
  (:func:`filter_words`).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from tipsite import records, tipmeta
from tipsite.sphinxext import state, view
from tipsite.sphinxext.render import Rst, render

logger = logging.getLogger(__name__)

GENERATED = "generated"
TAGS_DIR = "tags"
MANIFEST = "tips_manifest.json"


def _topic_order(tip: tipmeta.Tip) -> tuple:
    topics = list(tipmeta.vocab()["topics"])
    return (topics.index(tip.topic) if tip.topic in topics else len(topics), tip.name)


def state_tokens() -> set[str]:
    """Every token a device's state can have: the vocabulary's verdicts and the other states'."""
    return {*records.verdicts(), *(t for k, t in view.STATE_TOKENS.items() if k != "measured")}


def verdict_words() -> list[str]:
    """The verdicts a reader filters by (the vocabulary's, but tipkit's "busy", which decides
    nothing: a busy run reads "not measured: machine busy")."""
    return [v for v in records.verdicts() if v != state.BUSY]


def state_badge(device: view.DeviceView) -> Rst:
    """``:tip-state:`holds, older tip version (2026-11-20) <older-tip-version>``` for one device."""
    if device.token not in state_tokens():
        return Rst("")
    return Rst(f":tip-state:`{device.label} <{device.token}>`")


_STATE_ROLE = re.compile(r"^(?P<label>[^`<>]+?)\s*<(?P<token>[a-z][a-z-]*)>$")


def state_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``:tip-state:`LABEL <TOKEN>```: LABEL in a badge of class ``tip-verdict-TOKEN``."""
    m = _STATE_ROLE.match(" ".join(text.split()))
    if not m or m.group("token") not in state_tokens():
        msg = inliner.reporter.error(f"tip-state: {text!r} is not 'LABEL <TOKEN>' with a known token",
                                     line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    label, token = m.group("label"), m.group("token")
    return [nodes.inline(label, label, classes=["tip-verdict", f"tip-verdict-{token}"])], []


def filter_words() -> dict[str, dict[str, str]]:
    """What the filter's chips say for each value of a card's classes: a verdict in its word, a
    state in its word (``older-tip-version`` -> ``older tip version``), a device in its name
    (``cuda`` -> ``CUDA``)."""
    return {"verdict": {v: v for v in verdict_words()},
            "state": {s["token"]: s["word"] for s in state.STATES.values()},
            "device": {d: records.device_word(d) for d in tipmeta.vocab()["devices"]}}


def manifest_rows(app: Sphinx) -> list[dict]:
    """What each card shows, in gallery order (topic, then file name)."""
    views = state.views(app)
    rows = []
    for tip in sorted(state.tips(app), key=_topic_order):
        tip_view = views.get(tip.name)
        devices = []
        for d in (tip_view.all_devices if tip_view else []):
            devices.append({"device": d.device, "word": d.word, "state": d.state,
                            "state_token": d.state_token, "date": d.date,
                            "verdict": d.verdict, "label": d.label, "token": d.token,
                            "badge": str(state_badge(d)),
                            "key": d.key_text if d.state == "measured" else "",
                            "where": d.where})
        rows.append({
            "name": tip.name, "docname": tip.docname, "title": tip.title, "topic": tip.topic,
            "takeaway": tip.takeaway, "statement": tip_view.statement if tip_view else tip.title,
            "tags": list(tip.tags), "devices": list(tip.devices), "kind": tip.kind,
            "min_torch": tip.min_torch, "claims": list(tip.claims), "verdicts": devices,
            "classes": tip_view.card_classes() if tip_view else ["tip-card"],
            "thumb": f"/{tip.docname.rsplit('/', 1)[0]}/images/thumb/sphx_glr_{tip.name}_thumb.png",
        })
    return rows


def _write_if_changed(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def generate(app: Sphinx) -> None:
    """builder-inited, after the views: the manifest, tag pages, the tag index, the claims page,
    the home page's summary of what is current and the list of tips without a current result."""
    rows = manifest_rows(app)
    gen = Path(app.srcdir) / GENERATED
    _write_if_changed(gen / MANIFEST, json.dumps(rows, indent=1, sort_keys=True) + "\n")

    vocab_tags = tipmeta.vocab()["tags"]
    used = [t for t in vocab_tags if any(t in r["tags"] for r in rows)]
    tag_dir = gen / TAGS_DIR
    for tag in used:
        n = sum(tag in r["tags"] for r in rows)
        _write_if_changed(tag_dir / f"{tag}.rst",
                          render("tag.rst.jinja", tag=tag, about=vocab_tags[tag], n=n))
    for stale in tag_dir.glob("*.rst"):
        if stale.stem != "index" and stale.stem not in used:
            stale.unlink()
    counts = {tag: sum(tag in r["tags"] for r in rows) for tag in used}
    _write_if_changed(tag_dir / "index.rst", render("tags_index.rst.jinja", counts=counts))
    app.env.tips_tags_used = set(used)  # type: ignore[attr-defined]
    _write_if_changed(gen / "claims.rst", claims_page(rows))
    summary, missing = currency(app)
    _write_if_changed(gen / CURRENT_SUMMARY, summary)
    _write_if_changed(gen / "not_current.rst", missing)


# The home page includes this (not a document of its own: ".inc" is no source suffix).
CURRENT_SUMMARY = "current_summary.rst.inc"


def currency_data(views: dict) -> list[dict]:
    """Per device: how many tips run on it, how many have a current result, an older tip
    version's, none; per machine class, current and older counts; the tips without a current
    result with their state's badge."""
    out = []
    for device in records.devices():
        shown = [(v, v.devices[device]) for v in views.values() if device in v.devices]
        classes: dict[str, dict] = {}
        for _, d in shown:
            if d.state in ("measured", "stale") and d.record:
                name = records.machine_class(d.record, device)
                c = classes.setdefault(name, {"name": name, "current": 0, "stale": 0})
                c["current" if d.state == "measured" else "stale"] += 1
        missing = [{"docname": v.tip.docname, "title": v.tip.title, "badge": str(state_badge(d)),
                    "machine_class": records.machine_class(d.record, device) if d.record else ""}
                   for v, d in sorted(shown, key=lambda vd: _topic_order(vd[0].tip))
                   if d.state != "measured"]
        out.append({"device": device, "word": records.device_word(device), "runs": len(shown),
                    "current": sum(d.state == "measured" for _, d in shown),
                    "stale": sum(d.state == "stale" for _, d in shown),
                    "not_measured": sum(d.state == "not measured" for _, d in shown),
                    "classes": sorted(classes.values(), key=lambda c: (-c["current"], c["name"])),
                    "missing": missing})
    return out


def currency(app: Sphinx) -> tuple[str, str]:
    """The home page's summary of what is current and the page of the tips without a current
    result (``generated/not_current``)."""
    from tipsite.sphinxext.vocabulary import state_words

    data = [d for d in currency_data(state.views(app)) if d["runs"]]
    words = state_words()
    return (render("current_summary.rst.jinja", devices=data, words=words),
            render("not_current.rst.jinja", devices=data, words=words))


def claims_page(rows: list[dict]) -> str:
    by_claim: dict[str, list[dict]] = {}
    for row in rows:
        for cid in row["claims"]:
            by_claim.setdefault(cid, []).append(row)
    sources = []
    claims = tipmeta.claims()
    for sid, src in tipmeta.sources().items():
        own = [{**c, "tips": by_claim.get(cid, [])} for cid, c in claims.items()
               if cid.startswith(sid + "-")]
        sources.append({**src, "id": sid, "claims": own})
    return render("claims.rst.jinja", sources=sources)


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
        words = html.escape(json.dumps(filter_words(), sort_keys=True), quote=True)
        text = render("cards.rst.jinja", rows=rows, filter="filter" in self.options, words=words)
        container = nodes.container()
        self.state.nested_parse(StringList(text.splitlines(), source="tip-cards"),
                                self.content_offset, container)
        return container.children


class TipsStates(SphinxDirective):
    """``.. tips-states::``: the verdicts (conf/vocab.toml) and a device's states (vocabulary.STATES)
    as a table, each in the word every page shows, its badge and its meaning: the one table, on
    the page that explains the site."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from tipsite import tipmeta as meta

        meanings = meta.vocab()["verdicts"]
        rows = [(f":tip-verdict:`{v}`", "verdict", meanings[v]) for v in verdict_words()]
        for key, st in state.STATES.items():
            if key == "measured":
                rows.append((f"**{st['word']}**", "state", st["meaning"]))
            else:
                rows.append((f":tip-state:`{st['word']} <{st['token']}>`", "state", st["meaning"]))
        lines = [".. list-table::", "   :header-rows: 1", "   :class: tips-states", "",
                 "   * - word", "     - what", "     - meaning"]
        for word, what, meaning in rows:
            lines += [f"   * - {word}", f"     - {what}", f"     - {' '.join(meaning.split())}"]
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source="tips-states"), self.content_offset, container)
        return container.children


def link_tags(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """doctree-resolved: tag badges link to their tag page."""
    builder = app.builder
    if builder.format != "html":
        return
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
