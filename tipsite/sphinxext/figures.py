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
    """``batch size (samples, log scale)`` -> ``samples``: the unit, not the axis' scale."""
    m = _UNIT.search(label)
    return re.sub(r",?\s*log scale$", "", m.group(1).strip()).strip() if m else ""


QUANTITY_UNITS = ("MiB", "KiB", "GiB", "B", "bytes", "s", "ms", "us", "ns")


def _fmt_x(ax: Axes, x: float) -> str:
    unit = _unit(ax.xlabel)
    return quantity(x, unit) if unit in QUANTITY_UNITS else number(x)


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

# Text sizes, in points at FIGURE_DPI. A figure is shown at most as wide as the page's column:
# 358 px on a 390 px phone (measured in Chromium), where the smallest text of a page figure
# stays MIN_PHONE_TEXT_PX tall. A card shows its thumbnail 324 to 360 px wide, from a phone to
# a 1920 px screen (measured): its smallest text stays MIN_CARD_TEXT_PX tall at CARD_PX.
PHONE_PX = 358
MIN_PHONE_TEXT_PX = 8.0
CARD_PX = 320
MIN_CARD_TEXT_PX = 9.0
FIGURE_WIDTH_IN = 5.6
THUMB_TEXT_PT = 11.5


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def literal(fig):
    """Every text of ``fig`` drawn as it is written: matplotlib reads ``$...$`` as mathematics
    (a machine's name from a result set, ``$\\foo{$``, would stop the build), never here."""
    from matplotlib.text import Text

    for artist in fig.findobj(Text):
        artist.set_parse_math(False)
    return fig


def png_bytes(fig, dpi: int = FIGURE_DPI) -> bytes:
    plt = _pyplot()
    literal(fig)
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


_RST_MARKUP = [(re.compile(r"``(.+?)``"), r"\1"), (re.compile(r":[\w:.-]+:`(?:[^`<]*<)?([^`>]+)>?`"), r"\1"),
               (re.compile(r"\*\*(.+?)\*\*"), r"\1"), (re.compile(r"(?<![\w*])\*(?!\s)(.+?)\*"), r"\1"),
               (re.compile(r"`([^`]+)`_*"), r"\1")]


def plain_title(text: str) -> str:
    """A tip's title without its reST markup: ````inference_mode()`` versus ``no_grad()``` ->
    ``inference_mode() versus no_grad()``."""
    for pattern, repl in _RST_MARKUP:
        text = pattern.sub(repl, text)
    return " ".join(text.split())


def tick_label(x: float) -> str:
    """An axis tick as a reader writes the number: 8, 4,096, 65.5k, 4.19M, 0.125."""
    if x == 0:
        return "0"
    if abs(x) >= 1e6:
        return f"{number(x / 1e6)}M"
    if abs(x) >= 1e4:
        return f"{number(x / 1e3)}k"
    return number(x)


def set_size_ticks(ax, xs: list[float], most: int = 6) -> None:
    """Ticks at the measured sizes, written as numbers (no ``2x10^1`` on a log axis): the ends,
    and between them at most ``most`` in all, none closer to the last kept than 1/(most+1) of the
    axis, so labels never run into each other."""
    import math

    from matplotlib.ticker import NullFormatter, NullLocator

    xs = sorted(set(xs))
    tiny = [abs(x) for x in xs if x]
    if not xs or (tiny and min(tiny) < 1e-3):
        return  # tiny sizes: matplotlib's own ticks (powers of ten) read better than decimals
    log = ax.get_xscale() == "log" and xs[0] > 0
    pos = [math.log10(x) for x in xs] if log else list(xs)
    gap = (pos[-1] - pos[0]) / (most + 1)
    kept = [0]
    for i in range(1, len(xs)):
        if pos[i] - pos[kept[-1]] >= gap:
            kept.append(i)
    if kept[-1] != len(xs) - 1:  # the last size is a tick; the one before it makes room
        kept[-1] = len(xs) - 1
        if len(kept) > 1 and pos[kept[-1]] - pos[kept[-2]] < gap:
            kept.pop(-2)
    chosen = [xs[i] for i in kept]
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(chosen, [tick_label(x) for x in chosen])


