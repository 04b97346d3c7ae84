"""Figures: every speed and memory tip draws where its effect pays, each figure plots the very
comparisons its verdict used, says in words what it shows, stays small, and no thumbnail is
sphinx-gallery's placeholder.

Two kinds of tests: on the built site (the ``html_dir`` fixture: the full build, or
``TIPS_TEST_HTML``; the records are read from the same checkout's ``docs/tips``), and on tiny
builds (``tests/tinysite``) of tips written here: a speed tip without a figure stops the build,
a tip measured at one size says why, a CUDA result set draws its points beside the CPU ones.
"""

from __future__ import annotations

import html as html_lib
import json
import re
from pathlib import Path

import pytest
from conftest import make_tip

from conf import settings
from tipsite import records, tipmeta
from tipsite.sphinxext import figures

pytest_plugins = ["_browser"]

MAX_FIGURE_BYTES = 150 * 1024
TOL = 1e-9


def _records(tips: list[tipmeta.Tip]) -> dict[str, dict]:
    found = {}
    for tip in tips:
        record = records.read_record(settings.TIPS_OUT_DIR / tip.topic / tip.path.name)
        if record is not None:
            found[tip.name] = record
    return found


@pytest.fixture(scope="module")
def built(html_dir, tips):
    """The built site and the records of its tips."""
    return html_dir, _records(tips)


# --- on the built site -------------------------------------------------------------------------------

def test_every_figure_file_is_under_150_kb(built):
    html_dir, _ = built
    images = [p for p in (html_dir / "_images").iterdir() if p.suffix in (".png", ".svg", ".jpg")]
    assert images, "the site has no images at all"
    too_big = {p.name: p.stat().st_size for p in images if p.stat().st_size >= MAX_FIGURE_BYTES}
    assert not too_big, f"figures of 150 KB or more (bytes): {too_big}"


def _comparisons(record: dict) -> list[dict]:
    return [c for d in (record.get("verdicts") or {}).values() for c in d.get("comparisons") or []]


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL * max(1.0, abs(a), abs(b))


def test_each_plotted_interval_is_a_recorded_comparison(built, tips):
    """A plot_ratios point is one comparison the verdict used: its x, median, low and high."""
    _, recs = built
    checked = 0
    for tip in tips:
        record = recs.get(tip.name)
        if record is None or not record.get("verdicts"):
            continue  # decided nothing here (a CUDA claim on a CPU build): it may show what it saw
        comps = [c for c in _comparisons(record) if c.get("x") is not None]
        for n, fig in enumerate(record.get("figures") or [], start=1):
            for ax in figures.read_axes(fig):
                if not ax.ratio:
                    continue
                for s in ax.series:
                    if s.low is None or s.high is None:
                        continue
                    for x, y, low, high in s.points():
                        match = [c for c in comps if _close(c["x"], x) and _close(c["median"], y)
                                 and _close(c["low"], low) and _close(c["high"], high)]
                        assert match, (f"{tip.name} figure {n}, {s.label or 'a series'}: the point "
                                       f"x={x:g}, {y:g} [{low:g}, {high:g}] is none of the "
                                       "comparisons its record holds")
                        checked += 1
    assert checked or not any(t.kind == "speed" for t in tips if t.name in recs), \
        "no speed tip's figure holds an interval: nothing was compared"


def test_speed_tips_draw_the_comparisons_that_decided_them(built, tips):
    """Every sweep the verdict decided from (comparisons at several sizes) is on a figure, unless
    the tip says why it has a single size."""
    _, recs = built
    for tip in tips:
        record = recs.get(tip.name)
        if record is None or tip.kind != "speed" or tip.single_size:
            continue
        swept = [c for c in _comparisons(record) if c.get("x") is not None and c["measure"] == "ratio"]
        if len({c["x"] for c in swept}) < 2:
            continue
        plotted = {(round(x, 12), round(y, 12)) for fig in record.get("figures") or []
                   for s in figures.data_series(fig) for x, y, *_ in s.points()}
        missing = [c["name"] for c in swept if (round(c["x"], 12), round(c["median"], 12)) not in plotted]
        assert not missing, f"{tip.name}: comparisons decided on but not drawn: {missing}"


