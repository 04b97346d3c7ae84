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

SWEEP_HELPERS = ("median_interval", "outcome", "compare_values", "decide", "report", "plot_ratios")

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
    assert "CUDA: NVIDIA Test GPU, 2026-11-20 (result set)" in devices["alt"]
    assert "CPU: " in devices["alt"] and "(this build)" in devices["alt"]
    assert "labelled with its machine and date" in page