def set_ratio_ticks(ax) -> None:
    """A ratio axis reads ``1.2x``: the unit on every tick."""
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))


def text_sizes_px(fig) -> list[tuple[str, float]]:
    """Every visible text of a figure (titles, labels, ticks, legend) and its size in pixels of
    the saved image."""
    from matplotlib.text import Text

    scale = FIGURE_DPI / 72
    out = []
    for artist in fig.findobj(Text):
        if artist.get_visible() and artist.get_text().strip():
            out.append((artist.get_text(), artist.get_fontsize() * scale))
    return out


def texts_outside(fig) -> list[str]:
    """The texts of a figure that reach past its edges (which the saved image would cut)."""
    from matplotlib.text import Text

    literal(fig).canvas.draw()
    renderer = fig.canvas.get_renderer()
    w, h = fig.bbox.width, fig.bbox.height
    undrawn = set()  # the labels of ticks outside an axis' range: matplotlib does not draw them
    for ax in fig.get_axes():
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - 1e-9 * abs(hi - lo) <= tick.get_loc() <= hi + 1e-9 * abs(hi - lo):
                    undrawn |= {id(tick.label1), id(tick.label2)}
    out = []
    for artist in fig.findobj(Text):
        if not (artist.get_visible() and artist.get_text().strip()) or id(artist) in undrawn:
            continue
        box = artist.get_window_extent(renderer)
        if box.x0 < -0.5 or box.y0 < -0.5 or box.x1 > w + 0.5 or box.y1 > h + 0.5:
            out.append(artist.get_text())
    return out


STATE_COLOURS = {**VERDICT_COLOURS, "older-tip-version": "#57606a", "not-measured": "#57606a",
                 "not-applicable": "#57606a", "busy": "#57606a"}


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


def _wrap(fig, renderer, text: str, x: float, most: int, right: float = 0.97, **kw) -> list[str]:
    """``text`` in lines that each end before ``right`` (figure coordinates) when drawn at ``x``,
    at most ``most`` of them, the last shortened at a word with "…" if the text goes on: no line
    is ever cut by the image's edge."""
    probe = fig.text(x, 0, "", parse_math=False, **kw)
    limit = right * fig.bbox.width

    def fits(s: str) -> bool:
        probe.set_text(s)
        return probe.get_window_extent(renderer).x1 <= limit

    lines: list[str] = []
    words = text.split()
    while words and len(lines) < most:
        n = len(words)
        while n > 1 and not fits(" ".join(words[:n])):
            n -= 1
        line = " ".join(words[:n])
        while not fits(line) and len(line) > 2:
            line = line[:-2] + "…"  # one word longer than the line: shortened inside it
        lines.append(line)
        words = words[n:]
    if words and lines:
        last = lines[-1].split()
        while last and not fits(" ".join(last) + " …"):
            last.pop()
        lines[-1] = " ".join(last).rstrip(",;:") + " …"
    probe.remove()
    return lines


