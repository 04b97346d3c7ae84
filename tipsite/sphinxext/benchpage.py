"""Sphinx extension: the ``tips-bench`` directive renders the build benchmark's figures.

It reads what ``nox -s bench`` recorded (``docs/_data/bench.json``, :mod:`tipsite.bench`) and
renders one part of it through ``templates/bench.rst.jinja``:

* ``summary``: when, where (machine, torch, commit), under what load, what was built;
* ``targets``: each target, the measured figure and whether it was met;
* ``builds``: every build's wall time, the tips' own run time and the overhead, the load;
* ``tip-times``: each tip's own run time, slowest first, with the comparisons (sweep points)
  and rounds it measured: what the sweeps cost;
* ``stability``: every tip and device: its verdict in each clean build and its key figure with
  the interval and rounds the tip reported.

``:data:`` names another data file (relative to the Sphinx source folder). The page is re-read
when the data file or the benchmark's rules (``tipsite/bench.py``) change. A data file in an
older format is not shown as current: the page says when it was measured and that it predates
the current tips.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

from tipsite import bench, records
from tipsite.sphinxext.render import Rst, badge, finite, interval, number, quantity, render

PARTS = ("summary", "targets", "builds", "tip-times", "stability")
DEFAULT_DATA = "_data/bench.json"
# The README's summary names the slowest tips and sums the rest.
README_SLOWEST = 5
_NAME = re.compile(r"tip_\w{1,80}")


def _s(x: Any) -> str:
    return f"{x:.1f} s" if finite(x) else "–"


def _pct(x: Any) -> str:
    return f"{x:.1f}%" if finite(x) else "–"


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _yes_no(x: bool | None) -> str:
    return {True: "yes", False: "no", None: "–"}[x]


def _load_words(data: dict) -> str:
    cores = (data.get("load") or {}).get("cores") or 0
    if not cores:
        return "no added load"
    return f"{cores} core{'s' if cores != 1 else ''} kept busy by a CPU-bound process"


def _run_load(b: dict) -> str:
    words = (f"{number(b['load_before'][0])} → {number(b['load_after'][0])}; "
             f"others {b['cores_used_by_others']:.2f} of {b['cpu_count']} cores")
    if b.get("load_processes"):
        words += f"; load processes {b['cores_used_by_load']:.2f}"
    return words


def _old_view(data: Any) -> dict:
    """What can honestly be said of a data file in an older format: when, and nothing current."""
    if not isinstance(data, dict):
        return {"current": False, "old": None}
    summary = data.get("summary") or {}
    clean = summary.get("clean_build_s") or {}
    return {"current": False, "old": {
        "date": str(data.get("date", "an unknown date")), "commit": str(data.get("commit") or "unknown"),
        "tips": data.get("tips", "?"), "clean": _s(clean.get("median")),
        "tips_s": _s(summary.get("tips_s_median"))}}


def _current_versions() -> dict[str, dict]:
    """Each gallery tip's version now: a benchmark row of another version is marked as such."""
    from tipsite import tipmeta, tipsource

    found = {}
    for path in tipmeta.tip_files():
        try:
            found[path.stem] = records.tip_version(path)
        except tipsource.TipSourceError:
            continue
    return found


def machine_class(data: dict) -> str:
    """The machine class of the benchmark's machine: from its hosts, or from the CPU fields older
    data recorded (the model, its flags, its cores)."""
    from tipsite import compat, devices

    m = data.get("machine") or {}
    if m.get("hosts"):
        return compat.machine_class(m)  # a matrix run's lookup: the primary device's host
    return devices.machine_class("cpu", {"name": m.get("cpu"), "flags": m.get("cpu_flags"), "cores": m.get("cores")})


