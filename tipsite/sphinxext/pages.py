"""Dress each executed tip page: the header under its title, the footer before its downloads.

Both come from templates (``templates/tip_header.rst.jinja``, ``tip_footer.rst.jinja``) filled
from the tip's :class:`~tipsite.sphinxext.view.TipView`. The page's own sphinx-gallery reST is
tidied on the way: the empty code block left where the metadata comments were removed goes, and
the "How this tip measures and decides" cell (the helpers every tip copies) folds into a
``<details>`` block so that the tip's own code comes first, and every figure's alt text says
what it shows (:func:`.figures.set_alt_texts`, from the data the tip's record holds).

The computation-times pages sphinx-gallery writes (``sg_execution_times``) lose the script block
that needs jQuery and a CDN (furo ships no jQuery: the page threw ``$ is not defined``); their
table stays, a plain one.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

from sphinx.application import Sphinx

from conf import settings
from tipsite import compat as matrix
from tipsite import devices, records
from tipsite.sphinxext import apis, compat, figures, state
from tipsite.sphinxext.render import Rst, anchor_name, calibration_text, render
from tipsite.sphinxext.view import TipView, column_label
from tipsite.sphinxext.vocabulary import state_words

HELPERS_TITLE = "How this tip measures and decides"
_KEYWORD_CLEAN = re.compile(r"[^\w .()+/'-]+")


def _doc_label(url: str) -> str:
    """``https://.../generated/torch.take_along_dim.html`` -> ``torch.take_along_dim``;
    ``https://.../notes/cuda.html#use-pinned-memory-buffers`` -> ``cuda notes: use pinned memory buffers``."""
    path, _, fragment = url.partition("#")
    stem = path.rstrip("/").rsplit("/", 1)[-1].removesuffix(".html") or path
    if "/generated/" in path:
        return stem
    section = path.rstrip("/").rsplit("/", 2)[-2] if path.count("/") > 3 else ""
    words = f"{stem} {section}".strip() if section in ("notes", "recipes") else stem
    return f"{words}: {fragment.replace('-', ' ')}" if fragment else words


def keywords_context(view: TipView) -> tuple[list[Rst], set[Rst]]:
    from tipsite.sphinxext.search import search_keywords, subject_keywords

    clean = [Rst(_KEYWORD_CLEAN.sub(" ", k).strip()) for k in search_keywords(view.tip)]
    subject = {Rst(_KEYWORD_CLEAN.sub(" ", k).strip()) for k in subject_keywords(view.tip)}
    return [k for k in clean if k], subject


def report_text(view: TipView) -> str:
    """The issue a reader opens to report a wrong verdict: the tip, its version and each device's
    state with its record (torch, machine class, date, what decided it)."""
    version = records.tip_version(view.tip.path)
    lines = [f"Verdict of {view.name} looks wrong", "",
             f"Tip: {view.tip.title} ({view.name}, {view.tip.path.parent.name}/{view.tip.path.name})",
             f"Tip version: code {version.get('code_sha256', '?')[:12]}, "
             f"helpers {version.get('helpers_sha256', '?')[:12]}"]
    for d in view.devices.values():
        if d.state in ("measured", "stale"):
            state_text = f"{d.label}; {d.headline}; {d.where}; {d.when}; from {d.origin or '?'}"
        else:
            state_text = d.label
        lines.append(f"{d.word}: {state_text}")
    lines += ["", "What I measured or read instead (machine, torch version, figures):", ""]
    return "\n".join(lines)


def report_url(view: TipView) -> str | None:
    """A new issue in the project's tracker (settings.repo_url) with the title and the text of
    :func:`report_text` filled in; None when the address is not a plain https:// one."""
    repo = settings.repo_url()
    if not repo or not re.fullmatch(r"https://[\w.-]+(/[\w.-]+)*", repo):
        return None
    title, _, body = report_text(view).partition("\n\n")
    query = urllib.parse.urlencode({"title": title, "body": body})
    return f"{repo}/issues/new?{query}"


def search_errors(tip) -> list[str]:
    """The tip's declared error lines as the search indexes them: what a pasted line keeps
    (tips_search.js ``pastedTerms``: no numbers, paths, addresses or device indices)."""
    from tipsite.sphinxext.search import pasted_words

    return [pasted_words(e) for e in tip.errors]


