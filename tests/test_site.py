"""The built site: every tip has its executed page, a verdict per device that matches its
record, provenance, downloads, and the claims it examines."""

from __future__ import annotations

import ast
import json
import re

import pytest
from conftest import page_text

from conf import settings
from tipsite import devices, records, tipmeta

VERDICTS = tipmeta.vocab()["verdicts"]


def page(site, tip) -> str:
    path = site / f"{tip.docname}.html"
    assert path.exists(), f"no page for {tip.path.name}"
    return path.read_text(encoding="utf-8")


def header(html: str) -> str:
    start = html.index('class="tip-header')
    return page_text(html[start:html.index("</div>", html.index('class="tip-verdicts', start)) + 200])


def record_of(tip) -> dict:
    return records.read_record(settings.TIPS_OUT_DIR / tip.topic / tip.path.name)


def test_every_tip_page_shows_output_verdicts_and_provenance(site, tips):
    for tip in tips:
        html = page(site, tip)
        assert "sphx-glr-script-out" in html, f"{tip.name}: no executed output on the page"
        # sphinx-gallery renders a failing block's traceback as a pytb code block
        assert "highlight-pytb" not in html, f"{tip.name}: a failure traceback is on the page"
        record = record_of(tip)
        top = header(html)
        for device, decision in record["verdicts"].items():
            word = records.device_word(device)
            shown = "not measured: machine busy" if decision["verdict"] == "busy" else decision["verdict"]
            assert f"{word}: {shown}" in top, f"{tip.name}: header misses {word}'s verdict"
            assert f"Verdict on {device.upper()}: {decision['verdict']}" in html, (
                f"{tip.name}: the tip's own output does not state the verdict it recorded")
        assert "Figures and provenance" in html and "build threads" in html, f"{tip.name}: no provenance"
        # the provenance sits after the executed output, before the downloads
        assert html.rindex("sphx-glr-script-out") < html.index("build threads") < html.index(
            "sphx-glr-download-python"), f"{tip.name}: provenance is not at the end of the tip"


def test_no_page_shows_a_cpu_verdict_for_a_claim_about_cuda(site, tips):
    """A claim about CUDA gets no CPU verdict; on a CPU build its CUDA verdict is not measured
    (or comes from a recorded CUDA run, named as such)."""
    for tip in tips:
        top = header(page(site, tip))
        if "cpu" not in tip.devices:
            assert "CPU:" not in top, f"{tip.name}: a CPU verdict on a claim about CUDA"
            assert "cpu" not in record_of(tip)["verdicts"]
        if "cuda" in tip.devices:
            assert re.search(r"CUDA: (not measured|holds|depends|outdated|wrong)", top), tip.name


def test_records_record_this_build(site, tips):
    import torch

    for tip in tips:
        record = record_of(tip)
        assert record is not None, tip.name
        assert record["torch"] == torch.__version__
        assert records.is_current(record, records.tip_version(tip.path)), f"{tip.name}: record of another version"
        assert set(record["verdicts"]) == records.required_devices(tip.devices, devices.available())


def test_the_recorded_cuda_runs_are_shown_current_or_as_an_older_version(site, tips):
    """Each committed CUDA run (docs/_data/results: the H100's, the H200's) appears on the page
    of every tip it measured, with its machine. The header's CUDA verdict is the newest run of
    the tip's current source, with that run's machine and date; a run of an older version of
    the tip is never the header's verdict, and the figures table marks it as older.

    While no committed CUDA run is of a tip's current version, the current case is not reached
    here: tests/test_results.py's test_the_header_shows_every_device_s_verdict checks it on the
    fixture gallery, whose CUDA result set is current by construction."""
    sets = records.load_sets(records.committed_paths())
    current_seen = 0
    for tip in tips:
        if "cuda" not in tip.devices:
            continue
        runs = [r for s in sets for r in s["records"] if r["tip"] == tip.name and "cuda" in r["verdicts"]]
        if not runs:
            continue
        html = page(site, tip)
        start = html.index('class="tip-header')
        head, body = page_text(html[start:html.index("Figures and provenance", start)]), page_text(html)
        version = records.tip_version(tip.path)
        for r in runs:
            assert r["hosts"]["cuda"]["name"] in body, tip.name
            if not records.is_current(r, version):
                # its provenance line (under the figures table, or alone where it times nothing)
                assert f"{r['date']}; an older version of the tip" in body, tip.name
        current = [r for r in runs if records.is_current(r, version)]
        current_seen += 1
        if not current:
            stale = max(runs, key=lambda r: r["date"])
            assert f"CUDA: {stale['verdicts']['cuda']['verdict']}, older tip version (" in head, tip.name
            assert "The current version of the tip has not run on CUDA" in head, tip.name
            continue
        newest = max(current, key=lambda r: r["date"])
        assert f"CUDA: {newest['verdicts']['cuda']['verdict']} " in head, tip.name
        # the header names the machine by its class ('NVIDIA H200, compute capability 9.0, CUDA
        # 13.0, ...'; 'machine class unknown, CUDA 13.0, ...' for a host that recorded no capability)
        machine = records.machine_class(newest, "cuda")
        assert f"{machine}, CUDA" in head and f"recorded {newest['date']}" in head, tip.name
    # every timing tip's CUDA records are an older version's until the next GPU build (the helpers
    # that measure changed): the header must say so for each of them, which the loop checked
    assert current_seen, "no committed CUDA run of any tip: the check above checked nothing"