def view(data: Any) -> dict[str, Any]:
    """Every figure the page (and the README summary) shows, formatted once (the stability
    part's older-version marks are added by :func:`render_part`, which alone reads the tips)."""
    if not bench.is_current(data):
        return _old_view(data)
    m = data["machine"]
    runs = data["clean_runs"]
    nc, ot = data.get("no_change_rebuild"), data.get("one_tip_rebuild")
    summary = (f"{data['date']}: {_n(data['tips'], 'tip')}, {m['cpu']}, {m['cores']} cores"
               f" ({m['memory_gib']} GiB), {'CUDA' if m['cuda'] else 'no GPU'}, torch {m['torch']},"
               f" Python {m['python']}, {m['tips_threads']} threads per tip; {_load_words(data)};"
               f" load average before the first build {number(runs[0]['load_before'][0])}.")
    builds = [{"name": f"clean build {i}", "wall": _s(b["wall_s"]), "tips": _s(b["tips_s"]),
               "overhead": _s(b["overhead_s"]), "executed": f"{b['executed']} of {b['selected']}",
               "load": _run_load(b)} for i, b in enumerate(runs, 1)]
    proofs = []
    if nc:
        builds.append({"name": "rebuild, nothing changed", "wall": _s(nc["wall_s"]), "tips": "0 s",
                       "overhead": _s(nc["wall_s"]), "executed": f"{nc['executed']} ({nc['cached']} cached)",
                       "load": _run_load(nc)})
        proofs.append(f"No-change rebuild: {nc['proof']}.")
    if ot:
        builds.append({"name": f"rebuild, {ot['edited_tip']} edited", "wall": _s(ot["wall_s"]),
                       "tips": _s(ot["tip_s"]), "overhead": _s(ot["overhead_s"]),
                       "executed": f"{ot['executed']} ({ot['cached']} cached)", "load": _run_load(ot)})
        proofs.append(f"One-tip rebuild: {ot['proof']}.")

    costs = data.get("tip_costs") or []
    costs_view = [{"tip": r["tip"], "topic": r["topic"], "kind": r["kind"], "time": _s(r["median_s"]),
                   "range": (f"{min(r['times_s']):.1f}–{max(r['times_s']):.1f} s"
                             if len(r["times_s"]) > 1 else _s(r["times_s"][0])),
                   "share": _pct(r["share_pct"]), "comparisons": str(r["comparisons"]),
                   "rounds": str(r["rounds"])} for r in costs]
    rest = costs[README_SLOWEST:]
    rest_s = sum(r["median_s"] for r in rest)
    rest_share = sum(r["share_pct"] or 0 for r in rest)

    stability = []
    for r in data.get("stability") or []:
        device = records.device_word(r["device"]) if r["device"] else "–"
        row = {"tip": r["tip"], "topic": r["topic"], "kind": r["kind"], "device": device,
               "verdicts": [v or "–" for v in r["verdicts"]], "changed": bool(r["verdict_changed"]),
               "note": r.get("note"), "moved": False, "key": "–", "figures": "–", "intervals": "–",
               "rounds": "–", "deviation": "–", "inside": "–"}
        if r.get("values"):
            unit = r["unit"]
            row.update({
                "key": f"{r['key']} ({unit})",
                "figures": ", ".join(quantity(v, unit) for v in r["values"]),
                "intervals": ", ".join(interval(lo, hi, unit) or "–" for lo, hi in r["intervals"]),
                "rounds": ", ".join(str(n) if n is not None else "–" for n in r["rounds"]),
                # one build: nothing to compare it with
                "deviation": "–" if len(r["values"]) < 2 else
                             "around 0" if r["max_dev_pct"] is None else _pct(r["max_dev_pct"]),
                "inside": "–" if len(r["values"]) < 2 else _yes_no(r["inside_intervals"]),
                "moved": not r["within_target"] and len(r["values"]) > 1,
            })
        stability.append(row)

    s = data.get("summary") or {}
    return {
        "current": True,
        "summary": summary,
        "date": data["date"],
        "commit": data.get("commit") or "unknown",
        "uncommitted": bool(data.get("uncommitted_sources")),
        "fingerprint": (data.get("execution_fingerprint") or "")[:12],
        "command": data.get("command", ""),
        "subset": ", ".join(data["subset"]) if data.get("subset") else None,
        "incomplete": data.get("incomplete"),
        "load_words": _load_words(data),
        "load_cores": (data.get("load") or {}).get("cores") or 0,
        "runs": len(runs),
        "runs_words": _n(len(runs), "clean build"),
        "targets": [{**t, "met_word": "yes" if t["met"] else "no"} for t in data["targets"]],
        "builds": builds,
        "proofs": proofs,
        "clean_median": _s((s.get("clean_build_s") or {}).get("median")),
        "tips_median": _s(s.get("tips_s_median")),
        "overhead_median": _s(s.get("overhead_s_median")),
        "tip_costs": costs_view,
        "rest_time": _s(rest_s), "rest_share": _pct(rest_share),
        "stability": stability,
        "machine_class": machine_class(data),
        "changes": sum(r["changed"] for r in stability),
        "decisions": sum(r["device"] != "–" for r in stability),
    }


def _link(row: dict, found_docs) -> Rst | None:
    """A link to the tip's page when this build has it (a subset build has not every page)."""
    name, topic = str(row["tip"]), str(row["topic"])
    docname = f"tips/{topic}/{name}"
    if _NAME.fullmatch(name) and re.fullmatch(r"\w{1,80}", topic) and docname in found_docs:
        return Rst(f":doc:`{name} </{docname}>`")
    return None


def _mark_older(v: dict[str, Any], data: dict) -> None:
    """The ``stability`` part's marks: each row whose tip has changed since the benchmark ran
    (or whose version it did not record), and how many."""
    from tipsite import compat

    versions = _current_versions()
    for row, r in zip(v["stability"], data.get("stability") or []):
        row["older"] = not compat.is_current(r.get("version"), versions.get(r["tip"]))
    v["older"] = sum(row["older"] for row in v["stability"])


def render_part(part: str, data: Any, found_docs=()) -> str:
    v = view(data)
    if v["current"]:
        for row in v["tip_costs"] + v["stability"]:
            row["link"] = _link(row, found_docs)
        if part == "stability":  # the only part that reads the tips' versions
            _mark_older(v, data)
    return render("bench.rst.jinja", part=part, v=v, badge=badge)