def _images(page: str) -> list[dict[str, str]]:
    out = []
    for tag in re.findall(r"<img\b[^>]*>", page):
        attrs = {k: html_lib.unescape(v) for k, v in re.findall(r'(\w[\w-]*)="([^"]*)"', tag)}
        out.append(attrs)
    return out


def test_alt_text_says_what_each_figure_shows(built, tips):
    html_dir, recs = built
    seen = 0
    for tip in tips:
        record = recs.get(tip.name)
        if record is None or not record.get("figures"):
            continue
        page = (html_dir / f"{tip.docname}.html").read_text(encoding="utf-8")
        shown = [i for i in _images(page) if re.search(rf"sphx_glr_{tip.name}_\d{{3}}\.png$", i.get("src", ""))]
        assert len(shown) == len(record["figures"]), f"{tip.name}: {len(shown)} figures on the page"
        for img in shown:
            n = int(re.search(r"_(\d{3})\.png$", img["src"]).group(1))
            expected = figures.alt_text(record["figures"][n - 1])
            assert " ".join(img.get("alt", "").split()) == expected, f"{tip.name} figure {n}"
            assert re.search(r"\d", expected) and " at " in expected, expected
            seen += 1
    assert seen, "no tip page shows a figure"


def _placeholder(tmp_path: Path) -> bytes:
    """sphinx-gallery's placeholder thumbnail, made the way it makes it."""
    import sphinx_gallery
    from sphinx_gallery.gen_gallery import DEFAULT_GALLERY_CONF
    from sphinx_gallery.utils import scale_image

    src = Path(sphinx_gallery.__file__).parent / "_static" / "no_image.png"
    out = tmp_path / "placeholder.png"
    scale_image(src, out, *DEFAULT_GALLERY_CONF["thumbnail_size"])
    return out.read_bytes()


def _same_picture(a: Path | bytes, b: bytes) -> bool:
    import io

    from PIL import Image, ImageChops

    first = Image.open(io.BytesIO(a if isinstance(a, bytes) else a.read_bytes())).convert("RGB")
    second = Image.open(io.BytesIO(b)).convert("RGB")
    return first.size == second.size and ImageChops.difference(first, second).getbbox() is None


def test_no_thumbnail_is_the_placeholder(built, tips, tmp_path):
    html_dir, _ = built
    placeholder = _placeholder(tmp_path)
    thumbs = sorted((html_dir / "_images").glob("sphx_glr_*_thumb.png"))
    names = {t.name for t in tips}
    assert {re.sub(r"^sphx_glr_(.*)_thumb\.png$", r"\1", p.name) for p in thumbs} >= {
        n for n in names if (html_dir / f"{next(t for t in tips if t.name == n).docname}.html").exists()}
    same = [p.name for p in thumbs if _same_picture(p, placeholder)]
    assert not same, f"thumbnails that are sphinx-gallery's placeholder: {same}"


def test_each_card_shows_its_own_tips_thumbnail(built, tips):
    html_dir, _ = built
    page = (html_dir / "index.html").read_text(encoding="utf-8")
    srcs = [i["src"] for i in _images(page) if "tip-card-thumb" in i.get("class", "")]
    assert len(srcs) == len(tips)
    for tip in tips:
        assert any(s.endswith(f"sphx_glr_{tip.name}_thumb.png") for s in srcs), tip.name


def test_the_compatibility_page_charts_each_tips_key_figure(built, tips):
    from tipsite import compat as matrix
    from tipsite.sphinxext import compat

    html_dir, _ = built
    page = (html_dir / "reference" / "compat.html").read_text(encoding="utf-8")
    runs = matrix.load_all()
    charted = [t for t in tips if compat.chart_points(t.name, runs)[2]]
    for tip in charted:
        anchor = compat.chart_anchor(tip.name)
        assert f'id="{anchor}"' in page, f"no chart target for {tip.name}"
        tip_page = (html_dir / f"{tip.docname}.html").read_text(encoding="utf-8")
        assert f"compat.html#{anchor}" in tip_page, f"{tip.name}'s page does not link to its chart"
    imgs = [i for i in _images(page) if "tips-compat-chart" in i.get("class", "")]
    assert len(imgs) == len(charted)
    assert all(re.search(r"on torch \d", i.get("alt", "")) for i in imgs)


