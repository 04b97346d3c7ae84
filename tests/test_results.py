"""Result sets on the pages: every build's figures side by side, one verdict per device at the
top of each page and on each card, and nothing from another machine reaching the page as markup.

The result sets are real: the fixture gallery of tests/test_shards.py built at 1 thread
(unsharded) and at the default thread count (sharded, then merged), and its CUDA tips run on the
fake CUDA device (whose figures mean nothing; the pages only show what a CUDA set looks like).
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import page_text
from test_shards import build_fixture

from tipsite import records, tipmeta
from tipsite.sphinxext.render import quantity


@pytest.fixture(scope="session")
def fixture_builds(tmp_path_factory):
    """The fixture gallery's builds, shared with tests/test_shards.py (built once per session)."""
    return build_fixture(tmp_path_factory)


def _page(html_dir, tip) -> str:
    return (html_dir / "tips" / tip.parent.name / f"{tip.stem}.html").read_text(encoding="utf-8")


def _header(page: str) -> str:
    return page_text(page[page.index('class="tip-header'):page.index("How this tip measures")
                      if "How this tip measures" in page else page.index("Figures and provenance")])


def test_export_writes_one_result_set_per_build(fixture_builds):
    import torch

    fb = fixture_builds
    (ref,) = fb.ref_sets
    (merged,) = fb.merged_sets
    assert ref.name.endswith(f"-torch{torch.__version__}-1threads.json")
    assert merged.name.endswith(f"-torch{torch.__version__}.json") and merged.name.startswith("cpu-")
    names = {p.stem for p in fb.tips}
    for path, threads in ((ref, 1), (merged, 2)):
        data = records.load_set(path)
        assert data["schema"] == records.SET_SCHEMA and data["build_threads"] == threads
        assert {r["tip"] for r in data["records"]} == names