class BenchPage(SphinxDirective):
    """``.. tips-bench:: summary`` (or ``targets``, ``builds``, ``tip-times``, ``stability``)."""

    has_content = False
    required_arguments = 1
    option_spec = {"data": directives.unchanged_required}

    def run(self) -> list[nodes.Node]:
        part = self.arguments[0]
        if part not in PARTS:
            raise self.error(f"tips-bench: unknown part {part!r} ({', '.join(PARTS)})")
        path = Path(self.env.srcdir) / self.options.get("data", DEFAULT_DATA)
        self.env.note_dependency(str(path))
        self.env.note_dependency(bench.__file__)  # the targets are recomputed with its rules
        data = None
        if path.exists():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise self.error(f"tips-bench: {path} cannot be read as JSON: {exc}") from None
        if bench.is_current(data):
            data = {**data, "targets": bench.targets(data)}
        text = render_part(part, data, self.env.found_docs)
        container = nodes.container(classes=["tips-bench", f"tips-bench-{part}"])
        self.state.nested_parse(StringList(text.splitlines(), source=f"tips-bench {part}"),
                                self.content_offset, container)
        return [container]


# --- the README summary -----------------------------------------------------------------------

def readme_text(data: dict[str, Any]) -> str:
    """The README's build-time line (after ``<!-- build-time -->``) and its benchmark summary.

    Numbers are formatted by the page's own view (:func:`tipsite.sphinxext.benchpage.view`), so
    the README and the page say the same thing.
    """
    slowest = README_SLOWEST
    v = view(data)
    s = data["summary"]
    runs = data["clean_runs"]
    slow = ", ".join(f"{r['tip']} {r['time']}" for r in v["tip_costs"][:3])
    load = v["load_words"]
    out = [
        "<!-- build-time -->",
        (f"Clean build time on the {data['machine']['cores']}-core development machine:"
         f" {s['clean_build_s']['median']:.0f} s ("
         + (f"median of {len(runs)} clean builds" if len(runs) > 1 else "one clean build")
         + (f" of only {', '.join(data['subset'])}, a trial" if data.get("subset") else " with every tip executed")
         + f", {load}, {data['date']}); the tips' own run time {s['tips_s_median']:.0f} s of it,"
         f" slowest {slow}; the benchmark is on the page \"How this site is built\"."),
        "",
        "<!-- bench-summary -->",
        f"Measured by `nox -s bench` on {v['summary']}",
        "",
        "| measure | target | measured | met |",
        "| --- | --- | --- | --- |",
    ]
    out += [f"| {t['what']} | {t['target']} | {t['measured']} | {t['met_word']} |" for t in v["targets"]]
    out += [
        "",
        (f"Clean build: median {s['clean_build_s']['median']} s over {len(runs)} runs"
         f" ({s['clean_build_s']['min']}–{s['clean_build_s']['max']} s)," if len(runs) > 1 else
         f"Clean build: {s['clean_build_s']['median']} s (one run),")
        + f" of which the tips' own run time {s['tips_s_median']} s and overhead {s['overhead_s_median']} s.",
        "",
        f"The tips' own run time, slowest first ({len(v['tip_costs'])} tip{'s' if len(v['tip_costs']) != 1 else ''},"
        " median of the clean runs):",
        "",
        "| tip | kind | run time | share | comparisons | rounds |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    out += [f"| `{r['tip']}` | {r['kind']} | {r['time']} | {r['share']} | {r['comparisons']} | {r['rounds']} |"
            for r in v["tip_costs"][:slowest]]
    if len(v["tip_costs"]) > slowest:
        out.append(f"| {len(v['tip_costs']) - slowest} more | | {v['rest_time']} | {v['rest_share']} | | |")
    if data.get("incomplete"):
        out += ["", f"**Incomplete run**: {data['incomplete']}."]
    flipped = [r for r in v["stability"] if r["changed"]]
    if flipped:
        out += ["", "Verdicts that changed between runs:", ""]
        out += [f"- `{r['tip']}` on {r['device']}: {' / '.join(r['verdicts'])}" for r in flipped]
    moved = [r for r in v["stability"] if r["moved"]]
    if moved:
        out += ["", f"Key figures that moved more than ±{bench.TARGET_KEY_PCT:.0f}% across the runs:", ""]
        out += [f"- `{r['tip']}` on {r['device']}: {r['key']} = {r['figures']} ({r['deviation']} from the"
                f" median; inside every run's interval: {r['inside']})" for r in moved]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m tipsite.sphinxext.benchpage [DATA]``: print the README's build-time line and
    benchmark summary from a ``nox -s bench`` data file, formatted as the page formats it."""
    import json
    import sys

    path = Path(argv[0] if argv else bench.DATA_FILE)
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    if not bench.is_current(data):
        print(f"bench: {path} holds no data in the {bench.SCHEMA} format: run the benchmark", file=sys.stderr)
        return 1
    data["targets"] = bench.targets(data)  # the rules may have changed since the run
    print(readme_text(data))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