def thumbnail_facts_figure(view):
    """A card-sized image of what decided each device: its state in the site's words
    (``DeviceView.label``), then its facts (✓/✗) or comparisons, in as many whole lines as fit."""
    plt = _pyplot()
    w, h = THUMB_SIZE
    fig = plt.figure(figsize=(w / FIGURE_DPI, h / FIGURE_DPI), dpi=FIGURE_DPI)
    fig.patch.set_facecolor("white")
    renderer = fig.canvas.get_renderer()
    line = THUMB_TEXT_PT * 1.45 / 72 * FIGURE_DPI / h  # one line's height, in figure units
    bottom = 0.03
    kind = {"behaviour": "checks behaviour", "speed": "measures speed",
            "memory": "measures memory"}.get(view.tip.kind, view.tip.kind)
    y = 0.95
    small = {"fontsize": THUMB_TEXT_PT, "va": "top"}
    for text in _wrap(fig, renderer, f"{view.tip.topic.replace('_', ' ')} · {kind}", 0.04, 1, **small):
        fig.text(0.04, y, text, color="#555555", **small)
    y -= line * 1.2
    shown_devices = list(view.devices.values())
    for i, d in enumerate(shown_devices):
        fig.text(0.04, y, d.word, fontsize=THUMB_TEXT_PT + 2, fontweight="bold", va="top", color="#222222")
        colour = STATE_COLOURS.get(d.token, "#57606a")
        # the page's badge: filled for a verdict, dashed outline for "not measured" (tips.css)
        hollow = d.token in ("not-measured", "not-applicable", "busy")
        # the badge's words without the date (the card's own badge shows it): they fit the width
        badge = f" {d.filter_value} "
        fig.text(0.22, y, badge, fontsize=THUMB_TEXT_PT + (2 if len(badge) <= 20 else 0),
                 fontweight="bold", va="top",
                 color=colour if hollow else "white",
                 bbox={"boxstyle": "round,pad=0.25", "facecolor": "white" if hollow else colour,
                       "edgecolor": colour, "linestyle": "--" if hollow else "-"})
        y -= line * 1.45
        rows: list[tuple[str, str, str]] = []
        if d.decision:  # measured, or measured on an older version of the tip (its label says so)
            rows = [_fact_line(k, v) for k, v in (d.decision.get("facts") or {}).items()]
            rows += [_comparison_line(c) for c in d.decision.get("comparisons") or []]
        if not rows and d.key_text:
            rows = [("•", d.key_text, "#444444")]
        if not rows:
            rows = [("", f"no {d.word} results yet", "#555555")]
        # the lines this device may fill: each later device keeps its name and two lines
        later = len(shown_devices) - i - 1
        room = int((y - bottom - later * line * 3.75) / line + 1e-9)
        for n, (mark, text, colour) in enumerate(rows):
            left = room - (1 if n < len(rows) - 1 else 0)  # a line for "and N more" if any follow
            if n == 0:
                left = max(left, min(room, 1))  # the first row before the count of the others
            wrapped = _wrap(fig, renderer, text, 0.11, min(2, left), color="#222222", **small)
            if not wrapped:
                if room >= 1:
                    fig.text(0.11, y, f"and {len(rows) - n} more on the page", color="#555555",
                             style="italic", **small)
                    y -= line
                break
            fig.text(0.05, y, mark, color=colour, fontweight="bold", **small)
            for text_line in wrapped:
                fig.text(0.11, y, text_line, color="#222222", **small)
                y -= line
            room -= len(wrapped)
        y -= line * 0.3
    return fig


def thumbnail_chart_figure(figure: dict):
    """A card-sized redrawing of a tip's first figure (its first axes): the same points and
    reference lines, with text large enough to read at card size and no title (the card has it)."""
    plt = _pyplot()
    axes = read_axes(figure)
    ax_data = next((a for a in axes if a.series), None)
    if ax_data is None:
        return None
    w, h = THUMB_SIZE
    fig, ax = plt.subplots(figsize=(w / FIGURE_DPI, h / FIGURE_DPI), dpi=FIGURE_DPI, layout="constrained")
    small = THUMB_TEXT_PT - 1
    xs = []
    for i, s in enumerate(ax_data.series[:len(COLOURS)]):
        pts = s.points()
        px = [p[0] for p in pts]
        py = [p[1] for p in pts]
        xs += px
        colour = COLOURS[i % len(COLOURS)]
        if s.low and s.high:
            err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
            ax.errorbar(px, py, yerr=err, marker="o", capsize=3, color=colour, linewidth=2,
                        label=_short(s.label, 24) if s.label else None)
        else:
            ax.plot(px, py, marker="os^Dv"[i % 5], color=colour, linewidth=2,
                    label=_short(s.label, 24) if s.label else None)
    for label, yref in ax_data.refs:
        ax.axhline(yref, color="0.3", linestyle="--" if label.startswith("threshold") else ":", linewidth=1.2)
    ax.set_xscale(ax_data.xscale if ax_data.xscale in ("log", "linear") else "linear")
    if ax_data.yscale in ("log", "linear"):
        ax.set_yscale(ax_data.yscale)
    set_size_ticks(ax, xs, most=4)
    ax.tick_params(labelsize=small)
    if ax_data.ratio:
        set_ratio_ticks(ax)
    ax.set_xlabel(_short(_noun(_no_log(ax_data.xlabel)), 34), fontsize=THUMB_TEXT_PT)
    unit = "" if ax_data.ratio else _unit(ax_data.ylabel)
    ylabel = _y_noun(ax_data, short=True) + (f" ({unit})" if unit else "")
    ax.set_ylabel("\n".join(textwrap.wrap(ylabel, 20, max_lines=2, placeholder=" …")), fontsize=THUMB_TEXT_PT)
    labelled = [s for s in ax_data.series if s.label]
    if 2 <= len(labelled) <= 3:
        ax.legend(fontsize=small, framealpha=0.85, borderpad=0.3, handlelength=1.2, loc="best")
    return fig


