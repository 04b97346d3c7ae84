"""Readers contribute results (issue "Results from many machines"): one command runs tips on their
machine and writes a result set; CI vets it; the next build shows it as one more row naming its
machine class. A forged or hostile set is refused with the reason, and nothing else changes.

The tips here are tiny ones of the tests' own (the site's tips run once per suite, in its build)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
from conftest import GOOD_BODY, ROOT, make_tip

from tipsite import contribute, records, tipmeta

SWEEP = '''\
import torch

RULE = "holds if summing 64 times more elements takes >5% longer at every size"
ratios = []
for n in [256, 1024, 4096, 16384]:
    small, large = torch.ones(n), torch.ones(64 * n)
    variants = {"64x more": lambda: large.sum(), "fewer": lambda: small.sum()}
    ratios.append(compare_times(f"sum of {n} elements", variants, threshold=1.05,
                                device="cpu", x=n, round_s=0.002, budget_s=0.2))
fig = plot_ratios({"64x more elements": ratios}, xlabel="elements summed (count)",
                  title="A tiny timing sweep")
decision = decide("cpu", [("holds", {"sizes": "all above"}), ("depends", {})],
                  groups={"sizes": ratios}, key=ratios[-1])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {"cpu": decision}, "measurements": [],
          "skipped": []}
'''
# Another machine class than any runner here: a server CPU with AMX.
XEON = {"cpu": {"name": "Intel(R) Xeon(R) Platinum 8480+", "cores": 16, "capability": "AVX512",
                "flags": ["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]}}


@pytest.fixture(scope="module")
def contribution(tmp_path_factory):
    """A reader's set: two tiny tips run by the contribute command's machinery, on 'their' Xeon."""
    root = tmp_path_factory.mktemp("contrib")
    paths = []
    for rel, text in {"speed/tip_sweep.py": make_tip(SWEEP, kind="speed", title="A tiny sweep",
                                                     helpers=("compare_times", "decide", "plot_ratios", "report")),
                      "correctness/tip_facts.py": make_tip(GOOD_BODY, title="Tiny facts")}.items():
        path = root / "gallery" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    result_set, failed = contribute.contribute(paths, hosts=XEON)
    assert not failed, failed
    out = root / "contrib-xeon.json"
    records.write_record(out, result_set)
    tips = {p.stem: tipmeta.read_tip(p) for p in paths}
    return out, tips, paths


def _vet(path, tips):
    data = json.loads(path.read_text())
    return [p for r in data["records"] for p in records.vet_record(r, tips, {})]


def test_a_reader_s_set_from_another_machine_class_is_accepted_and_shown_as_one_more_row(contribution, tiny_site):
    path, tips, paths = contribution
    assert records.load_set(path)["contributed"] is True
    assert _vet(path, tips) == []
    tiny_site.write({f"{p.parent.name}/{p.name}": p.read_text() for p in paths})
    built = tiny_site.build(TIPS_RESULT_SETS=str(path))
    assert built.returncode == 0, built.output[-3000:]
    page = built.page("speed", "tip_sweep")
    start = page.index('id="tip-measured-')
    measured = page[start:page.index("tip-figures-", start)]
    assert "Intel(R) Xeon(R) Platinum 8480+, AMX, 16 cores" in measured  # the reader's row
    this = records.read_record(tiny_site.src / "tips" / "speed" / "tip_sweep.py")
    assert records.machine_class(this, "cpu") in measured  # and this build's, each named
    assert "this build" in measured


@pytest.mark.parametrize("forge,reason", [
    (lambda r: r["hosts"]["cpu"].update(name="Xeon\n.. raw:: html\n\n   <script>alert(1)</script>"),
     "holds markup or a link"),
    (lambda r: r["hosts"]["cpu"].update(name="Xeon `click <https://evil.example>`__"), "holds markup or a link"),
    (lambda r: r["verdicts"]["cpu"].update(verdict="wrong" if r["verdicts"]["cpu"]["verdict"] != "wrong" else "holds"),
     "but the recorded evidence gives"),
    (lambda r: r.update(code_sha256="0" * 64), "matches no version of the tip"),
    (lambda r: r.update(date="2099-01-01 00:00 UTC"), "is not between"),
    (lambda r: r["hosts"]["cpu"].pop("flags"), "needs the CPU's flags and cores"),
    (lambda r: r.update(tip="tip_not_in_this_repository"), "no tip named"),
])
def test_a_forged_or_hostile_set_is_refused_with_the_reason(contribution, tmp_path, forge, reason):
    path, tips, _ = contribution
    data = json.loads(path.read_text())
    forge(data["records"][0])
    bad = tmp_path / "contrib-bad.json"
    bad.write_text(json.dumps(data))
    before = sorted(p.name for p in records.DATA_DIR.glob("*.json"))
    problems = _vet(bad, tips)
    assert any(reason in p for p in problems), problems
    assert sorted(p.name for p in records.DATA_DIR.glob("*.json")) == before  # vetting writes nothing


def test_the_vet_command_refuses_with_the_reason_and_its_exit_status(contribution, tmp_path):
    path, _, _ = contribution
    data = json.loads(path.read_text())
    for record in data["records"]:
        record["hosts"]["cpu"]["name"] = "<img src=x onerror=alert(1)>"
    bad = tmp_path / "contrib-bad.json"
    bad.write_text(json.dumps(data))
    proc = subprocess.run([sys.executable, "-m", "tipsite.records", "vet", str(bad)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "refused:" in proc.stderr and "markup" in proc.stderr


def test_a_set_of_two_machines_is_refused(contribution, tmp_path):
    path, tips, _ = contribution
    data = json.loads(path.read_text())
    other = copy.deepcopy(data["records"][1])
    other["hosts"] = {"cpu": {**XEON["cpu"], "cores": 32}}
    data["records"][1] = other
    bad = tmp_path / "contrib-two.json"
    bad.write_text(json.dumps(data))
    assert any("one machine and run" in p for p in records.vet_set(bad, versions={}))
