"""Sphinx extension: the ``tips-compat-matrix`` directive renders the torch-version matrix.

It reads what ``nox -s matrix`` recorded, ``docs/_data/compat/torch-<release>.json`` (one file a
release of ``conf.settings.TORCH_MATRIX``, checked as records are: :mod:`tipsite.compat`), and
renders one part through ``templates/compat.rst.jinja``, every value escaped by the shared
renderer (:mod:`tipsite.sphinxext.render`):

* ``table``: for each **machine class** the runs were measured on (:mod:`tipsite.devices`), tips
  down and that class's releases across: passed/failed, the verdict on each device and the key
  figure, or "not applicable" (the tip's ``min_torch`` is newer) or "missing" (no recorded run:
  never filled in from another release). Releases are compared only within one machine class,
  and the class is named above its table;
* ``changes``: tips whose verdict differs between releases of one machine class;
* ``runs``: each release's run: machine class, date, torch build, Python, doctests;
* ``warnings``: the warnings each tip let through on each release, deprecations first;
* ``charts``: per tip, its key figure on each release, one series per device and machine class,
  each named (``generated/compat/<tip>.png``), under the target ``compat-chart-<tip>`` that the
  tip's page links to (:func:`has_chart`).

The page is rebuilt whenever a data file changes (each is a noted dependency).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.util.docutils import SphinxDirective

from conf import settings
from tipsite import compat, devices, records, tipmeta
from tipsite.sphinxext.render import Rst, anchor_name, badge, number, quantity, render

CHARTS_DIR = "generated/compat"
PARTS = ("table", "changes", "runs", "warnings", "charts")


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


def classes(runs: dict[str, dict | None]) -> list[dict]:
    """The releases grouped by the machine class their run measured on, in matrix order; a
    release never run has no class and joins the first group (it shows as *missing*)."""
    groups: dict[str, list[str]] = {}
    never = [r for r, run in runs.items() if run is None]
    for release, run in runs.items():
        if run is not None:
            groups.setdefault(compat.machine_class(run), []).append(release)
    if not groups:
        groups[devices.UNKNOWN_CLASS] = []
    first = next(iter(groups))
    groups[first] = [r for r in runs if r in groups[first] or r in never]
    out = []
    for name, releases in groups.items():
        machines = sorted({(runs[r] or {}).get("device_name", "?") for r in releases if runs[r]})
        out.append({"name": name, "known": name != devices.UNKNOWN_CLASS, "releases": releases,
                    "machines": ", ".join(machines), "anchor": anchor_name(f"class {name}")})
    return out


def cell(entry: dict | None, run: dict | None, current: dict | None = None,
         key_name: str | None = None) -> dict:
    """One tip on one release, as plain data for the template.

    ``key_name`` is the key figure's name shown in the tip's row; the cell names its own only
    when it differs (an older version of the tip may have measured something else).
    """
    if run is None or entry is None:
        return {"kind": "missing"}
    found: dict = {"kind": entry.get("status"), "older": bool(current) and not compat.is_current(entry, current)}
    if entry.get("status") == compat.NOT_APPLICABLE:
        return {**found, "kind": "not applicable", "min_torch": entry.get("min_torch", "?")}
    decided = _decided(entry)
    found["verdicts"] = [{"word": records.device_word(d), "badge": badge(v.get("verdict"))}
                         for d, v in decided.items() if v.get("verdict") in records.verdicts()]
    found["keys"] = []
    for v in decided.values():
        key = v.get("key")
        if isinstance(key, dict) and isinstance(key.get("value"), (int, float)):
            name = "" if key.get("name") == key_name else str(key.get("name", "key"))
            found["keys"].append({"name": name, "value": quantity(key["value"], str(key.get("unit", "")))})
    found["deprecations"] = entry.get("deprecations") or 0
    found["warnings"] = len(entry.get("warnings") or [])
    if entry.get("status") == compat.FAILED and entry.get("error"):
        last = [ln for ln in str(entry["error"]).strip().splitlines() if ln.strip()]
        found["reason"] = (last[-1] if last else "failed")[:160]
    full = compat.full_run(run)
    if entry.get("run") and full and entry["run"] != full["date"]:
        found["rerun"] = entry["run"]
    return found


def table(tips: list[tipmeta.Tip], runs: dict[str, dict | None]) -> list[dict]:
    """Per machine class: its releases and one row per tip."""
    out = []
    for group in classes(runs):
        rows = []
        for tip in sorted(tips, key=lambda t: (t.topic, t.name)):
            entries = {r: (runs[r] or {}).get("tips", {}).get(tip.name) for r in group["releases"]}
            # the key figure's name, from the newest release that measured one
            key_name = next((_key_name(e) for e in reversed(list(entries.values())) if _key_name(e)), None)
            version = records.tip_version(tip.path) if tip.path.exists() else None
            rows.append({"doc": Rst(f":doc:`/{tip.docname}`"), "name": tip.name, "min_torch": tip.min_torch,
                         "key_name": key_name,
                         "cells": [cell(entries[r], runs[r], version, key_name) for r in group["releases"]]})
        out.append({**group, "rows": rows})
    return out


def verdict_changes(tips: list[tipmeta.Tip], runs: dict[str, dict | None]) -> list[tuple[str, str, str, dict[str, str]]]:
    """``(tip, device, machine class, {release: verdict})`` for each tip and device whose verdict
    differs between releases measured on one machine class. Only passed runs of the tip's
    current source count: a stale or failed entry says nothing about the release."""
    changes = []
    for group in classes(runs):
        for tip in sorted(tips, key=lambda t: t.name):
            version = records.tip_version(tip.path) if tip.path.exists() else None
            seen: dict[str, dict[str, str]] = {}
            for release in group["releases"]:
                entry = (runs[release] or {}).get("tips", {}).get(tip.name)
                if not entry or entry.get("status") != compat.PASSED or not compat.is_current(entry, version):
                    continue
                for device, v in _decided(entry).items():
                    if v.get("verdict"):
                        seen.setdefault(device, {})[release] = v["verdict"]
            for device, by_release in seen.items():
                if len(set(by_release.values())) > 1:
                    changes.append((tip.name, device, group["name"], by_release))
    return changes


def run_view(release: str, run: dict | None) -> dict:
    if run is None:
        return {"release": release, "missing": True}
    doc = run.get("doctests") or {}
    full = compat.full_run(run)
    return {"release": release, "missing": False, "build": run.get("torch_build", release),
            "cuda": run.get("cuda_in_build"), "device": records.device_word(run.get("device") or "cpu"),
            "machine": run.get("device_name", "?"), "machine_class": compat.machine_class(run),
            "threads": run.get("threads", "?"), "python": run.get("python", "?"),
            "full": ({"date": full["date"], "seconds": number(full["seconds"]), "tips": full["tips"]}
                     if full else None),
            "partial": ({"count": len(run["partial"]), "date": run.get("date", "?"),
                         "seconds": number(run.get("seconds", 0))} if run.get("partial") is not None else None),
            "doctests": ({"status": doc.get("status"), "passed": doc.get("passed", 0),
                          "failed": doc.get("failed", 0)} if doc else None),
            "strict": bool(run.get("strict_deprecations"))}


def warning_rows(runs: dict[str, dict | None]) -> list[dict]:
    rows = []
    for release, run in runs.items():
        for name, entry in sorted((run or {}).get("tips", {}).items()):
            warns = sorted(entry.get("warnings") or [],
                           key=lambda w: (not w.get("deprecation"), w.get("origin") != "tip"))
            rows += [{"release": release, "tip": name, **w} for w in warns]
    return rows


def chart_points(tip_name: str, runs: dict[str, dict | None]) -> tuple[str | None, str, dict[tuple, list[dict]]]:
    """The tip's key figure across releases: ``(name, unit, {(device, machine class): [point]})``.

    A point is ``{"release", "value", "low", "high", "failed", "entry"}``; only entries naming the
    key figure the newest release names count (an older version of the tip may have measured
    something else), so every point of a chart measures the same thing.
    """
    entries = {r: (run or {}).get("tips", {}).get(tip_name) for r, run in runs.items()}
    key_name = next((_key_name(e) for e in reversed(list(entries.values())) if _key_name(e)), None)
    unit = ""
    series: dict[tuple, list[dict]] = {}
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
            series.setdefault((device, compat.machine_class(runs[release])), []).append({
                "release": release, "value": float(key["value"]),
                "low": key.get("low") if isinstance(key.get("low"), (int, float)) else None,
                "high": key.get("high") if isinstance(key.get("high"), (int, float)) else None,
                "failed": entry.get("status") == compat.FAILED, "entry": entry})
    return key_name, unit, series


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

    key_name, unit, series = chart_points(tip.name, runs)
    if not series:
        return None
    plt = figures._pyplot()
    releases = list(runs)
    version = records.tip_version(tip.path) if tip.path.exists() else None
    fig, ax = plt.subplots(figsize=(4.4, 2.6), layout="constrained")
    said = []
    for i, ((device, machine), points) in enumerate(sorted(series.items())):
        colour = figures.COLOURS[i % len(figures.COLOURS)]
        xs = [releases.index(p["release"]) for p in points]
        ys = [p["value"] for p in points]
        err = [[max(0.0, p["value"] - p["low"]) if p["low"] is not None else 0.0 for p in points],
               [max(0.0, p["high"] - p["value"]) if p["high"] is not None else 0.0 for p in points]]
        word = f"{records.device_word(device)}, {machine}"
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=colour,
                    label=figures._short(word, 48))
        odd = [(x, y) for x, y, p in zip(xs, ys, points)
               if p["failed"] or (version and not compat.is_current(p["entry"], version))]
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


def charts(tips: list[tipmeta.Tip], runs: dict[str, dict | None], srcdir: Path) -> list[dict]:
    from tipsite.sphinxext import figures

    drawn = []
    for tip in sorted(tips, key=lambda t: (t.topic, t.name)):
        chart = chart_png(tip, runs)
        if chart is None:
            continue
        data, alt = chart
        figures.write_if_changed(Path(srcdir) / CHARTS_DIR / f"{tip.name}.png", data)
        drawn.append({"anchor": Rst(chart_anchor(tip.name)), "path": Rst(f"/{CHARTS_DIR}/{tip.name}.png"),
                      "alt": alt, "doc": Rst(f":doc:`/{tip.docname}`")})
    return drawn


def render_part(part: str, tips: list[tipmeta.Tip], runs: dict[str, dict | None], srcdir: Path) -> str:
    context: dict = {"part": part, "runs_recorded": sum(1 for r in runs.values() if r)}
    if part == "table":
        context["classes"] = table(tips, runs)
    elif part == "changes":
        by_doc = {t.name: t.docname for t in tips}
        context["changes"] = [{"doc": Rst(f":doc:`/{by_doc[name]}`"), "device": records.device_word(device),
                               "machine_class": machine,
                               "releases": [{"release": r, "badge": badge(v)} for r, v in by_release.items()]}
                              for name, device, machine, by_release in verdict_changes(tips, runs)]
    elif part == "runs":
        context["runs"] = [run_view(r, run) for r, run in runs.items()]
    elif part == "warnings":
        context["warnings"] = warning_rows(runs)
    else:
        context["charts"] = charts(tips, runs, srcdir)
    # one blank line where the template's blocks leave several (reST reads them as one)
    return re.sub(r"\n\s*\n(\s*\n)+", "\n\n", render("compat.rst.jinja", **context))


class CompatMatrix(SphinxDirective):
    """``.. tips-compat-matrix:: table`` (or ``changes``, ``runs``, ``warnings``, ``charts``)."""

    has_content = False
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        part = self.arguments[0]
        if part not in PARTS:
            raise self.error(f"tips-compat-matrix: unknown part {part!r} ({', '.join(PARTS)})")
        for release in settings.TORCH_MATRIX:
            self.env.note_dependency(str(compat.data_path(release)))
        try:
            runs = compat.load_all()
        except records.RecordError as exc:
            raise self.error(f"tips-compat-matrix: {exc}") from None
        tips: list[tipmeta.Tip] = []
        if part in ("table", "changes", "charts"):
            try:
                tips = tipmeta.read_all()
            except ValueError:
                tips = []  # the extension stops the build with the details
        text = render_part(part, tips, runs, Path(self.env.srcdir))
        container = nodes.container(classes=["tips-compat-matrix"])
        self.state.nested_parse(StringList(text.splitlines(), source="tips-compat-matrix"),
                                self.content_offset, container)
        if part == "table":
            self._row_targets(container, tips)
        return [container]

    def _row_targets(self, container: nodes.Element, tips: list[tipmeta.Tip]) -> None:
        """A target ``compat-<tip>`` on each tip's first row, so its page can link to it."""
        by_doc = {t.docname: t for t in tips}
        done = set()
        for xref in list(container.findall(addnodes.pending_xref)):
            tip = by_doc.get(str(xref.get("reftarget", "")).lstrip("/"))
            if tip is None or xref.get("reftype") != "doc" or tip.name in done:
                continue
            done.add(tip.name)
            name = f"compat-{anchor_name(tip.name)}"
            target = nodes.target("", "", ids=[name], names=[name])
            xref.parent.insert(0, target)
            self.state.document.note_explicit_target(target)