def header(view: TipView, compat_page: bool = True) -> str:
    keywords, subject = keywords_context(view)
    docs = [(_doc_label(u), Rst(u)) for u in view.tip.docs]
    rule = (view.record or next(iter(view.columns), {}) or {}).get("rule", "")
    # One rule, unless the measured devices' records word it differently: then each its own.
    by_device = view.device_rules
    device_rules = by_device if len({r for _, r in by_device}) > 1 else []
    chart = Rst(compat.chart_anchor(view.name)) if compat_page and compat.has_chart(view.name) else None
    from tipsite.sphinxext.cards import state_badge

    return render("tip_header.rst.jinja", view=view, keywords=keywords, subject=subject, docs=docs,
                  rule=rule, device_rules=device_rules,
                  badges={d.device: state_badge(d) for d in view.devices.values()},
                  figures_label=Rst(f"tip-figures-{anchor_name(view.name)}"),
                  measured_label=Rst(f"tip-measured-{anchor_name(view.name)}"),
                  report_label=Rst(f"tip-report-{anchor_name(view.name)}"),
                  checker_label=Rst(f"tip-checker-{anchor_name(view.name)}"),
                  report_url=report_url(view), compat_page=compat_page, compat_chart=chart,
                  words=state_words(), errors=search_errors(view.tip))


def _provenance(record: dict, current: dict, source: str) -> str:
    hosts = record["hosts"]
    machine = []
    for device, host in hosts.items():
        extra = devices.get(device).describe(host) if device in devices.DEVICES else []
        machine.append(f"{records.device_word(device)} {host['name']}"
                       + (f" ({', '.join(e for e in extra if e)})" if any(extra) else ""))
    version = ("the tip's current source" if records.is_current(record, current)
               else "an older version of the tip")
    for device, decision in (record.get("verdicts") or {}).items():
        if decision.get("calibration"):
            machine.append(f"{records.device_word(device)} calibration: "
                           + calibration_text(decision["calibration"]))
            break
    return (f"{'; '.join(machine)}; torch {record['torch']}, Python {record['python']}; build "
            f"threads {record['build_threads']}; {record['date']}; {version}; from {source}.")


def footer(view: TipView, srcdir=None) -> str:
    current = records.tip_version(view.tip.path)
    columns = [{"label": column_label(r), "stale": not records.is_current(r, current),
                "provenance": _provenance(r, current, view.source(r))}
               for r in view.columns]
    skipped: dict[str, list[str]] = {}
    for r in view.columns:
        for why in r.get("skipped") or []:
            skipped.setdefault(why, []).append(column_label(r))
    skipped_rows = [(why, "" if len(where) == len(view.columns) else "; ".join(where))
                    for why, where in skipped.items()]
    rows = view.comparison_rows()
    devices_figure = figures.devices_figure(view, srcdir) if srcdir is not None else None
    if devices_figure:
        devices_figure = {k: Rst(v) if k == "path" else v for k, v in devices_figure.items()}
    used = [(name, Rst(apis.anchor(name))) for name in apis.tip_apis(view.tip, view.apis)]
    return render("tip_footer.rst.jinja", view=view, rows=rows, columns=columns,
                  measured_on=view.measured_on(),
                  measured_summary=view.measured_summary(),
                  measured_label=Rst(f"tip-measured-{anchor_name(view.name)}"),
                  devices_figure=devices_figure, apis=used,
                  devices=list(view.devices.values()), skipped=skipped_rows,
                  multi_device=len({r["device"] for r in rows}) > 1,
                  figures_label=Rst(f"tip-figures-{anchor_name(view.name)}"),
                  report_label=Rst(f"tip-report-{anchor_name(view.name)}"),
                  checker_label=Rst(f"tip-checker-{anchor_name(view.name)}"),
                  report_url=report_url(view), report_text=report_text(view),
                  words=state_words())


def _fold_helpers(text: str) -> str:
    """Wrap the helpers cell's code in a collapsed <details> block: the tip's own code first."""
    m = re.search(rf"^{re.escape(HELPERS_TITLE)}\n-+\n", text, re.M)
    if not m:
        return text
    start = text.find("\n.. code-block:: Python", m.end())
    end = text.find("\n.. GENERATED FROM PYTHON SOURCE LINES", start + 1)
    if start < 0 or end < 0:
        return text
    opening = ('\n.. raw:: html\n\n   <details class="tip-helpers"><summary>Show the helpers '
               "(the same in every tip)</summary>\n")
    closing = "\n.. raw:: html\n\n   </details>\n"
    return text[:start] + opening + text[start:end] + closing + text[end:]


_OUTPUT_BLOCK = re.compile(r"(\.\. rst-class:: sphx-glr-script-out\n\n \.\. code-block:: none\n\n)"
                           r"((?:    .*\n|[ \t]*\n)*)")


