"""Sphinx extension: the ``tips-compat-matrix`` directive renders the torch-version matrix.

It reads what ``nox -s matrix`` recorded, ``docs/_data/compat/torch-<release>.json`` (one file a
release of ``conf.settings.TORCH_MATRIX``, see :mod:`tipsite.compat`), and renders

* ``table``: tips down and releases across: each cell shows passed/failed, the verdict the tip
  computed on that release and its key figure, or "not applicable" (the tip's
  ``min_torch`` is newer) or "missing" (no recorded run: never filled in from another release);
* ``runs``: each release's run: date, device, torch build, Python, doctests;
* ``warnings``: the warnings each tip let through on each release, deprecations first;
* ``charts``: per tip, its key figure on each release it has data for, per device, drawn with
  matplotlib (``generated/compat/<tip>.png``), under the target ``compat-chart-<tip>`` that the
  tip's page links to (:func:`has_chart`).

The page is rebuilt whenever a data file changes (each is a noted dependency).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.util.docutils import SphinxDirective

from conf import settings
from tipsite import compat, records, tipmeta
from tipsite.sphinxext.render import anchor_name, number, quantity

CHARTS_DIR = "generated/compat"


def _esc(text: str) -> str:
    for ch in "\\`*_|<>[]":
        text = text.replace(ch, "\\" + ch)
    return " ".join(text.split())


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _decided(entry: dict) -> dict[str, dict]:
    """Per device: verdict and key figure (entries written before per-device verdicts had one)."""
    if isinstance(entry.get("verdicts"), dict):
        return {d: v for d, v in entry["verdicts"].items() if isinstance(v, dict)}
    if entry.get("verdict"):
        return {entry.get("device") or "cpu": {"verdict": entry["verdict"], "key": entry.get("key")}}
    return {}


def _key_name(entry: dict | None) -> str | None:
    for v in _decided(entry or {}).values():
        if isinstance(v.get("key"), dict) and v["key"].get("name"):
            return v["key"]["name"]
    return None


def cell_lines(entry: dict | None, run: dict | None, current: dict | None = None,
               key_name: str | None = None) -> list[str]:
    """The reST lines of one cell (a tip on a release).

    ``key_name`` is the key figure's name shown in the tip's row; the cell names its own only
    when it differs (an older version of the tip may have measured something else).
    """
    if run is None or entry is None:
        return ["*missing*"]
    stale = "| *stale: an older version of the tip*" if (
        current and not compat.is_current(entry, current)) else None
    status = entry.get("status")
    if status == compat.NOT_APPLICABLE:
        first = f"not applicable (needs torch ≥ {_esc(entry.get('min_torch', '?'))})"
        return [first, "", stale] if stale else [first]
    lines = []
    decided = _decided(entry)
    verdict_rst = "".join(f" {records.device_word(d)} :tip-verdict:`{v['verdict']}`"
                          for d, v in decided.items() if v.get("verdict") in tipmeta.vocab()["verdicts"])
    if status == compat.PASSED:
        lines.append(f"✓ passed{verdict_rst or ' (no verdict on this device)'}")
    else:
        lines.append(f"✗ **failed**{verdict_rst}")
    for v in decided.values():
        key = v.get("key")
        if isinstance(key, dict) and isinstance(key.get("value"), (int, float)):
            name = "" if key.get("name") == key_name else f"{_esc(str(key.get('name', 'key')))}: "
            lines.append(f"| {name}**{_esc(quantity(key['value'], str(key.get('unit', ''))))}**")
    deps = entry.get("deprecations") or 0
    n_warn = len(entry.get("warnings") or [])
    if deps:
        lines.append(f"| ⚠ {deps} deprecation warning{'s' if deps != 1 else ''}")
    elif n_warn:
        lines.append(f"| {n_warn} other warning{'s' if n_warn != 1 else ''}")
    if status == compat.FAILED and entry.get("error"):
        last = [ln for ln in str(entry["error"]).strip().splitlines() if ln.strip()]
        reason = last[-1] if last else "failed"
        lines.append(f"| *{_esc(reason[:160])}*")
    full = compat.full_run(run)
    if entry.get("run") and full and entry["run"] != full["date"]:
        lines.append(f"| re-run {_esc(entry['run'])}")
    if stale:
        lines.append(stale)
    # line blocks need every line to start with "| "; the first line stands alone
    return [lines[0], ""] + lines[1:] if len(lines) > 1 else lines


def run_line(release: str, run: dict | None) -> str:
    if run is None:
        return (f"* **torch {release}**: *missing*: never run here "
                f"(``nox -s \"matrix(torch='{release}')\"``)")
    doc = run.get("doctests") or {}
    doc_words = (f"doctests {doc.get('status')} ({doc.get('passed', 0)} passed, {doc.get('failed', 0)} failed)"
                 if doc else "doctests *missing*")
    device = "CUDA" if run.get("device") == "cuda" else "CPU"
    cuda = f", a CUDA {run['cuda_in_build']} build" if run.get("cuda_in_build") else ", a CPU-only build"
    strict = "; deprecations fail tips (newest release)" if run.get("strict_deprecations") else ""
    full = compat.full_run(run)
    when = (f"every tip run {_esc(full['date'])} ({full['seconds']:.0f} s for {full['tips']} tips)"
            if full else "no complete run recorded")
    if run.get("partial") is not None:
        when += (f"; re-ran {len(run['partial'])} new or edited tip(s) {_esc(run.get('date', '?'))}"
                 f" ({run.get('seconds', 0):.0f} s)")
    return (f"* **torch {release}** (``{_esc(run.get('torch_build', release))}``{cuda}): {when}, on "
            f"{device} ({_esc(run.get('device_name', '?'))}, {run.get('threads', '?')} threads), "
            f"Python {run.get('python', '?')}; {doc_words}{strict}.")


def table_rst(tips: list[tipmeta.Tip], runs: dict[str, dict | None]) -> list[str]:
    releases = list(runs)
    lines = [
        ".. list-table::",
        "   :header-rows: 1",
        "   :class: tips-compat",
        f"   :widths: 32 {' '.join(['17'] * len(releases))}",
        "",
        "   * - tip",
    ]
    lines += [f"     - torch {r}" for r in releases]
    for tip in sorted(tips, key=lambda t: (t.topic, t.name)):
        entries = {r: (runs[r] or {}).get("tips", {}).get(tip.name) for r in releases}
        # the key figure's name, from the newest release that measured one
        key_name = next((_key_name(e) for e in reversed(list(entries.values())) if _key_name(e)), None)
        lines.append(f"   * - :doc:`/{tip.docname}`")
        lines.append("")
        about = f"       ``{tip.name}`` · since torch {_esc(tip.min_torch)}"
        lines.append(about + (f" · key figure: {_esc(key_name)}" if key_name else ""))
        sha = records.tip_version(tip.path) if tip.path.exists() else None
        for release in releases:
            cell = cell_lines(entries[release], runs[release], sha, key_name)
            lines.append(f"     - {cell[0]}")
            lines += [f"       {ln}" if ln else "" for ln in cell[1:]]
    lines.append("")
    return lines


def verdict_changes(tips: list[tipmeta.Tip], runs: dict[str, dict | None]) -> list[tuple[str, str, dict[str, str]]]:
    """``(tip, device, {release: verdict})`` for each tip and device whose verdict differs between
    releases. Only passed runs of the tip's current source count: a stale or failed entry says
    nothing about the release."""
    changes = []
    for tip in sorted(tips, key=lambda t: t.name):
        sha = records.tip_version(tip.path) if tip.path.exists() else None
        seen: dict[str, dict[str, str]] = {}
        for release, run in runs.items():
            entry = (run or {}).get("tips", {}).get(tip.name)
            if not entry or entry.get("status") != compat.PASSED or not compat.is_current(entry, sha):
                continue
            for device, v in _decided(entry).items():
                if v.get("verdict"):
                    seen.setdefault(device, {})[release] = v["verdict"]
        for device, by_release in seen.items():
            if len(set(by_release.values())) > 1:
                changes.append((tip.name, device, by_release))
    return changes


def changes_rst(tips: list[tipmeta.Tip], runs: dict[str, dict | None]) -> list[str]:
    changes = verdict_changes(tips, runs)
    compared = sum(1 for run in runs.values() if run)
    if not changes:
        return [f"No tip's verdict differs between the {compared} recorded releases "
                "(passed runs of each tip's current source, per device).", ""]
    by_doc = {t.name: t.docname for t in tips}
    lines = [f"{len(changes)} tip/device verdict{'s differ' if len(changes) != 1 else ' differs'} between "
             f"the {compared} recorded releases (passed runs of each tip's current source):", ""]
    for name, device, by_release in changes:
        said = ", ".join(f"torch {r} :tip-verdict:`{v}`" for r, v in by_release.items())
        lines.append(f"* :doc:`/{by_doc[name]}` on {records.device_word(device)}: {said}")
    return lines + [""]


def runs_rst(runs: dict[str, dict | None]) -> list[str]:
    return [run_line(r, run) for r, run in runs.items()] + [""]


def warnings_rst(runs: dict[str, dict | None]) -> list[str]:
    lines = []
    for release, run in runs.items():
        for name, entry in sorted((run or {}).get("tips", {}).items()):
            warns = sorted(entry.get("warnings") or [],
                           key=lambda w: (not w.get("deprecation"), w.get("origin") != "tip"))
            for w in warns:
                kind = "deprecation, " if w.get("deprecation") else ""
                lines.append(f"* torch {release}, ``{name}``: {_esc(w.get('category', '?'))} "
                             f"({kind}{_esc(w.get('origin', '?'))}, {_esc(w.get('where', '?'))}): "
                             f"{_esc(w.get('message', ''))}")
    return (lines or ["No recorded run raised a warning."]) + [""]


def chart_points(tip_name: str, runs: dict[str, dict | None]) -> tuple[str | None, str, dict[str, list[dict]]]:
    """The tip's key figure per device across releases: ``(name, unit, {device: [point]})``.

    A point is ``{"release", "value", "low", "high", "stale", "failed"}``; only entries naming
    the key figure the newest release names count (an older version of the tip may have
    measured something else), so every point of a chart measures the same thing.
    """
    entries = {r: (run or {}).get("tips", {}).get(tip_name) for r, run in runs.items()}
    key_name = next((_key_name(e) for e in reversed(list(entries.values())) if _key_name(e)), None)
    unit = ""
    per_device: dict[str, list[dict]] = {}
    for release, entry in entries.items():
        if not entry or entry.get("status") == compat.NOT_APPLICABLE:
            continue
        for device, v in _decided(entry).items():
            key = v.get("key")
            if not isinstance(key, dict) or key.get("name") != key_name:
                continue
            if not isinstance(key.get("value"), (int, float)) or isinstance(key.get("value"), bool):
                continue
            unit = str(key.get("unit", ""))
            per_device.setdefault(device, []).append({
                "release": release, "value": float(key["value"]),
                "low": key.get("low") if isinstance(key.get("low"), (int, float)) else None,
                "high": key.get("high") if isinstance(key.get("high"), (int, float)) else None,
                "failed": entry.get("status") == compat.FAILED,
                "sha256": entry.get("sha256")})
    return key_name, unit, per_device


def _data_stamp() -> tuple:
    return tuple((r, compat.data_path(r).stat().st_mtime_ns if compat.data_path(r).exists() else 0)
                 for r in settings.TORCH_MATRIX)


@lru_cache(maxsize=4)
def _charted(stamp: tuple) -> frozenset[str]:
    runs = compat.load_all()
    names = {n for run in runs.values() for n in (run or {}).get("tips", {})}
    return frozenset(n for n in names if chart_points(n, runs)[2])


def has_chart(tip_name: str) -> bool:
    """Whether the compatibility page draws a chart for this tip (it has a key figure)."""
    return tip_name in _charted(_data_stamp())


def chart_anchor(tip_name: str) -> str:
    return f"compat-chart-{anchor_name(tip_name)}"


def _unit_text(value: float, unit: str) -> str:
    return f"{number(value)}x" if unit == "x" else quantity(value, unit)


def chart_png(tip: tipmeta.Tip, runs: dict[str, dict | None]) -> tuple[bytes, str] | None:
    """The chart of one tip's key figure across releases, and its alt text; None without data."""
    from tipsite.sphinxext import figures

    key_name, unit, per_device = chart_points(tip.name, runs)
    if not per_device:
        return None
    plt = figures._pyplot()
    releases = list(runs)
    sha = records.tip_version(tip.path) if tip.path.exists() else None
    fig, ax = plt.subplots(figsize=(4.4, 2.6), layout="constrained")
    said = []
    for i, (device, points) in enumerate(sorted(per_device.items())):
        colour = figures.COLOURS[i % len(figures.COLOURS)]
        xs = [releases.index(p["release"]) for p in points]
        ys = [p["value"] for p in points]
        err = [[max(0.0, p["value"] - p["low"]) if p["low"] is not None else 0.0 for p in points],
               [max(0.0, p["high"] - p["value"]) if p["high"] is not None else 0.0 for p in points]]
        word = records.device_word(device)
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=colour, label=word)
        odd = [(x, y) for x, y, p in zip(xs, ys, points)
               if p["failed"] or (sha and p["sha256"] and p["sha256"] != sha)]
        if odd:
            ax.plot([x for x, _ in odd], [y for _, y in odd], linestyle="none", marker="o",
                    markersize=11, markerfacecolor="none", markeredgecolor="#cf222e",
                    label="failed or older tip version")
        said.append(f"{word}: " + ", ".join(f"{_unit_text(p['value'], unit)} on torch {p['release']}"
                                            for p in points))
    if unit == "x":
        ax.axhline(1.0, color="0.4", linestyle=":", linewidth=1)
    ax.set_xticks(range(len(releases)), [f"torch\n{r}" for r in releases], fontsize=8)
    ax.set_xlim(-0.5, len(releases) - 0.5)
    ax.set_ylabel(f"{unit}" if unit else "key figure", fontsize=8)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_title(figures._short(f"{tip.name}: {key_name or 'key figure'}", 60), fontsize=9)
    ax.legend(fontsize=7)
    alt = (f"{key_name or 'The key figure'} of {tip.name} on each torch release: "
           + "; ".join(said) + ".")
    return figures.png_bytes(fig), alt


