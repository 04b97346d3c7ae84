"""Sphinx extension: enforce the tip contract and dress each executed tip page.

* Before sphinx-gallery executes anything, every tip's metadata is validated
  (:mod:`conf.tipmeta`); a bad tip stops the build with ``<file>: <field>: <problem>``.
* After execution, every tip must have left a result record (its ``RESULT`` plus provenance);
  a tip that ran without one stops the build, named.
* Each tip page gets, under its title, the verdict the tip computed and the article claims it
  examines (quoted from ``conf/claims.toml``), and, at the end, the figures it measured and a
  provenance line: torch version, device, threads, date of the build.
* A "claims" page lists every seed claim with the tips that examine it.
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

from conf import gallery, results, tipmeta

logger = logging.getLogger(__name__)

GENERATED = "generated"


def _gallery_dirs(app: Sphinx) -> tuple[Path, Path]:
    conf = app.config.sphinx_gallery_conf
    examples, out = conf["examples_dirs"], conf["gallery_dirs"]
    examples = examples[0] if isinstance(examples, (list, tuple)) else examples
    out = out[0] if isinstance(out, (list, tuple)) else out
    src = Path(app.srcdir)
    return (src / examples).resolve(), (src / out).resolve()


def _tips(app: Sphinx) -> list[tipmeta.Tip]:
    return app.env.tips_metadata  # type: ignore[attr-defined]


def validate_tips(app: Sphinx) -> None:
    """builder-inited, before sphinx-gallery: refuse to build a gallery that breaks the contract."""
    examples_dir, _ = _gallery_dirs(app)
    try:
        tips = tipmeta.read_all(examples_dir)
    except ValueError as exc:
        raise ExtensionError(str(exc)) from None
    if not tips:
        raise ExtensionError(f"no tips found under {examples_dir}")
    app.env.tips_metadata = tips  # type: ignore[attr-defined]
    _write_claims_page(app, tips)


def _executes(app: Sphinx, tip: tipmeta.Tip) -> bool:
    """Whether this build executes ``tip``: all tips, or only a shard's (conf/shards.py)."""
    pattern = app.config.sphinx_gallery_conf.get("filename_pattern", r"/tip_")
    return re.search(pattern, str(tip.path)) is not None


def check_results(app: Sphinx) -> None:
    """builder-inited, after sphinx-gallery: every tip this build executes must have recorded a RESULT."""
    _, out_dir = _gallery_dirs(app)
    missing = [
        f"{tip.path.name}: ran without defining RESULT (or its result record is missing)"
        for tip in _tips(app)
        if _executes(app, tip) and gallery.load_result(out_dir / tip.topic / tip.path.name) is None
    ]
    if missing:
        raise ExtensionError("tips without a result:\n" + "\n".join(missing))


def load_result_sets(app: Sphinx) -> None:
    """builder-inited: read the result sets named by ``TIPS_RESULT_SETS`` (conf/results.py)."""
    try:
        paths = results.paths_from_env()
        app.env.tips_result_sets = results.load_sets(paths)  # type: ignore[attr-defined]
    except results.ResultSetError as exc:
        raise ExtensionError(str(exc)) from None
    app.env.tips_result_sets_new_fp = results.fingerprint(paths)  # type: ignore[attr-defined]
    if paths:
        logger.info(f"tips_pages: merging {len(paths)} result set(s): " + ", ".join(map(str, paths)))


def result_sets_outdate_tips(app, env, added, changed, removed) -> list[str]:
    """env-get-outdated: when the given result sets change, every tip page is dressed again."""
    new = env.tips_result_sets_new_fp
    if getattr(env, "tips_result_sets_fp", None) == new:
        return []
    env.tips_result_sets_fp = new
    _, out_dir = _gallery_dirs(app)
    prefix = out_dir.relative_to(Path(app.srcdir).resolve()).as_posix()
    docs = {f"{prefix}/{tip.topic}/{tip.name}" for tip in _tips(app)}
    return sorted(docs & set(env.found_docs) - set(added))


def _tip_for_doc(app: Sphinx, docname: str) -> tipmeta.Tip | None:
    _, out_dir = _gallery_dirs(app)
    prefix = out_dir.relative_to(Path(app.srcdir).resolve()).as_posix()
    for tip in _tips(app):
        if docname == f"{prefix}/{tip.topic}/{tip.name}":
            return tip
    return None


