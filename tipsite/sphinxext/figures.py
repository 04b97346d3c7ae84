"""Figures: what each one shows, in words; the figure a speed or memory tip owes; thumbnails for
tips that draw none; every device's points side by side.

* :func:`check_figures` (builder-inited, after the records are checked): a speed or memory tip
  that decided a device and drew no figure stops the build, unless its
  ``sphinx_gallery_tips_single_size`` says why it has a single size.
* :func:`alt_text` says in words what a figure plots, from the data
  :func:`tipsite.gallery.collect_figures` recorded (``record["figures"]``), and
  :func:`set_alt_texts` puts it on the page's images (source-read, from :mod:`.pages`).
* :func:`write_thumbnails` (builder-inited, after the views): sphinx-gallery makes a tip's
  thumbnail from its first figure; a tip whose record has no figure (a behaviour tip, or a tip
  that decided nothing on this machine) gets one drawn from its view instead of the placeholder:
  each device's verdict and the facts or comparisons that decided it.
* :func:`devices_figure`: when another build's record (a CUDA result set) has comparisons at
  several sizes, one figure of every build's points, each labelled with its machine and date.

Every image is drawn with matplotlib's Agg backend and written only when its bytes change, so a
rebuild with nothing new re-reads no page.
"""

from __future__ import annotations

import io
import json
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

from tipsite import devices, records
from tipsite.sphinxext import state
from tipsite.sphinxext.freshness import page_layer_fingerprint
from tipsite.sphinxext.render import number, quantity

logger = logging.getLogger(__name__)

# Okabe-Ito, as tipkit.plot_ratios: colours that survive colour-blindness.
COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]
VERDICT_COLOURS = {"holds": "#1a7f37", "depends": "#9a6700", "outdated": "#6e40c9",
                   "wrong": "#cf222e"}
GENERATED_FIGURES = "generated/figures"
THUMB_SIZE = (400, 280)  # sphinx-gallery's thumbnail_size
FIGURE_DPI = 100


# --- reading a recorded figure -----------------------------------------------------------------

@dataclass
class Series:
    label: str
    x: list[float]
    y: list[float]
    low: list[float] | None = None
    high: list[float] | None = None

    def points(self) -> list[tuple[float, float, float | None, float | None]]:
        lows = self.low or [None] * len(self.x)
        highs = self.high or [None] * len(self.x)
        return sorted(zip(self.x, self.y, lows, highs))


@dataclass
class Axes:
    title: str
    xlabel: str
    ylabel: str
    xscale: str
    yscale: str
    series: list[Series] = field(default_factory=list)
    refs: list[tuple[str, float]] = field(default_factory=list)  # horizontal reference lines

    @property
    def ratio(self) -> bool:
        """A ratio axis: plot_ratios' (a line at 1.0, or an ``a / b`` label)."""
        return " / " in self.ylabel or any(abs(y - 1.0) < 1e-12 for _, y in self.refs)


def _is_reference(line: dict) -> bool:
    """axhline: two points at x = 0 and 1 (axes coordinates), one y."""
    return line["x"] == [0.0, 1.0] and len(line["y"]) == 2 and line["y"][0] == line["y"][1]


def read_axes(figure: dict) -> list[Axes]:
    """The series, intervals and reference lines of one recorded figure, per axes."""
    out = []
    for ax in figure.get("axes") or []:
        axes = Axes(ax.get("title", ""), ax.get("xlabel", ""), ax.get("ylabel", ""),
                    ax.get("xscale", "linear"), ax.get("yscale", "linear"))
        caps = []
        for line in ax.get("lines") or []:
            label = str(line.get("label", ""))
            if _is_reference(line):
                axes.refs.append(("" if label.startswith("_") else label, line["y"][0]))
            elif label == "_errorbar":
                caps.append(line)
            elif label == "_nolegend_" and _old_cap(axes, line):
                continue  # records from before collect_figures named the intervals' ends
            elif line["x"]:
                axes.series.append(Series("" if label.startswith("_") else label,
                                          list(line["x"]), list(line["y"])))
        for cap in caps:
            match = next((s for s in axes.series if s.label == cap.get("of") and s.x == cap["x"]), None)
            if match is not None and cap.get("bound") in ("low", "high"):
                setattr(match, cap["bound"], list(cap["y"]))
        out.append(axes)
    return out