def test_execution_times_page_lists_every_tip(site, tips):
    html = (site / "sg_execution_times.html").read_text(encoding="utf-8")
    for tip in tips:
        assert f"{tip.name}.py" in html, f"{tip.name} missing from the execution-times page"


@pytest.mark.parametrize("suffix", [".py", ".ipynb"])
def test_every_tip_can_be_downloaded(site, tips, suffix):
    downloads = {p.name for p in (site / "_downloads").rglob(f"*{suffix}")}
    for tip in tips:
        assert f"{tip.name}{suffix}" in downloads, f"{tip.name}{suffix} is not downloadable"
        assert f"{tip.name}{suffix}" in page(site, tip)


def test_zip_of_all_tips_is_offered(site):
    zips = list((site / "_downloads").rglob("*.zip"))
    assert any("tips_python" in z.name for z in zips) and any("tips_jupyter" in z.name for z in zips), zips


def test_claims_page_links_every_claim_with_its_verdicts(site, tips):
    html = (site / "generated" / "claims.html").read_text(encoding="utf-8")
    for tip in tips:
        for cid in tip.claims:
            assert f'id="claim-{cid.lower()}"' in html
            assert f"{tip.name}.html" in html
    assert "no tip yet" not in page_text(html)


def test_every_claim_is_examined_by_some_tip(tips):
    examined = {c for t in tips for c in t.claims}
    missing = [c for c in tipmeta.claims() if c not in examined]
    assert not missing, f"claims no tip examines: {missing}"


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s.replace("`", "").replace("\u2019", "'")).strip()


def test_a_tip_names_exactly_the_claims_it_quotes(tips):
    """Both ways: a tip naming a claim quotes the article's words verbatim, and a tip quoting a
    claim's words names its id (so removing an id from the metadata fails here)."""
    claims = tipmeta.claims()
    for tip in tips:
        doc = _norm(ast.get_docstring(ast.parse(tip.path.read_text(encoding="utf-8"))))
        quoted = {cid for cid, c in claims.items() if _norm(c["quote"]) in doc}
        for cid in tip.claims:
            assert cid in quoted, f"{tip.name}: names {cid} but does not quote it verbatim"
        assert quoted <= set(tip.claims), f"{tip.name}: quotes {sorted(quoted - set(tip.claims))} without naming it"


def test_every_tip_without_a_seed_claim_states_the_claim_it_judges(tips):
    for tip in tips:
        if not tip.claims:
            assert tip.statement, f"{tip.name}: sphinx_gallery_tips_statement is missing"


def test_record_json_is_plain_data(site, tips):
    for tip in tips:
        path = records.record_path(settings.TIPS_OUT_DIR / tip.topic / tip.path.name)
        json.loads(path.read_text(encoding="utf-8"))


# --- results from many machines: never two figures of one tip from two classes without both named --

def _between(html: str, start: str, end: str) -> str:
    i = html.index(start)
    return html[i:html.index(end, i)]


def test_no_page_shows_a_tip_s_figures_from_two_machine_classes_without_naming_both(site, tips):
    """Reads the built pages: each tip page names the machine class of every run whose figures it
    shows (this build, the result sets, the matrix); the compatibility page shows a tip's runs
    only under the heading of their own class; the benchmark page names its class."""
    from tipsite import compat
    from tipsite.sphinxext import benchpage

    sets = records.load_sets(records.committed_paths())
    runs = compat.load_all()
    compat_html = page_text((site / "reference" / "compat.html").read_text(encoding="utf-8"))
    classes_seen = set()
    for tip in tips:
        html = page_text(page(site, tip))
        measured = _between(html, "Measured on Every run", "Figures and provenance")
        shown = [r for r in [record_of(tip)] + [r for s in sets for r in s["records"] if r["tip"] == tip.name]
                 if r is not None]
        for record in shown:
            for device in record["verdicts"]:
                cls = records.machine_class(record, device)
                classes_seen.add(cls)
                assert cls in measured, f"{tip.name}: a {device} run's figures without its class ({cls})"
        for release, run in runs.items():
            entry = (run or {}).get("tips", {}).get(tip.name)
            if entry and entry.get("status") == compat.PASSED and entry.get("verdicts"):
                cls = compat.machine_class(run)
                assert cls in measured, f"{tip.name}: torch {release}'s matrix run without its class"
                # on the compatibility page, under its own class's heading
                heading = ("Measured on " + cls) if cls != devices.UNKNOWN_CLASS else "Machine class unknown"
                assert heading in compat_html, f"compatibility page: no table headed {heading!r}"
    assert len(classes_seen) >= 2, "the site holds results of one machine class only: nothing to tell apart"
    bench_html = page_text((site / "how_built.html").read_text(encoding="utf-8"))
    data = json.loads((settings.DOCS_DIR / "_data" / "bench.json").read_text(encoding="utf-8"))
    assert f"Machine class: {benchpage.machine_class(data)}" in bench_html