def test_rows_are_flat_data(fixture_builds, capsys):
    (path,) = fixture_builds.merged_sets
    assert records.main(["rows", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ",".join(records.ROW_KEYS) and len(out) > 1


def test_each_build_has_its_column_with_its_figures(fixture_builds):
    fb = fixture_builds
    ref = {r["tip"]: r for r in records.load_set(fb.ref_sets[0])["records"]}
    for tip in fb.tips:
        this = records.read_record(fb.sharded.tips_out / tip.parent.name / tip.name)
        text = page_text(_page(fb.merged_with_sets, tip))
        assert "Figures and provenance" in text
        for record in (this, ref[tip.stem]):
            assert record["date"] in text
            for decision in record["verdicts"].values():
                for c in decision.get("comparisons") or []:
                    unit = "x" if c["measure"] == "ratio" else c["unit"]
                    assert quantity(c["median"], unit) in text, (tip.stem, c["name"])
        assert "build threads 1" in text and "build threads 2" in text


def test_a_page_shows_each_gpu_point_s_busy_time_and_share_of_the_limit(fixture_builds):
    """The CUDA set (the fixture's timing tip on the fake device): each point's GPU busy time
    beside its wall time, the rate its stated work reached as a share of the GPU's calibrated
    limit, and the calibration in the provenance."""
    fb = fixture_builds
    cuda = {r["tip"]: r for r in records.load_set(fb.cuda_set)["records"]}
    timed = [tip for tip in fb.tips if tip.stem in cuda
             and any("device_time" in c for c in cuda[tip.stem]["verdicts"]["cuda"]["comparisons"])]
    assert timed, "the fixture has no GPU timing"
    for tip in timed:
        decision = cuda[tip.stem]["verdicts"]["cuda"]
        text = page_text(_page(fb.merged_with_sets, tip))
        points = decision["comparisons"]
        assert text.count("the GPU was busy") >= 2 * len(points), tip.stem
        assert text.count("of this GPU's measured device copy") >= 2 * len(points), tip.stem
        assert "calibration: float32 matmul" in text and "device copy" in text
        for c in points:
            for side in ("base", "cand"):
                assert c["device_time"][side] <= c["window"][side]


def _shown(verdict: str) -> str:
    """What a header shows for a recorded verdict: a run that found the machine busy decided
    nothing (tipkit's "busy"), and reads "not measured: machine busy"."""
    return "not measured: machine busy" if verdict == "busy" else verdict


def test_the_header_shows_every_device_s_verdict(fixture_builds):
    """Given a CUDA result set of the current tips, the header shows the CUDA verdict too, with
    the run's machine and date. (The case of a current committed CUDA run, which
    tests/test_site.py checks on the full site only while one is current.)"""
    fb = fixture_builds
    cuda = {r["tip"]: r for r in records.load_set(fb.cuda_set)["records"]}
    for tip in fb.tips:
        meta = tipmeta.read_tip(tip)
        header = _header(_page(fb.merged_with_sets, tip))
        this = records.read_record(fb.sharded.tips_out / tip.parent.name / tip.name)
        for device in meta.devices:
            word = records.device_word(device)
            assert f"{word}:" in header, (tip.stem, device)
            if device == "cuda":
                run = cuda[tip.stem]
                assert records.is_current(run, records.tip_version(tip)), f"{tip.stem}: the CUDA set is not current"
                assert f"CUDA: {_shown(run['verdicts']['cuda']['verdict'])}" in header
                if run["verdicts"]["cuda"]["verdict"] == "busy":
                    continue  # decided nothing: no machine line or date for a verdict
                # '<machine>, compute capability <c>, CUDA <v>, ...; recorded <date>.' (the
                # machine's name as text, its whitespace collapsed as the page's text has it)
                host = run["hosts"]["cuda"]
                machine = re.sub(r"\s+", " ", host["name"])
                assert f"{machine}, compute capability {host['capability']}, CUDA {host['cuda']}" in header, tip.stem
                assert f"; recorded {run['date']}." in header, tip.stem
            elif device in this["verdicts"]:
                assert f"{word}: {_shown(this['verdicts'][device]['verdict'])}" in header
        if "cpu" not in meta.devices:
            assert "CPU:" not in header, f"{tip.stem}: a CPU verdict for a claim about CUDA"
        plain = _header(_page(fb.merged_plain, tip))
        if "cuda" in meta.devices:
            assert "CUDA: not measured" in plain


def test_cards_show_every_device_s_verdict(fixture_builds):
    fb = fixture_builds
    cuda = {r["tip"]: r for r in records.load_set(fb.cuda_set)["records"]}
    index = (fb.merged_with_sets / "index.html").read_text(encoding="utf-8")
    for tip in fb.tips:
        card = re.search(rf'<div class="[^"]*tip-card [^"]*">(?:(?!tip-card ).)*?{tip.stem}\.html.*?</div>\s*</div>',
                         index, re.S)
        assert card, f"no card for {tip.stem}"
        if tip.stem in cuda:
            verdict = cuda[tip.stem]["verdicts"]["cuda"]["verdict"]
            shown = "tc-d-cuda-not-measured-none" if verdict == "busy" else f"tc-v-cuda-{verdict}"
            assert shown in card.group(0), (tip.stem, verdict)


def test_hostile_text_from_a_result_set_stays_text(fixture_builds):
    """A machine name carrying a newline and a raw-html directive is shown as text, escaped."""
    fb = fixture_builds
    for tip in fb.tips:
        page = _page(fb.merged_with_sets, tip)
        assert "<script>alert" not in page
        if "cuda" in tipmeta.read_tip(tip).devices:
            assert "&lt;script&gt;alert" in page or "script&gt;" in page
    assert "<script>alert" not in (fb.merged_with_sets / "index.html").read_text()


@pytest.mark.parametrize("field,value", [
    ("torch", "2.13.0\n.. raw:: html\n\n   <script>alert(1)</script>"),
    ("date", "`click <javascript:alert(1)>`__"),
])
def test_result_sets_with_markup_in_checked_fields_are_refused(fixture_builds, tmp_path, field, value):
    data = json.loads(fixture_builds.cuda_set.read_text())
    data["records"][0][field] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(records.RecordError, match=f"bad.json: record 0 \\(.*\\): .*{field}"):
        records.load_set(path)


def test_a_given_set_from_this_build_adds_no_column(fixture_builds):
    fb = fixture_builds
    own = records.load_sets(fb.merged_sets)
    for tip in fb.tips:
        this = records.read_record(fb.sharded.tips_out / tip.parent.name / tip.name)
        assert records.columns(tip.stem, this, own) == [this]
        both = records.columns(tip.stem, this, own + records.load_sets(fb.ref_sets))
        assert len(both) == 2 and both[1]["build_threads"] == 1


def test_bad_result_sets_are_refused(tmp_path):
    with pytest.raises(records.RecordError, match="neither a result-set file nor a folder"):
        records.paths_from_env(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": records.SET_SCHEMA, "records": [{"schema": records.RECORD_SCHEMA,
                                                                          "tip": "tip_x"}]}))
    with pytest.raises(records.RecordError, match="bad.json: record 0 \\(.*\\): record misses"):
        records.load_sets(records.paths_from_env(str(tmp_path)))
    bad.write_text("[]")
    with pytest.raises(records.RecordError, match="not a result set"):
        records.load_set(bad)