def _old_cap(axes: Axes, line: dict) -> bool:
    """An unlabelled line right after an unlabelled series, at its x: one end of its intervals."""
    if not axes.series or axes.series[-1].label or axes.series[-1].x != line["x"]:
        return False
    last = axes.series[-1]
    bound = "low" if all(c <= y for c, y in zip(line["y"], last.y)) else "high"
    if getattr(last, bound) is not None:
        return False
    setattr(last, bound, list(line["y"]))
    return True


def data_series(figure: dict) -> list[Series]:
    return [s for ax in read_axes(figure) for s in ax.series]


# --- alt text --------------------------------------------------------------------------------------

_UNIT = re.compile(r"\s*\(([^()]*)\)\s*$")


def _noun(label: str) -> str:
    """``model width (features)`` -> ``model width``."""
    return _UNIT.sub("", " ".join(label.split())) or "size"


def _unit(label: str) -> str:
    m = _UNIT.search(label)
    return m.group(1).strip() if m else ""


QUANTITY_UNITS = ("MiB", "KiB", "GiB", "B", "bytes", "s", "ms", "us", "ns")


def _num(x: float) -> str:
    """``4`` for a whole number, else three significant figures."""
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else number(x)


def _fmt_x(ax: Axes, x: float) -> str:
    unit = _unit(ax.xlabel)
    return quantity(x, unit) if unit in QUANTITY_UNITS else _num(x)


def _fmt_y(ax: Axes, y: float) -> str:
    if ax.ratio:
        return f"{number(y)}x"
    unit = _unit(ax.ylabel)
    if unit in QUANTITY_UNITS:
        return "0" if y == 0 else quantity(y, unit)
    return f"{number(y)} {unit}".strip()


def _y_noun(ax: Axes, short: bool = False) -> str:
    noun = _noun(ax.ylabel)
    if ax.ratio and "time" in ax.ylabel and "/" in ax.ylabel:
        return "speed-up" if short else f"speed-up ({noun})"
    if ax.ratio and short:
        return "ratio"
    return noun


def _threshold(ax: Axes) -> float | None:
    """The rule's threshold: plot_ratios' dashed line labelled ``threshold X``."""
    found = [y for label, y in ax.refs if label.startswith("threshold")]
    return min(found) if found else None


def _describe(ax: Axes, s: Series) -> str:
    pts = s.points()
    xn = _noun(ax.xlabel)
    yn = _y_noun(ax, short=True)
    head = f"{s.label}: " if s.label else ""
    if len(pts) == 1:
        x, y, *_ = pts[0]
        return f"{head}{yn} {_fmt_y(ax, y)} at {xn} {_fmt_x(ax, x)}"
    (x0, y0, *_), (x1, y1, *_) = pts[0], pts[-1]
    scale = max(abs(y0), abs(y1), 1e-12)
    change = (y1 - y0) / scale
    trend = "rises" if change > 0.03 else "falls" if change < -0.03 else "stays about the same"
    text = (f"{head}{yn} {trend}, from {_fmt_y(ax, y0)} at {xn} {_fmt_x(ax, x0)} "
            f"to {_fmt_y(ax, y1)} at {xn} {_fmt_x(ax, x1)}")
    inner = pts[1:-1]
    if inner:
        top = max(inner, key=lambda p: p[1])
        bottom = min(inner, key=lambda p: p[1])
        if top[1] > max(y0, y1) + 0.03 * scale:
            text += f", highest at {xn} {_fmt_x(ax, top[0])} ({_fmt_y(ax, top[1])})"
        elif bottom[1] < min(y0, y1) - 0.03 * scale:
            text += f", lowest at {xn} {_fmt_x(ax, bottom[0])} ({_fmt_y(ax, bottom[1])})"
    t = _threshold(ax)
    if ax.ratio and t is not None and s.low and s.high:
        above = sum(1 for _, _, lo, _ in pts if lo is not None and lo > t)
        text += f"; its interval lies above the threshold {t:g}x at {above} of {len(pts)} points"
    return text