def _badge(verdict: str) -> str:
    return f":tip-verdict:`{verdict}`"


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def header_rst(tip: tipmeta.Tip, record: dict) -> str:
    claims = tipmeta.claims()
    sources = tipmeta.sources()
    lines = [
        ".. container:: tip-header",
        "",
        f"   **Verdict:** {_badge(record['verdict'])} on {_device_words(record)},"
        f" torch {record['torch']}.",
        "",
        f"   *Rule:* {record['rule']}",
        "",
    ]
    key = record.get("key")
    if key:
        spread = ""
        if key.get("low") is not None and key.get("high") is not None:
            spread = f" (spread {_fmt(key['low'])} to {_fmt(key['high'])})"
        value = f"{_fmt(key['value'])} {key['unit']}".strip()  # an empty unit must not end in a space
        lines += [f"   *Key figure:* {key['name']} = **{value}**{spread}", ""]
    lines += [
        f"   *Tags:* {', '.join(f':tip-tag:`{t}`' for t in tip.tags)} · "
        f"*Devices:* {', '.join(tip.devices)} · *Since torch* {tip.min_torch}",
        "",
    ]
    if tip.claims:
        # The source article, and the claim's anchor on the claims page (which quotes it).
        examined = "; ".join(
            f":ref:`{cid} <claim-{cid}>` (*{sources[cid.split('-')[0]]['title']}*,"
            f" {sources[cid.split('-')[0]]['kind']}, {claims[cid]['where']})"
            for cid in tip.claims
        )
        lines += [f"   *Examines claim:* {examined}", ""]
    else:
        lines += ["   *Examines claim:* none of the seed articles' claims; "
                  ":ref:`the claims page <tips-claims>` lists them.", ""]
    from tips_index import api_names, related_tips, search_keywords, subject_keywords

    # py:obj references link to PyTorch's API pages when intersphinx is on (TIPS_INTERSPHINX=1)
    # and render as plain code offline, without a warning.
    apis = [f":py:obj:`{name}`" for name in api_names(tip)]
    pages = [f"`{_doc_label(ref)} <{ref}>`__" for ref in tip.docs]
    if apis or pages:
        lines += [f"   *Documentation:* {', '.join(apis + pages)}", ""]
    related = related_tips(tip)
    if related:
        lines += ["   *Related tips:* " + "; ".join(f":doc:`/{t.docname}`" for t in related), ""]
    keywords = search_keywords(tip)
    if keywords:
        # Main index entries ("!") for what the tip is about: Sphinx's search ranks them above
        # any text match. Other keywords are plain entries, listed after the other results.
        subject = subject_keywords(tip)
        head = [".. index::", *(f"   {'!' if k in subject else ''}single: {k}" for k in keywords), "",
                ".. meta::", f"   :keywords: {', '.join(keywords)}", ""]
        lines = head + lines
    return "\n".join(lines) + "\n"


def _doc_label(url: str) -> str:
    """``https://.../generated/torch.take_along_dim.html`` -> ``torch.take_along_dim``."""
    path, _, anchor = url.partition("#")
    stem = path.rstrip("/").rsplit("/", 1)[-1].removesuffix(".html") or path
    return f"{stem} ({anchor})" if anchor else stem


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("_", "\\_").replace("`", "\\`").replace("|", "\\|")


def _device_words(record: dict) -> str:
    kind = "CUDA" if record["device"] == "cuda" else "CPU"
    return f"{kind} ({record['device_name']}, {record['threads']} threads)"


def _value(m: dict) -> str:
    return f"{_fmt(m['value'])} {m['unit']}"


def _spread(m: dict) -> str:
    return f"± {_fmt(m['spread'])} {m['unit']}" if m.get("spread") is not None else "–"


def _provenance(record: dict) -> str:
    return (f"torch {record['torch']}, {_device_words(record)},"
            f" Python {record['python']}, built {record['date']}.")