def thumbnail_png(view) -> bytes:
    """The card's image of a tip: its first figure redrawn at card size, or, for a tip that drew
    none, what decided each device."""
    figs = (view.record or {}).get("figures") or []
    fig = thumbnail_chart_figure(figs[0]) if figs else None
    return png_bytes(fig if fig is not None else thumbnail_facts_figure(view))


def thumb_path(out_dir: Path, tip) -> Path:
    """Where sphinx-gallery keeps a tip's thumbnail (the cards and the gallery index show it)."""
    return out_dir / tip.topic / "images" / "thumb" / f"sphx_glr_{tip.name}_thumb.png"


def write_thumbnails(app: Sphinx) -> None:
    """builder-inited, after the views: every tip's thumbnail, drawn for the card (sphinx-gallery's
    own, its first figure shrunk, had axis labels 6 px tall on a card)."""
    import hashlib

    _, out_dir = state.gallery_dirs(app)
    # drawing costs ~0.1 s a tip: redraw only when what it shows changed, or when sphinx-gallery
    # wrote its own over it (the digests of what was drawn, and of the image written, in one file)
    stamps_path = out_dir / ".tipsite-thumbnails.json"
    try:
        stamps = json.loads(stamps_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        stamps = {}
    new_stamps = {}
    code = page_layer_fingerprint()  # the drawing code, and all it calls, once per build
    for view in state.views(app).values():
        if view.record is None:
            continue
        path = thumb_path(out_dir, view.tip)
        key = _thumbnail_key(view, code)
        old = stamps.get(view.name)
        if not (isinstance(old, list) and old[0] == key and path.exists()
                and hashlib.sha256(path.read_bytes()).hexdigest() == old[1]):
            data = thumbnail_png(view)
            if write_if_changed(path, data):
                logger.info(f"tipsite: drew the thumbnail of {view.name} for its card")
            old = [key, hashlib.sha256(data).hexdigest()]
        new_stamps[view.name] = old
    if new_stamps != stamps:
        out_dir.mkdir(parents=True, exist_ok=True)
        stamps_path.write_text(json.dumps(new_stamps, indent=1, sort_keys=True), encoding="utf-8")


def _thumbnail_key(view, code: str) -> str:
    """A digest of everything thumbnail_png reads, and of ``code``: the page layer's fingerprint."""
    import hashlib

    shown = [view.tip.topic, view.tip.kind, code, ((view.record or {}).get("figures") or [None])[0]]
    for d in view.devices.values():
        shown.append([d.word, d.state, d.label, d.token, d.key_text,
                      (d.decision or {}).get("facts"), (d.decision or {}).get("comparisons")])
    text = json.dumps(shown, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- every device's points in one figure -----------------------------------------------------------

def _no_log(label: str) -> str:
    """``batch size (samples, log scale)`` -> ``batch size (samples)``: the axis shows the scale."""
    label = re.sub(r",?\s*log scale\s*(?=\))", "", label)
    return re.sub(r"\s*\(\s*\)", "", label).strip()


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


@dataclass
class _Line:
    """One machine's series on one panel: (x, median, low, high) points."""
    record: dict
    device: str
    series: str
    xlabel: str
    ylabel: str
    points: list[tuple[float, float, float, float]]


def _name_quantity(comps: list[dict]) -> str:
    """What the comparisons' names say is swept: ``row updates, 64 elements per row`` (x 64) ->
    ``elements per row``; ``MLP forward, width 4`` -> ``width``; '' when they do not agree."""
    found = set()
    for c in comps:
        x = c["x"]
        spelled = {number(x), f"{x:g}", str(int(x)) if float(x).is_integer() else f"{x:g}"}
        hit = next((m for s in spelled for m in [re.search(rf"(?<![\d.,]){re.escape(s)}(?![\d.,])", c["name"])] if m), None)
        if hit is None:
            return ""
        after = c["name"][hit.end():].strip(" ,;:)")
        before = re.findall(r"[A-Za-z][\w-]*", c["name"][:hit.start()])
        words = after if re.fullmatch(r"[A-Za-z][\w -]*", after or "-") else (before[-1] if before else "")
        found.add(words.strip())
    return found.pop() if len(found) == 1 else ""


def _fallback_axis(record: dict, comps: list[dict]) -> str:
    """The x label for comparisons no figure of their record draws as ratios: a figure of the
    record whose series spans their sizes (a memory tip's plot_series), else what their names say."""
    xs = {c["x"] for c in comps}
    for f in record.get("figures") or []:
        for ax in read_axes(f):
            if any(all(any(_close(x, sx) for sx in s.x) for x in xs) for s in ax.series):
                return ax.xlabel
    return _name_quantity(comps) or "size"


def _lines_of(record: dict, known: dict[str, tuple[str, str, str]] | None = None) -> list[_Line]:
    """Each sweep of ratio comparisons in a record, as the tip drew it: the series of its own
    figures (their axis labels, their names), each point once. Comparisons no figure of the
    record draws are grouped as the verdict grouped them (a group of the same points as another
    is not repeated), labelled as ``known`` says the tip drew that group elsewhere (another
    build's figure), else from the record's other figures or the comparisons' names.

    With ``known`` given, the groups this record's figures draw are added to it."""
    known = {} if known is None else known
    axes = [a for f in record.get("figures") or [] for a in read_axes(f) if a.ratio]
    out: list[_Line] = []
    for device, decision in (record.get("verdicts") or {}).items():
        comps = [c for c in decision.get("comparisons") or []
                 if c.get("x") is not None and c.get("measure") == "ratio"]
        groups = decision.get("groups") or {}
        drawn: dict[tuple[str, str, str], list[dict]] = {}
        rest = []
        for c in comps:
            hit = next(((a, s) for a in axes for s in a.series
                        if any(_close(x, c["x"]) and _close(y, c["median"]) for x, y in zip(s.x, s.y))), None)
            if hit is None:
                rest.append(c)
                continue
            labels = (hit[0].xlabel, hit[0].ylabel, hit[1].label)
            drawn.setdefault(labels, []).append(c)
            for group, members in groups.items():
                if c["name"] in members:
                    known.setdefault(group, labels)
        by_name = {c["name"]: c for c in rest}
        used: set[str] = set()
        for group, members in groups.items():
            chosen = [by_name[m] for m in members if m in by_name and m not in used]
            if len(chosen) >= 2:
                used |= {c["name"] for c in chosen}
                pairs = {(c["baseline"], c["candidate"]) for c in chosen}
                ylabel = (" / ".join(pairs.pop()) if len(pairs) == 1
                          else f"{chosen[0]['metric']}, anti-pattern / recommended")
                labels = known.get(group) or (_fallback_axis(record, chosen), ylabel, group)
                drawn.setdefault(labels, []).extend(chosen)
        for (xlabel, ylabel, series), members in drawn.items():
            points = sorted({(c["x"], c["median"], c["low"], c["high"]) for c in members})
            if len({p[0] for p in points}) >= 2:
                out.append(_Line(record, device, series, xlabel, ylabel, points))
    return out


def _all_lines(view) -> list[_Line]:
    """Every build's lines (:func:`_lines_of`), the builds whose figures name their groups first."""
    known: dict[str, tuple[str, str, str]] = {}
    for record in view.columns:
        if record.get("figures"):  # only a record's own figures name groups
            _lines_of(record, known)
    return [ln for record in view.columns for ln in _lines_of(record, known)]


def _panel_key(line: _Line) -> tuple[str, str]:
    """Lines share a panel when they sweep the same quantity: the x label's words before its
    parentheses, and the y label's."""
    return (_noun(_no_log(line.xlabel)).lower(), _noun(line.ylabel).lower())


def devices_figure(view, srcdir: Path) -> dict | None:
    """Every build's points side by side, when another build (a result set) has a sweep.

    One panel per quantity swept (a tip sweeping widths and row lengths gets two), each line one
    machine's series as the tip drew it; colour and line style name the machine (solid: this
    build, dashed: a result set), the marker names the series. Writes
    ``generated/figures/<tip>_devices.png`` under ``srcdir`` and returns its docname-style path,
    alt text and caption; None when only this build measured a sweep (its own figure shows it)
    or no build did.
    """
    lines = _all_lines(view)
    if not any(ln.record is not view.record for ln in lines) or len(lines) < 2:
        return None
    fig = _devices_fig(view, lines)
    data = png_bytes(fig)
    path = Path(srcdir) / GENERATED_FIGURES / f"{view.name}_devices.png"
    write_if_changed(path, data)
    words = sorted({records.device_word(ln.device) for ln in lines})
    alt = " ".join(
        f"{_machine_label(view, ln)}, {ln.series}: ratio from {number(ln.points[0][1])}x at "
        f"{_noun(_no_log(ln.xlabel))} {tick_label(ln.points[0][0])} to {number(ln.points[-1][1])}x at "
        f"{tick_label(ln.points[-1][0])}." for ln in lines)
    caption = (f"The measured ratios of every build with a sweep ({', '.join(words)}), each "
               f"labelled with its machine and date; dashed lines come from result sets of other "
               "machines.")
    return {"path": f"/{GENERATED_FIGURES}/{view.name}_devices.png", "alt": alt, "caption": caption}


def _machine(record: dict, device: str) -> str:
    return (record.get("hosts", {}).get(device) or {}).get("name") or "unknown machine"


def _machine_label(view, line: _Line) -> str:
    """``CPU: AMD EPYC, AVX512-BF16, 2 cores, 2026-11-26 (this build)``: the machine class, which
    tells two machines of one name apart (an EPYC with and one without bfloat16 instructions)."""
    origin = "this build" if line.record is view.record else "result set"
    machine = records.machine_class(line.record, line.device)
    if machine == devices.UNKNOWN_CLASS:
        machine = f"{_short(_machine(line.record, line.device), 30)}, {devices.UNKNOWN_CLASS}"
    return f"{records.device_word(line.device)}: {machine}, {line.record['date'][:10]} ({origin})"


def _devices_fig(view, lines: list[_Line]):
    """The figure of :func:`devices_figure`, before it is saved (tests read its texts)."""
    plt = _pyplot()
    from matplotlib.lines import Line2D

    panels: dict[tuple[str, str], list[_Line]] = {}
    for ln in lines:
        panels.setdefault(_panel_key(ln), []).append(ln)
    machines = list(dict.fromkeys((id(ln.record), ln.device) for ln in lines))
    series_names = list(dict.fromkeys(ln.series for ln in lines))
    markers = ["o", "s", "^", "D", "v", "P", "X"]
    n = len(panels)
    thresholds: set[float] = set()
    fig, axs = plt.subplots(n, 1, figsize=(FIGURE_WIDTH_IN, 0.6 + 3.0 * n + 0.3 * (len(machines) + len(series_names))),
                            layout="constrained", squeeze=False)
    for ax, (key, members) in zip(axs[:, 0], panels.items()):
        xs = []
        for ln in members:
            colour = COLOURS[machines.index((id(ln.record), ln.device)) % len(COLOURS)]
            pts = ln.points
            xs += [p[0] for p in pts]
            # this build's thick and under, a result set's dashed and hollow on top: lines that
            # coincide (a memory ratio is the same everywhere) both stay visible
            own = ln.record is view.record
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                        yerr=[[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]],
                        marker=markers[series_names.index(ln.series) % len(markers)],
                        markersize=7 if own else 6, markerfacecolor=colour if own else "white",
                        linewidth=2.6 if own else 1.6, capsize=3, color=colour,
                        linestyle="-" if own else "--", zorder=2 if own else 3)
        ax.axhline(1.0, color="0.4", linestyle=":", linewidth=1)
        for t in sorted({c["threshold"] for ln in members for c in _comparisons_at(ln)} - {1.0}):
            ax.axhline(t, color="0.2", linestyle=(0, (5, 3)), linewidth=1)
            thresholds.add(t)
        ax.set_xscale("log")
        set_size_ticks(ax, xs)
        set_ratio_ticks(ax)
        ax.tick_params(labelsize=10)
        xlabels = {ln.xlabel for ln in members}
        ax.set_xlabel(_no_log(xlabels.pop()) if len(xlabels) == 1 else key[0], fontsize=11)
        ylabels = {ln.ylabel for ln in members}
        ylabel = ylabels.pop() if len(ylabels) == 1 else key[1] or "ratio"
        ax.set_ylabel("\n".join(textwrap.wrap(ylabel, 42, max_lines=2, placeholder=" …")), fontsize=11)
        if n > 1:
            names = list(dict.fromkeys(ln.series for ln in members))
            ax.set_title(_short("; ".join(names), 60), fontsize=11)
    title = textwrap.wrap(plain_title(view.tip.title), 52, max_lines=2, placeholder=" …")
    fig.suptitle("\n".join([*title, "every build's measured points"]), fontsize=12)
    handles = []
    for i, (rid, device) in enumerate(machines):
        ln = next(ln for ln in lines if (id(ln.record), ln.device) == (rid, device))
        own = ln.record is view.record
        label = _machine_label(view, ln)
        if len(label) > 66:  # the date on a line of its own rather than past the image's edge
            label = label.replace(f", {ln.record['date'][:10]} (", f",\n{ln.record['date'][:10]} (")
        handles.append(Line2D([], [], color=COLOURS[i % len(COLOURS)], linewidth=2.6 if own else 1.6,
                              linestyle="-" if own else "--", label=label))
    # markers name the series where one machine has several on a panel (else the panel's title does)
    if any(len({ln.series for ln in members if (id(ln.record), ln.device) == m}) > 1
           for members in panels.values() for m in machines):
        handles += [Line2D([], [], color="0.25", marker=markers[i % len(markers)], linestyle="none",
                           label=_short(name, 48)) for i, name in enumerate(series_names)]
    handles.append(Line2D([], [], color="0.4", linestyle=":", label="1.0x: no difference"))
    handles += [Line2D([], [], color="0.2", linestyle=(0, (5, 3)), label=f"threshold {t:g}x")
                for t in sorted(thresholds)]
    fig.legend(handles=handles, loc="outside lower center", fontsize=10, ncols=1, frameon=False)
    return fig


def _comparisons_at(line: _Line) -> list[dict]:
    """The comparisons a line draws (for their thresholds)."""
    decision = (line.record.get("verdicts") or {}).get(line.device) or {}
    points = {(p[0], p[1]) for p in line.points}
    return [c for c in decision.get("comparisons") or [] if (c.get("x"), c.get("median")) in points]


# --- every figure of a page links to its full image (issue 34) -----------------------------------

# sphinx-gallery writes ``class = "sphx-glr-single-img"`` (spaces around "=")
_FIGURE_IMG = re.compile(r'<img\b[^>]*\bclass\s*=\s*"[^"]*\bsphx-glr-(?:single|multi)-img\b[^"]*"[^>]*>')
_SRC = re.compile(r'\bsrc="([^"]+)"')


def link_figures(body: str) -> str:
    """Each figure sphinx-gallery shows becomes a link to its full image (a reader enlarges it
    on a phone), followed by a visible "Open the full image" link; tips.css lets it keep a
    readable width on a phone inside its own scrolling frame."""
    def wrap(m: re.Match) -> str:
        src = _SRC.search(m.group(0))
        if not src:
            return m.group(0)
        href = src.group(1)
        return (f'<a class="tips-figure-link" href="{href}">{m.group(0)}</a>'
                f'<a class="tips-figure-enlarge" href="{href}">Open the full image</a>')

    if "tips-figure-link" in body:
        return body
    return _FIGURE_IMG.sub(wrap, body)


def link_figures_in_page(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    """html-page-context: :func:`link_figures` on the page's body."""
    body = context.get("body")
    if isinstance(body, str) and "sphx-glr-" in body:
        context["body"] = link_figures(body)