def alt_text(figure: dict) -> str:
    """What a recorded figure shows, in words, from its plotted data."""
    parts = []
    for ax in read_axes(figure):
        title = " ".join(ax.title.split("\n")[0].split())
        where = " ".join(ax.title.split("\n")[1].split()) if "\n" in ax.title else ""
        head = f"{title} ({where})" if title and where else title or where
        about = f"{_y_noun(ax)} against {_noun(ax.xlabel)}"
        if ax.xscale == "log":
            about += " (log scale)"
        sentences = [f"{head}: {about}." if head else f"{about[0].upper()}{about[1:]}."]
        sentences += [_describe(ax, s) + "." for s in ax.series]
        ends = {s.points()[-1][0] for s in ax.series if s.x}
        if len(ax.series) > 1 and len(ends) == 1:
            x = ends.pop()
            values = ", ".join(f"{_fmt_y(ax, s.points()[-1][1])} with {s.label or 'an unnamed line'}"
                               for s in ax.series)
            sentences.append(f"At {_noun(ax.xlabel)} {_fmt_x(ax, x)}: {values}.")
        refs = [label or _fmt_y(ax, y) for label, y in ax.refs]
        if refs:
            sentences.append("Reference lines: " + "; ".join(refs) + ".")
        parts.append(" ".join(sentences))
    text = " ".join(parts) or "A figure with no plotted data."
    return " ".join(text.split())


_IMAGE_SG = re.compile(r"^(?P<head>[ \t]*\.\. image-sg:: /\S*?sphx_glr_(?P<tip>\w+?)_(?P<n>\d{3})\.\w+\n)"
                       r"(?P<indent>[ \t]+):alt:[^\n]*$", re.M)


def set_alt_texts(text: str, tip_name: str, record: dict | None) -> str:
    """Replace sphinx-gallery's alt text (the figure's title) with what the figure shows."""
    figures = (record or {}).get("figures") or []

    def replace(m: re.Match) -> str:
        n = int(m.group("n"))
        if m.group("tip") != tip_name or not 1 <= n <= len(figures):
            return m.group(0)
        alt = alt_text(figures[n - 1])
        return f"{m.group('head')}{m.group('indent')}:alt: {alt}"

    return _IMAGE_SG.sub(replace, text)


# --- the check: a speed or memory tip draws where it pays ------------------------------------------

def figure_problem(tip, record: dict | None) -> str | None:
    """Why ``record`` breaks the figure rule for ``tip``, or None."""
    if record is None or tip.kind not in ("speed", "memory") or tip.single_size:
        return None
    if not record.get("verdicts"):
        return None  # it decided no device here (a CUDA claim on a CPU build): nothing to draw
    if any(data_series(f) for f in record.get("figures") or []):
        return None
    return (f"{tip.path.name}: a {tip.kind} tip draws where its effect pays (plot_ratios for a "
            "sweep, plot_series for memory against steps or size) and drew no figure; if the "
            "effect has a single natural size, say why: "
            '# sphinx_gallery_tips_single_size = "why"')


def check_figures(app: Sphinx) -> None:
    """builder-inited, after the records were checked: every speed and memory tip drew."""
    _, out_dir = state.gallery_dirs(app)
    problems = []
    for tip in state.tips(app):
        if not state.executes(app, tip):
            continue
        try:
            record = records.read_record(out_dir / tip.topic / tip.path.name)
        except records.RecordError:
            continue  # check_records named it
        problem = figure_problem(tip, record)
        if problem:
            problems.append(problem)
    if problems:
        state.stop("tips without the figure their kind needs:\n" + "\n".join(problems))


# --- drawing ---------------------------------------------------------------------------------------

def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig, dpi: int = FIGURE_DPI) -> bytes:
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, facecolor="white", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def write_if_changed(path: Path, data: bytes) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_bytes() == data:
        return False
    path.write_bytes(data)
    return True