# --- tiny builds --------------------------------------------------------------------------------------

SWEEP_HELPERS = ("compare_values", "decide", "report", "plot_ratios")  # and what they call

SWEEP_BODY = '''\
import torch

RULE = "holds if slow is >5% slower than fast at every size"
sizes = [8, 64, 512, 4096]
speedups = [compare_values(f"speed-up at size {n}",
                           {"slow": [1.30, 1.20, 1.25, 1.28, 1.31, 1.27],
                            "fast": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]},
                           threshold=1.05, device="cpu", metric="time", unit="s", x=n)
            for n in sizes]
DRAW
decision = decide("cpu", [("holds", {"speed-up": "all above"}), ("depends", {})],
                  groups={"speed-up": speedups}, key=speedups[0])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {"cpu": decision}, "measurements": [],
          "skipped": []}
'''
DRAW = ('fig = plot_ratios({"slow vs fast": speedups}, xlabel="size (elements)",\n'
        '                  title="A tiny sweep")')


def _sweep_tip(draw: bool = True, extra_meta: str = "") -> str:
    return make_tip(SWEEP_BODY.replace("DRAW", DRAW if draw else ""), kind="speed",
                    helpers=SWEEP_HELPERS, extra_meta=extra_meta)


def test_a_speed_tip_without_a_figure_stops_the_build(tiny_build):
    result = tiny_build({"speed/tip_nofig.py": _sweep_tip(draw=False)})
    assert result.returncode != 0
    assert "tip_nofig.py: a speed tip draws where its effect pays" in result.output, result.output[-3000:]
    assert "sphinx_gallery_tips_single_size" in result.output


def test_figures_single_size_and_a_cuda_set_on_tiny_pages(tiny_site, good_tip, tmp_path):
    """One tiny site: a sweep with its figure, a speed tip measured at one size that says why, a
    behaviour tip; then the sweep's record relabelled as a CUDA machine's result set."""
    why = "The cost is per call: one size shows it."
    tiny_site.write({
        "speed/tip_sweep.py": _sweep_tip(),
        "speed/tip_one_size.py": _sweep_tip(draw=False, extra_meta=f'# sphinx_gallery_tips_single_size = "{why}"'),
        "correctness/tip_facts.py": good_tip,
    })
    result = tiny_site.build()
    assert result.returncode == 0, result.output[-4000:]

    # the sweep: alt text from the plotted data, the record holds the intervals
    page = result.page("speed", "tip_sweep")
    (img,) = [i for i in _images(page) if "sphx_glr_tip_sweep_001" in i.get("src", "")]
    assert img["alt"].startswith("A tiny sweep (CPU"), img["alt"]
    assert "slow vs fast: speed-up stays about the same, from 1.27x at size 8 to 1.27x at size 4,096" in img["alt"]
    assert "its interval lies above the threshold 1.05x at 4 of 4 points" in img["alt"]
    record = records.read_record(result.src / "tips" / "speed" / "tip_sweep.py")
    (series,) = figures.data_series(record["figures"][0])
    assert series.label == "slow vs fast" and series.low and series.high

    # one size: the page says why, and the build did not ask for a figure
    one = re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", " ", result.page("speed", "tip_one_size"))))
    assert f"Measured at one size, no sweep: {why}" in one

    # thumbnails: the behaviour tip's and the one-size tip's are drawn from their records
    placeholder = _placeholder(tmp_path)
    for topic, name in (("correctness", "tip_facts"), ("speed", "tip_one_size"), ("speed", "tip_sweep")):
        thumb = result.src / "tips" / topic / "images" / "thumb" / f"sphx_glr_{name}_thumb.png"
        assert thumb.exists() and not _same_picture(thumb, placeholder), name

    # a CUDA machine's result set with the same sweep: a second figure with both devices' points
    cuda = json.loads(json.dumps(record))
    cuda["hosts"] = {"cpu": {"name": "host CPU"}, "cuda": {"name": "NVIDIA Test GPU", "cuda": "13.0"}}
    cuda["date"] = "2026-11-20 10:00 UTC"
    decision = cuda["verdicts"].pop("cpu")
    decision["device"] = "cuda"
    for c in decision["comparisons"]:
        c["device"] = "cuda"
        c["x"] = c["x"] * 16
    cuda["verdicts"]["cuda"] = decision
    set_path = tmp_path / "cuda-set.json"
    set_path.write_text(json.dumps(records.make_set([cuda])), encoding="utf-8")
    result = tiny_site.build(TIPS_RESULT_SETS=str(set_path))
    assert result.returncode == 0, result.output[-4000:]
    page = result.page("speed", "tip_sweep")
    (devices,) = [i for i in _images(page) if "tip_sweep_devices.png" in i.get("src", "")]
    assert "CUDA: NVIDIA Test GPU, machine class unknown, 2026-11-20 (result set)" in devices["alt"]
    assert "CPU: " in devices["alt"] and "(this build)" in devices["alt"]
    assert "labelled with its machine and date" in page


