"""The built site: every tip has its executed page, verdict, provenance and downloads."""

from __future__ import annotations

import json
import re

import pytest

from conf import settings
from tipsite import gallery, tipmeta


def page(site, tip) -> str:
    path = site / f"{tip.docname}.html"
    assert path.exists(), f"no page for {tip.path.name}"
    return path.read_text(encoding="utf-8")


def test_every_tip_page_shows_output_verdict_and_provenance(site, tips):
    verdicts = tipmeta.vocab()["verdicts"]
    for tip in tips:
        html = page(site, tip)
        assert "sphx-glr-script-out" in html, f"{tip.name}: no executed output on the page"
        # sphinx-gallery renders a failing block's traceback as a pytb code block
        assert "highlight-pytb" not in html, f"{tip.name}: a failure traceback is on the page"
        found = re.findall(r'class="tip-verdict tip-verdict-(\w+)"', html)
        assert found and found[0] in verdicts, f"{tip.name}: no verdict badge"
        record = gallery.load_result(settings.TIPS_OUT_DIR / tip.topic / tip.path.name)
        assert record["verdict"] == found[0], f"{tip.name}: badge differs from the recorded verdict"
        assert f"Verdict: {found[0]}" in html, f"{tip.name}: the tip's own output does not state the verdict"
        assert re.search(r"Provenance: torch \d+\.\d+\.\d+.*threads.*built \d{4}-\d\d-\d\d", html), (
            f"{tip.name}: no provenance line")
        # the provenance sits after the executed output, before the downloads
        assert html.rindex("sphx-glr-script-out") < html.index("Provenance: torch") < html.index(
            "sphx-glr-download-python"), f"{tip.name}: provenance is not at the end of the tip"


def test_results_record_this_build(tips):
    import torch

    for tip in tips:
        record = gallery.load_result(settings.TIPS_OUT_DIR / tip.topic / tip.path.name)
        assert record is not None, tip.name
        assert not tipmeta.validate_result({k: record[k] for k in tipmeta.RESULT_KEYS})
        assert record["torch"] == torch.__version__
        if tip.kind in ("speed", "memory") and "cpu" in tip.devices and record["device"] == "cpu":
            assert record["key"] is not None, f"{tip.name}: a {tip.kind} tip must report its key figure"
            assert record["measurements"], f"{tip.name}: a {tip.kind} tip must report measurements"


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


def test_claims_page_links_every_covered_claim(site, tips):
    html = (site / "generated" / "claims.html").read_text(encoding="utf-8")
    for tip in tips:
        for cid in tip.claims:
            assert f'id="claim-{cid.lower()}"' in html
            assert tip.name in html


def test_tip_quotes_its_claims_verbatim(tips):
    """A tip names a claim only if its docstring quotes the article's words for it exactly."""

    def norm(text: str) -> str:
        return re.sub(r"\s+", " ", text.replace("`", "").replace("\u2019", "'")).strip()

    claims = tipmeta.claims()
    for tip in tips:
        import ast

        doc = norm(ast.get_docstring(ast.parse(tip.path.read_text(encoding="utf-8"))))
        for cid in tip.claims:
            assert norm(claims[cid]["quote"]) in doc, f"{tip.name}: does not quote {cid} verbatim"


def test_record_json_is_plain_data(tips):
    for tip in tips:
        path = gallery.result_path(settings.TIPS_OUT_DIR / tip.topic / tip.path.name)
        json.loads(path.read_text(encoding="utf-8"))