def charts_rst(tips: list[tipmeta.Tip], runs: dict[str, dict | None], srcdir: Path) -> list[str]:
    from tipsite.sphinxext import figures

    lines = [".. container:: tips-compat-charts", ""]
    drawn = 0
    for tip in sorted(tips, key=lambda t: (t.topic, t.name)):
        chart = chart_png(tip, runs)
        if chart is None:
            continue
        data, alt = chart
        figures.write_if_changed(Path(srcdir) / CHARTS_DIR / f"{tip.name}.png", data)
        drawn += 1
        lines += [f"   .. _{chart_anchor(tip.name)}:", "",
                  f"   .. figure:: /{CHARTS_DIR}/{tip.name}.png",
                  f"      :alt: {' '.join(alt.split())}",
                  "      :class: tips-compat-chart", "",
                  f"      :doc:`/{tip.docname}`", ""]
    if not drawn:
        return ["No tip has a key figure recorded on any release yet.", ""]
    return lines


class CompatMatrix(SphinxDirective):
    """``.. tips-compat-matrix:: table`` (or ``changes``, ``runs``, ``warnings``, ``charts``)."""

    has_content = False
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        part = self.arguments[0]
        if part not in ("table", "changes", "runs", "warnings", "charts"):
            raise self.error(f"tips-compat-matrix: unknown part {part!r} "
                             "(table, changes, runs, warnings, charts)")
        for release in settings.TORCH_MATRIX:
            self.env.note_dependency(str(compat.data_path(release)))
        runs = compat.load_all()
        tips: list[tipmeta.Tip] = []
        if part in ("table", "changes", "charts"):
            try:
                tips = tipmeta.read_all()
            except ValueError:
                tips = []  # the extension stops the build with the details
        if part == "table":
            text = table_rst(tips, runs)
        elif part == "changes":
            text = changes_rst(tips, runs)
        elif part == "charts":
            text = charts_rst(tips, runs, Path(self.env.srcdir))
        elif part == "runs":
            text = runs_rst(runs)
        else:
            text = warnings_rst(runs)
        container = nodes.container(classes=["tips-compat-matrix"])
        self.state.nested_parse(StringList(text, source="tips-compat-matrix"), self.content_offset, container)
        if part == "table":
            self._row_targets(container, tips)
        return [container]

    def _row_targets(self, container: nodes.Element, tips: list[tipmeta.Tip]) -> None:
        """A target ``compat-<tip>`` on each tip's row, so its page can link to it."""
        by_doc = {t.docname: t for t in tips}
        for xref in list(container.findall(addnodes.pending_xref)):
            tip = by_doc.get(str(xref.get("reftarget", "")).lstrip("/"))
            if tip is None or xref.get("reftype") != "doc":
                continue
            name = f"compat-{anchor_name(tip.name)}"
            target = nodes.target("", "", ids=[name], names=[name])
            xref.parent.insert(0, target)
            self.state.document.note_explicit_target(target)