# --- charts that read right (issue 25, item 8): drawn from synthetic records ---------------------------

def _comparison(name: str, x: float, median: float, device: str = "cpu", threshold: float = 1.05) -> dict:
    return {"name": name, "x": x, "median": median, "low": median * 0.95, "high": median * 1.05,
            "measure": "ratio", "metric": "time", "unit": "s", "baseline": "no_grad",
            "candidate": "inference_mode", "device": device, "threads": 1, "threshold": threshold,
            "outcome": "above", "ratios": [median] * 6, "base": [median] * 6, "cand": [1.0] * 6}


def _axes_figure(xlabel: str, label: str, comps: list[dict]) -> dict:
    """A recorded plot_ratios figure (gallery._figure_data's shape) drawing ``comps``."""
    xs, ys = [c["x"] for c in comps], [c["median"] for c in comps]
    return {"axes": [{"title": "t\nCPU, 1 thread, torch 2.13.0", "xlabel": xlabel,
                      "ylabel": "anti-pattern time / recommended time", "xscale": "log", "yscale": "linear",
                      "lines": [{"label": label, "x": xs, "y": ys},
                                {"label": "_hline", "x": [0.0, 1.0], "y": [1.0, 1.0]}]}]}


def _two_sweeps(device: str, widths: list[int], rows: list[int], figures_drawn: bool) -> dict:
    """A record like tip_inference_mode's: MLP widths and elements per row, two groups, and a
    second pair of groups holding the very same comparisons (as tip_channels_last's)."""
    mlp = [_comparison(f"MLP forward, width {w}", w, 1.0 + i / 100, device) for i, w in enumerate(widths)]
    row = [_comparison(f"row updates, {n} elements per row", n, 1.2 + i / 50, device) for i, n in enumerate(rows)]
    figs = ([_axes_figure("elements per row (log scale)", "view + in-place op per row", row),
             _axes_figure("model width, features (log scale)", "MLP forward", mlp)] if figures_drawn else [])
    groups = {"MLP": [c["name"] for c in mlp], "row updates": [c["name"] for c in row],
              "faster": [c["name"] for c in row], "slower": [c["name"] for c in row]}
    decision = {"verdict": "depends", "comparisons": mlp + row, "groups": groups, "facts": {}}
    host = {"name": "AMD EPYC"} if device == "cpu" else {"name": "NVIDIA H200"}
    return {"verdicts": {device: decision}, "figures": figs, "hosts": {device: host},
            "date": "2026-11-26 07:00 UTC", "torch": "2.13.0"}


def _view(records_: list[dict], title: str = "``inference_mode()`` versus ``no_grad()``"):
    from types import SimpleNamespace

    from tipsite.sphinxext.view import DeviceView

    tip = SimpleNamespace(name="tip_x", title=title, topic="speed", kind="speed")
    devices = {}
    for r in records_:
        for device, decision in r["verdicts"].items():
            devices.setdefault(device, DeviceView(device, "measured", decision=decision, record=r))
    return SimpleNamespace(name="tip_x", tip=tip, record=records_[0], columns=records_, devices=devices)