def test_one_sentence_says_when_the_measured_devices_disagree():
    """The header's sentence: only measured devices count; a stale or unmeasured one never does."""
    from tipsite.sphinxext.view import DeviceView, TipView

    tip = tipmeta.read_all()[0]

    def view(**states):
        devices = {d: DeviceView(d, state, {"verdict": v} if v else None)
                   for d, (state, v) in states.items()}
        return TipView(tip, None, devices, [])

    differ = view(cpu=("measured", "wrong"), cuda=("measured", "holds")).disagreement
    assert differ.startswith("The devices disagree: wrong on CPU; holds on CUDA.")
    assert view(cpu=("measured", "holds"), cuda=("measured", "holds")).disagreement == ""
    assert view(cpu=("measured", "wrong"), cuda=("stale", "holds")).disagreement == ""
    assert view(cpu=("measured", "wrong"), cuda=("not measured", None)).disagreement == ""
    assert view(cpu=("measured", "wrong"), cuda=("measured", "busy")).disagreement == ""


def test_a_busy_machine_s_decision_reads_not_measured_machine_busy():
    """31.1: "busy" is no verdict: every place that shows a device's state says so."""
    from tipsite.sphinxext.view import DeviceView, headline

    busy = DeviceView("cpu", "measured", {"verdict": "busy", "why": "other processes took the cores"})
    # a device whose run found the machine busy is not measured (its own state, token and filter)
    assert busy.label == "not measured: machine busy" and busy.busy
    assert busy.state == "not measured" and busy.token == "not-measured" and busy.verdict is None
    assert "busy" in records.verdicts()
    assert DeviceView("cpu", "stale", {"verdict": "busy"}).label == "not measured: machine busy"
    assert headline(busy.decision) == "other processes took the cores"


def test_each_device_shows_the_rule_its_own_run_applied():
    """A tip may word its rule for the device it ran on (tip_mixed_precision names the autocast
    dtype: bfloat16 on a CPU, float16 on CUDA). A recorded CUDA verdict is shown with the CUDA
    run's rule, not this build's; one rule line when every device's rule is the same."""
    from tipsite.sphinxext.pages import header
    from tipsite.sphinxext.view import DeviceView, TipView

    tip = tipmeta.read_all()[0]

    def view(cpu_rule, cuda_rule):
        cpu = {"rule": cpu_rule, "hosts": {"cpu": {"name": "CPU X"}}, "torch": "2.13.0", "date": "d"}
        cuda = {"rule": cuda_rule, "hosts": {"cuda": {"name": "GPU Y"}}, "torch": "2.11.0", "date": "d"}
        devices = {"cpu": DeviceView("cpu", "measured", {"verdict": "depends"}, cpu, "this build"),
                   "cuda": DeviceView("cuda", "measured", {"verdict": "outdated"}, cuda, "set.json")}
        return TipView(tip, cpu, devices, [cpu, cuda])

    differ = header(view("gains in bfloat16", "gains in float16"), compat_page=False)
    assert "*Rule on CPU:* gains in bfloat16" in differ
    assert "*Rule on CUDA:* gains in float16" in differ
    assert "*Rule:*" not in differ
    same = header(view("gains", "gains"), compat_page=False)
    assert "*Rule:* gains" in same and "Rule on" not in same


def test_the_page_says_so_when_the_devices_disagree(fixture_builds):
    """On the built pages: the sentence is in a tip's header exactly when this build's CPU
    verdict and the given CUDA set's verdict differ."""
    fb = fixture_builds
    cuda = {r["tip"]: r for r in records.load_set(fb.cuda_set)["records"]}
    both = 0
    for tip in fb.tips:
        this = records.read_record(fb.sharded.tips_out / tip.parent.name / tip.name)
        verdicts = {"CPU": this["verdicts"].get("cpu", {}).get("verdict"),
                    "CUDA": cuda.get(tip.stem, {}).get("verdicts", {}).get("cuda", {}).get("verdict")}
        if None in verdicts.values():
            continue
        both += 1
        header = _header(_page(fb.merged_with_sets, tip))
        differ = verdicts["CPU"] != verdicts["CUDA"]
        assert ("The devices disagree" in header) == differ, (tip.stem, verdicts)
        if differ:
            assert f"{verdicts['CPU']} on CPU; {verdicts['CUDA']} on CUDA" in header
    assert both, "no fixture tip has a verdict on both devices: the check above checked nothing"