def footer_rst(tip: tipmeta.Tip, record: dict, others: list[dict] | tuple = ()) -> str:
    """Figures, skipped parts and provenance at the end of a tip page.

    ``record`` is this build's (the run whose output the page shows); ``others`` are records
    of the same tip from the result sets given to the build (``TIPS_RESULT_SETS``, see
    conf/results.py), one per other build configuration. With others, the figures table has
    one column per configuration. A device the tip measures on that no column covers is named
    as not yet measured, with no number.
    """
    columns = [record, *others]
    measured = {c["device"] for c in columns}
    lines = [".. rubric:: Figures measured by this build" if not others
             else ".. rubric:: Figures measured by each build", ""]
    if len(columns) == 1:
        lines += _single_table(record)
    else:
        lines += _multi_table(columns)
    for device in tip.devices:
        if device not in measured:
            word = results.device_word(device)
            why = f"no {word} build's results were given to this build"
            lines += [f"*{word}:* not yet measured on {word}: {why}.", ""]
    skipped: dict[str, list[str]] = {}
    for c in columns:
        for why in c.get("skipped") or []:
            skipped.setdefault(why, []).append(results.column_label(c))
    for why, where in skipped.items():
        label = "" if len(where) == len(columns) else f" ({_escape('; '.join(where))})"
        lines += [f"*Skipped{label}:* {_escape(why)}", ""]
    lines += [
        ".. container:: tip-provenance",
        "",
        f"   Provenance: {_provenance(record)}",
        "",
    ]
    for c in others:
        lines += [f"   Provenance of the {_escape(results.column_label(c))} column: {_provenance(c)}", ""]
    return "\n".join(lines) + "\n"


def _single_table(record: dict) -> list[str]:
    measurements = record.get("measurements") or []
    if not measurements:
        return ["This tip checks a behaviour; it times nothing.", ""]
    lines = [
        ".. list-table::",
        "   :header-rows: 1",
        "   :class: tip-figures",
        "",
        "   * - variant",
        "     - metric",
        "     - value",
        "     - spread",
    ]
    for m in measurements:
        lines += [
            f"   * - {_escape(m['variant'])}",
            f"     - {_escape(m['metric'])}",
            f"     - {_value(m)}",
            f"     - {_spread(m)}",
        ]
    return lines + [""]


def _keyed_measurements(record: dict) -> dict[tuple[str, str, int], dict]:
    seen: dict[tuple[str, str], int] = {}
    out = {}
    for m in record.get("measurements") or []:
        pair = (m["variant"], m["metric"])
        seen[pair] = seen.get(pair, -1) + 1
        out[(*pair, seen[pair])] = m
    return out


def _multi_table(columns: list[dict]) -> list[str]:
    """variant | metric | one column per build configuration: verdict, key figure, measurements."""
    # A row per (variant, metric); a pair a tip reports n times gets n rows, matched in order.
    keyed = [_keyed_measurements(c) for c in columns]
    rows: list[tuple[str, str, int]] = []
    for measurements in keyed:
        for key in measurements:
            if key not in rows:
                rows.append(key)
    lines = [
        ".. list-table::",
        "   :header-rows: 1",
        "   :class: tip-figures tip-figures-devices",
        "",
        "   * - variant",
        "     - metric",
        *(f"     - {_escape(results.column_label(c))}" for c in columns),
        "   * - *verdict*",
        "     - –",
        *(f"     - **{c['verdict']}**" for c in columns),
    ]
    if any(c.get("key") for c in columns):
        name = next(c["key"]["name"] for c in columns if c.get("key"))
        lines += ["   * - *key figure*", f"     - {_escape(name)}"]
        for c in columns:
            key = c.get("key")
            if not key:
                lines.append("     - none reported")
                continue
            spread = ""
            if key.get("low") is not None and key.get("high") is not None:
                spread = f" ({_fmt(key['low'])} to {_fmt(key['high'])})"
            lines.append(f"     - {_fmt(key['value'])} {key['unit']}{spread}")
    for variant, metric, n in rows:
        lines += [f"   * - {_escape(variant)}", f"     - {_escape(metric)}"]
        for measurements in keyed:
            m = measurements.get((variant, metric, n))
            if m is None:
                lines.append("     - not measured")
            else:
                spread = f" {_spread(m)}" if m.get("spread") is not None else ""
                lines.append(f"     - {_value(m)}{spread}")
    if not rows:
        lines += ["   * - *(no timings)*", "     - –", *("     - behaviour checked" for _ in columns)]
    return lines + [""]