def _phone_px(fig) -> float:
    """The smallest text of a page figure, in CSS pixels, on a phone's column."""
    width = fig.get_size_inches()[0] * figures.FIGURE_DPI
    return min(px for _, px in figures.text_sizes_px(fig)) * min(1.0, figures.PHONE_PX / width)


def test_the_devices_figure_has_one_quantity_per_axis_and_no_repeated_series():
    """tip_inference_mode's chart had MLP widths on an "elements per row" axis, tip_channels_last's
    four legend entries for two lines, a title in raw reST and a placeholder axis label."""
    this = _two_sweeps("cpu", [4, 32, 256, 2048], [1, 64, 4096, 65536], figures_drawn=True)
    cuda = _two_sweeps("cuda", [16, 128, 1024], [1, 4096, 262144, 4194304], figures_drawn=False)
    view = _view([this, cuda])
    lines = figures._all_lines(view)
    # one line per machine and sweep: the groups "faster" and "slower" repeat "row updates"
    assert sorted((ln.device, ln.series) for ln in lines) == [
        ("cpu", "MLP forward"), ("cpu", "view + in-place op per row"),
        ("cuda", "MLP forward"), ("cuda", "view + in-place op per row")]
    fig = figures._devices_fig(view, lines)
    axes = fig.get_axes()
    assert sorted(ax.get_xlabel() for ax in axes) == ["elements per row", "model width, features"]
    for ax in axes:  # each panel holds one sweep of each machine, and its points only
        drawn = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 2 and ln.get_linestyle() != "None"]
        assert len(drawn) == 2, [ln.get_label() for ln in drawn]
        xs = {float(x) for ln in drawn for x in ln.get_xdata()}
        assert xs <= ({4, 32, 256, 2048, 16, 128, 1024} if "width" in ax.get_xlabel()
                      else {1, 64, 4096, 65536, 262144, 4194304}), (ax.get_xlabel(), xs)
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        assert ticks and not any("$" in t or "^" in t for t in ticks), ticks  # no 2x10^1
        assert all(t.get_text().endswith("x") for t in ax.get_yticklabels() if t.get_text()), "ratio ticks"
    texts = " ".join(t for t, _ in figures.text_sizes_px(fig))
    assert "``" not in texts and "inference_mode() versus no_grad()" in texts
    assert "the comparisons' x" not in texts and "size (" not in texts
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(legend) == len(set(legend)), legend
    assert sum("AMD EPYC" in t or "NVIDIA H200" in t for t in legend) == 2, legend
    assert _phone_px(fig) >= figures.MIN_PHONE_TEXT_PX, "text a phone cannot read"
    assert not figures.texts_outside(fig)


def test_the_devices_figure_names_each_machine_class():
    """Two EPYCs, one with bfloat16 instructions and one without: the same name, two classes."""
    this = _two_sweeps("cpu", [4, 32, 256, 2048], [1, 64, 4096, 65536], figures_drawn=True)
    other = _two_sweeps("cpu", [4, 32, 256, 2048], [1, 64, 4096, 65536], figures_drawn=True)
    this["hosts"]["cpu"].update(flags=["avx2", "avx512f", "avx512_bf16"], cores=2)
    other["hosts"]["cpu"].update(flags=["avx2"], cores=2)
    view = _view([this, other])
    fig = figures._devices_fig(view, figures._all_lines(view))
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    named = [records.machine_class(r, "cpu") for r in (this, other)]
    assert named[0] != named[1] and all(any(n in t.replace("\n", " ") for t in legend) for n in named), legend
    import matplotlib.pyplot as plt

    plt.close("all")