def cap_output(text: str, limit: int) -> str:
    """Keep the first ``limit`` bytes of the tip's printed output; say on the page what was cut."""
    used, cut = 0, 0

    def keep(m: re.Match) -> str:
        nonlocal used, cut
        body = m.group(2)
        size = len(body.encode("utf-8"))
        if used + size <= limit:
            used += size
            return m.group(0)
        kept = []
        for line in body.splitlines(keepends=True):
            n = len(line.encode("utf-8"))
            if used + n > limit:
                cut += n
                continue
            used += n
            kept.append(line)
        return m.group(1) + "".join(kept) + "\n"

    text = _OUTPUT_BLOCK.sub(keep, text)
    if cut:
        note = (f"\n.. note::\n\n   This page shows the first {limit // 1024} KiB of what the tip "
                f"printed; {cut // 1024 or 1} KiB more was cut. Run the tip to see all of it.\n\n")
        marker = text.find(".. _sphx_glr_download_")
        text = text[:marker] + note + text[marker:] if marker >= 0 else text + note
    return text


def _drop_empty_code_blocks(text: str) -> str:
    """sphinx-gallery leaves an empty code block where the metadata comments were."""
    return re.sub(r"\n\.\. code-block:: Python\n   :dedent: 1\n(\s*\n)+(?=\.\. GENERATED)", "\n\n", text)


_DATATABLE = re.compile(r"^(?P<indent>[ \t]*)\.\. raw:: html\n\n(?:(?P=indent)[ \t]+.*\n|[ \t]*\n)*?"
                        r"(?=(?P=indent)\.\. list-table::)", re.M)


def plain_times_table(text: str, others: list[str] = ()) -> str:
    """sphinx-gallery's computation-times page without its jQuery DataTable script (and the
    CDN styles it loads): the table is a plain one, sorted slowest first by sphinx-gallery.
    ``others``: the docnames of the other computation-times pages, linked at the end."""
    text = _DATATABLE.sub("", text).replace(":class: table table-striped sg-datatable",
                                            ":class: sg-times")
    if others:
        links = ", ".join(f":doc:`{d.rsplit('/', 2)[-2] if d.count('/') else 'all'} </{d}>`"
                          for d in others)
        text += f"\n\nComputation times per gallery and topic: {links}.\n"
    return text


def dress_tip_page(app: Sphinx, docname: str, source: list[str]) -> None:
    """source-read: the header under the title, the footer before the downloads."""
    if docname == "sg_execution_times" or docname.endswith("/sg_execution_times"):
        others = sorted(d for d in app.env.found_docs
                        if d.endswith("/sg_execution_times")) if docname == "sg_execution_times" else []
        source[0] = plain_times_table(source[0], others)
        return
    tip = state.tip_for_doc(app, docname)
    if tip is None:
        return
    view = state.views(app).get(tip.name)
    if view is None or view.record is None:
        if not state.executes(app, tip):
            return  # a shard build: another shard executes this tip and dresses its page
        state.stop(f"{tip.path.name}: no result record to show on its page")
    text = cap_output(_drop_empty_code_blocks(source[0]), settings.TIPS_OUTPUT_MAX_BYTES)
    text = _fold_helpers(text)
    text = figures.set_alt_texts(text, tip.name, view.record)
    lines = text.split("\n")
    # sphinx-gallery writes ".. _sphx_glr_<...>.py:", a blank line, the title, its underline.
    label = next(i for i, ln in enumerate(lines) if ln.startswith(".. _sphx_glr_"))
    under = next(i for i in range(label + 1, len(lines)) if lines[i] and set(lines[i]) == {"="})
    has_compat = app.config.tips_compat_page in app.env.found_docs
    if has_compat:  # the header links to the tip's chart there when the matrix has its figure
        for release in settings.TORCH_MATRIX:
            app.env.note_dependency(str(matrix.data_path(release)))
    lines.insert(under + 1, "\n" + header(view, compat_page=has_compat))
    text = "\n".join(lines)
    marker = ".. _sphx_glr_download_"
    cut = text.find(marker)
    if cut < 0:
        state.stop(f"{tip.path.name}: sphinx-gallery page has no download section")
    source[0] = (text[:cut] + footer(view, srcdir=app.srcdir) + "\n"
                 + text[cut:])
    dump = os.environ.get("TIPS_DUMP_DRESSED")
    if dump:  # for debugging a page's reST: the dressed source Sphinx parses
        Path(dump).mkdir(parents=True, exist_ok=True)
        (Path(dump) / f"{tip.name}.rst").write_text(source[0], encoding="utf-8")