def dress_tip_page(app: Sphinx, docname: str, source: list[str]) -> None:
    """source-read: put the verdict and claims under the title, figures and provenance at the end."""
    tip = _tip_for_doc(app, docname)
    if tip is None:
        return
    _, out_dir = _gallery_dirs(app)
    record = gallery.load_result(out_dir / tip.topic / tip.path.name)
    if record is None:
        if not _executes(app, tip):
            return  # a shard build: another shard executes this tip and dresses its page
        raise ExtensionError(f"{tip.path.name}: no result record to show on its page")
    text = source[0]
    lines = text.split("\n")
    # sphinx-gallery writes ".. _sphx_glr_<...>.py:", a blank line, the title, its underline.
    label = next(i for i, ln in enumerate(lines) if ln.startswith(".. _sphx_glr_"))
    under = next(i for i in range(label + 1, len(lines)) if lines[i] and set(lines[i]) == {"="})
    lines.insert(under + 1, "\n" + header_rst(tip, record))
    text = "\n".join(lines)
    marker = ".. _sphx_glr_download_"
    cut = text.find(marker)
    if cut < 0:
        raise ExtensionError(f"{tip.path.name}: sphinx-gallery page has no download section")
    others = results.columns_for(tip.name, record, app.env.tips_result_sets)[1:]  # type: ignore[attr-defined]
    source[0] = text[:cut] + footer_rst(tip, record, others) + "\n" + text[cut:]


def _write_claims_page(app: Sphinx, tips: list[tipmeta.Tip]) -> None:
    """docs/generated/claims.rst: every seed claim, its quote, and the tips examining it."""
    by_claim: dict[str, list[tipmeta.Tip]] = {}
    for tip in tips:
        for cid in tip.claims:
            by_claim.setdefault(cid, []).append(tip)
    lines = [
        ".. _tips-claims:",
        "",
        "The seed claims",
        "===============",
        "",
        "Every claim made by the five source articles, numbered, quoted, and linked to the tips",
        "that examine it. Each tip page shows the verdict its build computed.",
        "",
    ]
    for sid, src in tipmeta.sources().items():
        title = f"{sid}: {src['title']}"
        lines += [title, "-" * len(title), "", f"*{src['kind']}*", ""]
        for cid, c in tipmeta.claims().items():
            if not cid.startswith(sid + "-"):
                continue
            covering = by_claim.get(cid, [])
            links = ", ".join(f":doc:`/{t.docname}`" for t in covering) or "**no tip yet**"
            lines += [
                f".. _claim-{cid}:",
                "",
                f"**{cid}** ({c['where']}) — {_escape(c['claim'])}",
                "",
                f"   \u201c{_escape(c['quote'])}\u201d",
                "",
                f"   Examined by: {links}",
                "",
            ]
    out = Path(app.srcdir) / GENERATED / "claims.rst"
    out.parent.mkdir(exist_ok=True)
    text = "\n".join(lines) + "\n"
    if not out.exists() or out.read_text(encoding="utf-8") != text:
        out.write_text(text, encoding="utf-8")


def setup(app: Sphinx) -> dict:
    from docutils import nodes

    def verdict_role(name, rawtext, text, lineno, inliner, options=None, content=None):
        node = nodes.inline(text, text, classes=["tip-verdict", f"tip-verdict-{text}"])
        return [node], []

    def tag_role(name, rawtext, text, lineno, inliner, options=None, content=None):
        node = nodes.inline(text, text, classes=["tip-tag"])
        return [node], []

    app.add_role("tip-verdict", verdict_role)
    app.add_role("tip-tag", tag_role)
    # sphinx-gallery generates on builder-inited at the default priority (500).
    app.connect("builder-inited", validate_tips, priority=400)
    app.connect("builder-inited", check_results, priority=900)
    app.connect("builder-inited", load_result_sets, priority=950)
    app.connect("env-get-outdated", result_sets_outdate_tips)
    app.connect("source-read", dress_tip_page)
    app.add_css_file("tips.css")
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