def _short(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def _fact_line(name: str, value) -> tuple[str, str, str]:
    """(mark, text, colour) for one fact: True ✓, False ✗, anything else its value."""
    if value is True:
        return "✓", name, VERDICT_COLOURS["holds"]
    if value is False:
        return "✗", name, VERDICT_COLOURS["wrong"]
    return "•", f"{name}: {value}", "#444444"


def _comparison_line(c: dict) -> tuple[str, str, str]:
    unit = "x" if c["measure"] == "ratio" else c["unit"]
    mark = {"above": "▲", "below": "▼"}.get(c["outcome"], "≈")
    colour = {"above": VERDICT_COLOURS["holds"], "below": VERDICT_COLOURS["wrong"]}.get(c["outcome"], "#444444")
    return mark, f"{c['name']}: {quantity(c['median'], unit)} (threshold {number(c['threshold'])})", colour


def thumbnail_png(view) -> bytes:
    """A card-sized image of what decided each device: verdict, then its facts (✓/✗) or
    comparisons, drawn from the tip's view (this build's record and the given result sets)."""
    plt = _pyplot()
    w, h = THUMB_SIZE
    fig = plt.figure(figsize=(w / FIGURE_DPI, h / FIGURE_DPI), dpi=FIGURE_DPI)
    fig.patch.set_facecolor("white")
    y = 0.93
    kind = {"behaviour": "checks behaviour", "speed": "measures speed",
            "memory": "measures memory"}.get(view.tip.kind, view.tip.kind)
    fig.text(0.04, y, _short(f"{view.tip.topic.replace('_', ' ')} · {kind}", 48), fontsize=9,
             color="#555555", va="top")
    y -= 0.11
    for d in view.devices.values():
        fig.text(0.04, y, d.word, fontsize=12, fontweight="bold", va="top", color="#222222")
        if d.state == "measured":
            label, colour = d.verdict, VERDICT_COLOURS.get(d.verdict or "", "#6e7781")
        elif d.state == "stale":
            label, colour = f"{d.verdict}, older tip version", "#6e7781"
        else:
            label, colour = "not measured", "#6e7781"
        fig.text(0.24, y, f" {label} ", fontsize=12, fontweight="bold", va="top", color="white",
                 bbox={"boxstyle": "round,pad=0.25", "facecolor": colour, "edgecolor": colour})
        y -= 0.13
        rows: list[tuple[str, str, str]] = []
        if d.state == "measured" and d.decision:
            rows = [_fact_line(k, v) for k, v in (d.decision.get("facts") or {}).items()]
            rows += [_comparison_line(c) for c in d.decision.get("comparisons") or []]
        if not rows and d.key_text:
            rows = [("•", d.key_text, "#444444")]
        if not rows and d.state != "measured":
            rows = [("", f"no {d.word} results for this version of the tip", "#555555")]
        room = max(1, int((y - 0.04) / 0.085) - (len(view.devices) - 1) * 2)
        shown = rows[:room]
        for mark, text, colour in shown:
            fig.text(0.05, y, mark, fontsize=11, color=colour, va="top", fontweight="bold")
            fig.text(0.11, y, _short(text, 50), fontsize=9.5, color="#222222", va="top")
            y -= 0.085
        if len(rows) > len(shown):
            fig.text(0.11, y, f"and {len(rows) - len(shown)} more on the page", fontsize=8.5,
                     color="#555555", va="top", style="italic")
            y -= 0.085
        y -= 0.03
    return png_bytes(fig)


def thumb_path(out_dir: Path, tip) -> Path:
    """Where sphinx-gallery keeps a tip's thumbnail (the cards and the gallery index show it)."""
    return out_dir / tip.topic / "images" / "thumb" / f"sphx_glr_{tip.name}_thumb.png"


def write_thumbnails(app: Sphinx) -> None:
    """builder-inited, after the views: a thumbnail from the record for tips that drew nothing."""
    _, out_dir = state.gallery_dirs(app)
    # drawing costs ~0.1 s a tip: redraw only when what it shows changed (digests in one file)
    stamps_path = out_dir / ".tipsite-thumbnails.json"
    try:
        stamps = json.loads(stamps_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        stamps = {}
    new_stamps = {}
    code = page_layer_fingerprint()  # the drawing code, and all it calls, once per build
    for view in state.views(app).values():
        if view.record is None or view.record.get("figures"):
            continue
        path = thumb_path(out_dir, view.tip)
        key = _thumbnail_key(view, code)
        if not (path.exists() and stamps.get(view.name) == key):
            if write_if_changed(path, thumbnail_png(view)):
                logger.info(f"tipsite: drew the thumbnail of {view.name} from its record")
        new_stamps[view.name] = key
    if new_stamps != stamps:
        out_dir.mkdir(parents=True, exist_ok=True)
        stamps_path.write_text(json.dumps(new_stamps, indent=1, sort_keys=True), encoding="utf-8")


def _thumbnail_key(view, code: str) -> str:
    """A digest of everything thumbnail_png reads, and of ``code``: the page layer's fingerprint."""
    import hashlib

    shown = [view.tip.topic, view.tip.kind, code]
    for d in view.devices.values():
        shown.append([d.word, d.state, d.verdict, d.key_text,
                      (d.decision or {}).get("facts"), (d.decision or {}).get("comparisons")])
    text = json.dumps(shown, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- every device's points in one figure -----------------------------------------------------------

def _series_of(record: dict) -> list[tuple[str, str, list[dict]]]:
    """(device, group, comparisons) for each group of ratio comparisons at several sizes."""
    out = []
    for device, decision in (record.get("verdicts") or {}).items():
        comps = {c["name"]: c for c in decision.get("comparisons") or []
                 if c.get("x") is not None and c.get("measure") == "ratio"}
        seen: set[str] = set()
        for group, members in (decision.get("groups") or {}).items():
            chosen = [comps[m] for m in members if m in comps]
            if len(chosen) >= 2:
                out.append((device, group, chosen))
                seen |= {c["name"] for c in chosen}
        rest = [c for name, c in comps.items() if name not in seen]
        if len(rest) >= 2:
            out.append((device, "", rest))
    return out


def _machine(record: dict, device: str) -> str:
    return (record.get("hosts", {}).get(device) or {}).get("name") or "unknown machine"


def devices_figure(view, srcdir: Path) -> dict | None:
    """Every build's points side by side, when another build (a result set) has a sweep.

    Writes ``generated/figures/<tip>_devices.png`` under ``srcdir`` and returns its docname-style
    path, alt text and caption; None when only this build measured a sweep (its own figure
    shows it) or no build did.
    """
    entries = []
    for record in view.columns:
        for device, group, comps in _series_of(record):
            entries.append((record, device, group, comps))
    if not any(r is not view.record for r, *_ in entries) or len(entries) < 2:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8), layout="constrained")
    groups = {g for *_, g, _ in entries}
    markers = {name: d.marker for name, d in devices.DEVICES.items()}
    labels = []
    for i, (record, device, group, comps) in enumerate(entries):
        pts = sorted((c["x"], c["median"], c["low"], c["high"]) for c in comps)
        origin = "this build" if record is view.record else "result set"
        label = (f"{records.device_word(device)}: {_short(_machine(record, device), 28)}, "
                 f"{record['date'][:10]} ({origin})")
        if len(groups) > 1 and group:
            label += f", {group}"
        labels.append((label, pts))
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                    yerr=[[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]],
                    marker=markers.get(device, "D"), capsize=3, color=COLOURS[i % len(COLOURS)],
                    linestyle="-" if record is view.record else "--", label=label)
    ax.axhline(1.0, color="0.4", linestyle=":", linewidth=1, label="1.0: no difference")
    thresholds = sorted({c["threshold"] for *_, comps in entries for c in comps} - {1.0})
    for t in thresholds:
        ax.axhline(t, color="0.2", linestyle="--", linewidth=1, label=f"threshold {t:g}")
    ax.set_xscale("log")
    own = [a for f in (view.record or {}).get("figures") or [] for a in read_axes(f) if a.ratio]
    ax.set_xlabel(own[0].xlabel if own else "size (the comparisons' x)")
    ax.set_ylabel("anti-pattern / recommended")
    title = textwrap.shorten(view.tip.title, 60, placeholder="…")
    ax.set_title(f"{title}\nevery build's measured points, by device", fontsize=10)
    ax.legend(fontsize=7)
    data = png_bytes(fig)
    path = Path(srcdir) / GENERATED_FIGURES / f"{view.name}_devices.png"
    write_if_changed(path, data)
    words = sorted({records.device_word(d) for _, d, _, _ in entries})
    alt = " ".join(
        f"{label}: ratio from {number(p[0][1])}x at {number(p[0][0])} to {number(p[-1][1])}x at "
        f"{number(p[-1][0])}." for label, p in labels)
    caption = (f"The measured ratios of every build with a sweep ({', '.join(words)}), each "
               f"labelled with its machine and date; dashed lines come from result sets of other "
               "machines.")
    return {"path": f"/{GENERATED_FIGURES}/{view.name}_devices.png", "alt": alt, "caption": caption}