def test_text_from_a_result_set_is_drawn_literally():
    """Issue 32: a CPU named ``$\\foo{$`` stopped every build (matplotlib read the legend as
    mathematics: ParseFatalException). Every text of a chart is drawn as written."""
    hostile = "$\\foo{$ 16-Core $x^2$"
    this = _two_sweeps("cpu", [4, 32, 256, 2048], [1, 64, 4096, 65536], figures_drawn=True)
    other = _two_sweeps("cpu", [4, 32, 256, 2048], [1, 64, 4096, 65536], figures_drawn=True)
    other["hosts"]["cpu"].update(name=hostile, flags=["avx2"], cores=16)
    for c in other["verdicts"]["cpu"]["comparisons"]:
        c["name"] = c["name"].replace("MLP", "$\\frac{$MLP")
    view = _view([this, other])
    fig = figures._devices_fig(view, figures._all_lines(view))
    assert figures.png_bytes(fig).startswith(b"\x89PNG")
    legend = " ".join(t.get_text() for t in fig.legends[0].get_texts())
    assert "$\\foo{$" in legend.replace("\n", " "), legend
    facts = figures.thumbnail_facts_figure(_view([other]))
    assert figures.png_bytes(facts).startswith(b"\x89PNG")


def test_plot_ratios_and_plot_series_read_on_a_phone():
    from tipsite import tipkit

    comps = [_comparison(f"at {n}", n, 1.1 + n / 1e5) for n in (8, 64, 512, 4096, 32768, 262144)]
    fig = tipkit.plot_ratios({"slow vs fast": comps, "other": comps[:3]}, xlabel="size (elements)",
                             title="A sweep")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8", "64", "512", "4,096", "32.8k", "262k"]
    assert ax.get_title().endswith("CPU, 1 thread, torch " + __import__("torch").__version__)
    assert _phone_px(fig) >= figures.MIN_PHONE_TEXT_PX and not figures.texts_outside(fig)
    fig = tipkit.plot_series({"a": ([1, 2, 4, 8], [1, 2, 3, 4]), "b": ([1, 2, 4, 8], [2, 3, 4, 5])},
                             xlabel="steps", ylabel="memory (MiB)", title="Memory", device="cpu", logx=True)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1", "2", "4", "8"]
    assert _phone_px(fig) >= figures.MIN_PHONE_TEXT_PX and not figures.texts_outside(fig)
    import matplotlib.pyplot as plt

    plt.close("all")


def _card_px(fig) -> float:
    return min(px for _, px in figures.text_sizes_px(fig)) * figures.CARD_PX / figures.THUMB_SIZE[0]


def test_thumbnails_are_legible_at_card_size_and_cut_no_line():
    """Card thumbnails cut text mid-line and had axis labels about 6 px tall."""
    from tipsite.sphinxext.view import DeviceView

    record = _two_sweeps("cpu", [4, 32, 256, 2048], [1, 64, 4096, 65536], figures_drawn=True)
    chart = figures.thumbnail_chart_figure(record["figures"][0])
    assert _card_px(chart) >= figures.MIN_CARD_TEXT_PX and not figures.texts_outside(chart)
    assert chart.axes[0].get_xlabel() == "elements per row"
    long = "a fact whose name is far longer than one line of a card can hold, " * 3
    facts = {f"{long}{i}": i % 2 == 0 for i in range(9)}
    view = _view([record])
    view.devices = {
        "cpu": DeviceView("cpu", "measured", decision={"verdict": "holds", "facts": facts, "comparisons": []},
                          record=record),
        "cuda": DeviceView("cuda", "stale", decision={"verdict": "depends", "facts": facts, "comparisons": []},
                           record=record)}
    fig = figures.thumbnail_facts_figure(view)
    texts = [t for t, _ in figures.text_sizes_px(fig)]
    assert _card_px(fig) >= figures.MIN_CARD_TEXT_PX
    assert not figures.texts_outside(fig), "a line runs past the thumbnail's edge"
    # each device in its one word (view.DeviceView.label), and a count of what did not fit
    assert " holds " in texts and any(t.startswith(" depends, older tip version") for t in texts), texts
    assert sum(t.startswith("and ") and t.endswith("more on the page") for t in texts) == 2, texts
    bottoms = [fig.transFigure.inverted().transform(t.get_window_extent().p0)[1]
               for t in fig.texts if t.get_text().strip()]
    assert min(bottoms) >= 0, "a line falls off the thumbnail's bottom"
    import matplotlib.pyplot as plt

    plt.close("all")
