"""The code checker (tipsite/checker/): rules on snippets and on the tips, verdicts, CLI, speed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("libcst", reason="the checker's requirements (conf/requirements/check.txt) are missing")

from conftest import ROOT, build_env  # noqa: E402

from tipsite import records, tipmeta  # noqa: E402
from tipsite.checker import bench, cli, engine, evidence, tipcells  # noqa: E402
from tipsite.checker.registry import RULES  # noqa: E402


@pytest.fixture(scope="module")
def checker() -> engine.Checker:
    return engine.Checker()


def codes_at(checker, source: str) -> list[tuple[int, int, str]]:
    return [(f.line, f.col, f.code) for f in checker.check_source(textwrap.dedent(source))]


# --- each rule on its own examples -------------------------------------------------------------

@pytest.mark.parametrize("code", sorted(RULES))
def test_rule_flags_its_example_and_not_the_clean_form(checker, code):
    rule = RULES[code]
    found = [(line, col) for line, col, c in codes_at(checker, rule.example) if c == code]
    assert found == [rule.example_at], f"{code} on its example:\n{rule.example}"
    assert not [c for *_, c in codes_at(checker, rule.clean) if c == code], f"{code} on its clean form"


POSITIVE = {
    "PTT001": "import torch as t\nx = t.load(p)\n",  # TorchFix's half: no weights_only at all
    "PTT002": "from torch import load\nx = load(p, weights_only=True)\n",
    "PTT003": "import torch\nsd = torch.load(p, weights_only=True)\nmodel.load_state_dict(sd)\n",
    "PTT005": "from torch.cuda.amp import GradScaler\nscaler = GradScaler()\n",
    "PTT011": "import torch\nwhile True:\n    if x.cpu() > 0:\n        break\n",
    "PTT012": "import torch\nfor b in loader:\n    out = criterion(model(b), y)\n    out.backward()\n    total += out\n",
    "PTT013": "import torch\nfor b in loader:\n    loss = f(b)\n    value = loss if c else loss * 2\n    h.append(value)\n",
    "PTT020": "import torch\nloader = torch.utils.data.DataLoader(ds, num_workers=0)\n",
    "PTT022": "import torch\nfor i, (x, y) in enumerate(train_loader):\n    x = x.cuda()\n",
    "PTT026": "import torch\ndef fit():\n    for x in data:\n        loss = f(x)\n        loss.backward()\n    log('done')\n",
    "PTT034": "import torch\nwith torch.autograd.detect_anomaly():\n    loss.backward()\n",
}
NEGATIVE = {
    "PTT001": "import torch\nx = torch.load(p, **options)\n",  # unknown keywords: no claim
    "PTT002": "import torch\nx = torch.load(p, 'cpu', weights_only=True)\n",  # positional map_location
    "PTT003": "import torch\nsd = torch.load(p, weights_only=True, mmap=True)\nmodel.load_state_dict(sd)\n",
    "PTT004": "import torch\ntorch.save({'model': model.state_dict()}, p)\n",
    "PTT011": "import torch\nfor b in loader:\n    total += loss.detach()\nprint(total.item())\n",
    "PTT012": "import torch\nfor b in loader:\n    loss = criterion(model(b), y).item()\n    total += loss\n",
    "PTT013": "import torch\nfor b in loader:\n    loss = f(b)\n    h.append(loss.detach())\n",
    "PTT016": "import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x * torch.ones_like(x)\n",
    "PTT019": "import torch\nwith torch.no_grad():\n    for p in model.parameters():\n        p -= 0.1 * p.grad\n",
    "PTT020": "import torch\nloader = torch.utils.data.DataLoader(ds, **kw)\n",
    "PTT022": "import torch\nfor x in batches:\n    x = x.to(device)\n",  # not a DataLoader loop
    "PTT023": "import torch\n@torch.no_grad()\ndef ev(model, x):\n    model.eval()\n    return model(x)\n",
    "PTT026": "import torch\ndef fit():\n    for x in data:\n        loss = f(x)\n        loss.backward()\n    return model\n",
    "PTT027": "import torch\nif torch.cuda.is_available():\n    used = torch.cuda.memory_allocated()\n",
    "PTT028": "import torch\nwhile n:\n    try:\n        step(n)\n    except RuntimeError as e:\n        if 'out of memory' not in str(e):\n            raise\n        n //= 2\n",
    "PTT032": "from torch import nn\nhead = nn.Linear(768, 1)\n",
    "PTT034": "import torch\ntorch.autograd.set_detect_anomaly(mode=False)\n",
}


@pytest.mark.parametrize("code", sorted(POSITIVE))
def test_more_positive_snippets(checker, code):
    assert code in [c for *_, c in codes_at(checker, POSITIVE[code])], POSITIVE[code]


@pytest.mark.parametrize("code", sorted(NEGATIVE))
def test_more_negative_snippets(checker, code):
    assert code not in [c for *_, c in codes_at(checker, NEGATIVE[code])], NEGATIVE[code]


def test_torchfix_reports_under_our_code(checker):
    found = checker.check_source("import torch\nx = torch.load(p)\n")
    assert [(f.code, f.torchfix) for f in found if f.code == "PTT001"] == [("PTT001", "TOR102")]


def test_noqa_silences_a_line(checker):
    src = "import torch\nx = torch.load(p)  # noqa: PTT001\ny = torch.load(q)  # noqa\n"
    assert [c for *_, c in codes_at(checker, src)] == ["PTT002"]


def test_indented_pieces_keep_their_positions(checker):
    src = "import torch\n\nclass A:\n    def f(self):\n        if x:\n            y = torch.load(p, weights_only=False)\n"
    assert (6, 17, "PTT001") in codes_at(checker, src)


def test_a_file_without_torch_is_skipped_and_bad_syntax_raises(checker):
    assert checker.check_source("x = load(p)\n") == []
    with pytest.raises(SyntaxError):
        checker.check_source("import torch\ndef (:\n")


def test_positions_from_ast_equal_libcst_positions(checker, monkeypatch):
    """The engine reads positions from the ast; libcst's PositionProvider must agree."""
    sources = {p: p.read_text(encoding="utf-8") for p in tipmeta.tip_files()}
    fast = {p: [(f.line, f.col, f.code) for f in checker.check_source(s, str(p))] for p, s in sources.items()}
    monkeypatch.setattr(engine.Checker, "_from_ast", lambda *args: None)
    slow = {p: [(f.line, f.col, f.code) for f in checker.check_source(s, str(p))] for p, s in sources.items()}
    assert sum(map(len, fast.values())) > 20
    assert fast == slow


# --- rules and tips, both ways ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def gallery() -> dict[str, tipmeta.Tip]:
    return {t.name: t for t in tipmeta.read_all()}


@pytest.mark.parametrize("code", sorted(RULES))
def test_every_rule_links_to_a_tip_that_names_it(gallery, code):
    rule = RULES[code]
    assert rule.tip in gallery, f"{code} quotes {rule.tip}, which is not in the gallery"
    assert code in gallery[rule.tip].rules, (
        f"{rule.tip} does not name {code} in sphinx_gallery_tips_rules (see RULES_FOR_TIPS.md)")


def test_every_tip_naming_a_rule_has_it(gallery):
    for tip in gallery.values():
        for code in tip.rules:
            assert code in RULES and RULES[code].tip == tip.name, (tip.name, code)


def tips_with_rules() -> list[str]:
    try:
        return sorted(t.name for t in tipmeta.read_all() if t.rules)
    except ValueError:
        return []


@pytest.mark.parametrize("tip_name", tips_with_rules())
def test_a_tips_rules_flag_its_anti_pattern_not_its_fix(checker, gallery, tip_name):
    tip = gallery[tip_name]
    source = tip.path.read_text(encoding="utf-8")
    spans = tipcells.patterns(source)
    assert spans.anti, (f"{tip_name}: no anti-pattern found (cell headings 'The anti-pattern ...' or "
                        "\"The article's ...\", marker comments: see tipsite/checker/tipcells.py)")
    findings = checker.check_source(source, str(tip.path))
    for code in tip.rules:
        hits = [f.line for f in findings if f.code == code]
        assert any(spans.in_anti(line) for line in hits), (
            f"{tip_name}: {code} does not flag its anti-pattern (lines {spans.anti}); found at {hits}")
        wrong = [line for line in hits if spans.in_fix(line)]
        assert not wrong, f"{tip_name}: {code} flags its recommended pattern at lines {wrong}"


def test_tip_cells_roles():
    src = textwrap.dedent('''\
        """T
        =
        """
        # %%
        # The anti-pattern and the recommended pattern
        # --------------------------------------------
        # Recommended: prose above a statement
        # is not a marker unless it is the line right above it.
        setup = 1


        def slow():
            pass


        def fast():
            pass


        # %%
        # The article's code
        # ------------------
        a = 1
        # Don't
        b = 2
        c = 3
        # Do
        d = 4
        e = 5  # anti-pattern: one line
        ''')
    spans = tipcells.patterns(src)
    assert spans.anti == [(12, 13), (23, 23), (25, 25), (26, 26), (29, 29)]
    assert spans.fix == [(16, 17), (28, 28)]


def test_tipmeta_checks_the_rules_field(tmp_path, good_tip):
    path = tmp_path / "speed" / "tip_tiny.py"
    path.parent.mkdir()
    line = '# sphinx_gallery_tips_kind = "behaviour"\n'
    assert line in good_tip
    path.write_text(good_tip.replace(line, line + '# sphinx_gallery_tips_rules = ["PTT999", "PTT019"]\n'))
    with pytest.raises(tipmeta.TipError) as err:
        tipmeta.read_tip(path)
    assert "unknown rule 'PTT999'" in str(err.value)
    assert "PTT019 quotes tip_inference_mode's verdict" in str(err.value)


# --- verdicts, honestly -----------------------------------------------------------------------------

def fake_record(tip: tipmeta.Tip, verdict: str, device: str = "cpu", torch: str = "2.13.0+cpu",
                sha: str | None = None, date: str = "2026-11-22 06:00 UTC") -> dict:
    version = {k: sha for k in records.VERSION_KEYS} if sha else records.tip_version(tip.path)
    return {"tip": tip.name, "topic": tip.topic, "source_sha256": sha or records.source_sha256(tip.path), **version,
            "torch": torch, "date": date, "hosts": {device: {"name": "test machine"}},
            "verdicts": {device: {"device": device, "verdict": verdict,
                                  "key": {"name": "speed-up at width 4", "value": 1.8, "low": 1.6,
                                          "high": 2.0, "unit": "x"}}}}


def evidence_with(recs: list[dict], torch: str | None = "2.13", device: str = "cpu") -> evidence.Evidence:
    target = evidence.Target(torch=torch, device=device, torch_from="test", device_from="test")
    ev = evidence.Evidence(target, result_paths=[], tips_out_dir=Path("/nonexistent"), site_url="https://x.test")
    ev.sets = [{"path": "fake.json", "records": recs}]
    return ev


@pytest.mark.parametrize("verdict, says", [
    ("holds", "use torch.inference_mode()"),
    ("depends", "whether to change it depends"),
    ("wrong", "found it does not hold on CPU"),
    ("outdated", "outdated on CPU"),
])
def test_message_follows_the_verdict(gallery, verdict, says):
    tip = gallery["tip_inference_mode"]
    ev = evidence_with([fake_record(tip, verdict)])
    rule = RULES["PTT019"]
    v = ev.verdict(tip.name)
    text = evidence.message(rule, v, ev.target)
    assert says in text and text.startswith(rule.finding)
    if verdict != "holds":
        assert rule.advice not in text  # never repeats advice the evidence does not back
    assert evidence.tail(v) == (f"{verdict} on CPU (torch 2.13.0+cpu), 1.8x speed-up at width 4 "
                                "(interval 1.6-2x), https://x.test/tips/speed/tip_inference_mode.html")


def test_not_measured_stale_and_other_release(gallery):
    tip = gallery["tip_inference_mode"]
    rule = RULES["PTT019"]
    ev = evidence_with([fake_record(tip, "holds", device="cuda", torch="2.11.0+cu130")])
    v = ev.verdict(tip.name)
    assert v.state == "not measured"
    assert "not measured on CPU with torch 2.13: no evidence either way" in evidence.message(rule, v, ev.target)
    ev = evidence_with([fake_record(tip, "depends", torch="2.11.0+cpu")])
    v = ev.verdict(tip.name)
    assert v.state == "not measured" and v.elsewhere == "measured with torch 2.11.0+cpu: depends"
    ev = evidence_with([fake_record(tip, "holds", sha="0" * 64)])
    v = ev.verdict(tip.name)
    assert v.state == "stale" and "only an older version of the tip" in evidence.message(rule, v, ev.target)
    assert rule.advice not in evidence.message(rule, v, ev.target)


def test_newest_current_record_wins(gallery):
    tip = gallery["tip_inference_mode"]
    ev = evidence_with([fake_record(tip, "holds", date="2026-11-01 00:00 UTC"),
                        fake_record(tip, "wrong", date="2026-11-20 00:00 UTC")], torch=None)
    assert ev.verdict(tip.name).verdict == "wrong"


def test_committed_result_sets_load(gallery):
    ev = evidence.Evidence(evidence.Target("2.11", "cuda", "test", "test"), tips_out_dir=Path("/nonexistent"))
    assert ev.sets, "docs/_data/results/ holds at least the recorded H100 run"
    assert ev.verdict("tip_inference_mode").state in ("measured", "stale")


def test_target_detection():
    t = evidence.detect_target("2.13.0+cpu", "cuda")
    assert (t.torch, t.device) == ("2.13", "cuda")
    assert evidence.same_release("2.13.0+cpu", "2.13") and not evidence.same_release("2.1.0", "2.13")


# --- the command line ------------------------------------------------------------------------------

def test_cli_text_json_and_exit_codes(tmp_path, capsys):
    bad = tmp_path / "pkg" / "train.py"
    bad.parent.mkdir()
    bad.write_text("import torch\nstate = torch.load('x.pt')\n")
    (tmp_path / "pkg" / "clean.py").write_text("import torch\nx = torch.ones(3)\n")
    (tmp_path / "pkg" / ".hidden").mkdir()
    (tmp_path / "pkg" / ".hidden" / "skip.py").write_text("import torch\ntorch.load('x')\n")
    args = ["--torch", "2.13", "--device", "cpu", "--jobs", "1", "--site-url", "https://x.test"]
    assert cli.main([str(tmp_path / "pkg"), *args]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith(f"{bad}:2:9: PTT001 [TorchFix TOR102] torch.load without weights_only=True")
    assert all(" -> " in line and "https://x.test/tips/" in line for line in lines)
    assert "2 finding(s) in 1 of 2 file(s)" in err
    assert cli.main([str(bad), "--format", "json", *args]) == 1
    data = json.loads(capsys.readouterr()[0])
    assert {r["code"] for r in data["findings"]} == {"PTT001", "PTT002"}
    assert data["target"]["torch"] == "2.13" and data["target"]["device"] == "cpu"
    assert cli.main([str(tmp_path / "pkg" / "clean.py"), *args]) == 0
    (tmp_path / "broken.py").write_text("def (:\n")
    assert cli.main([str(tmp_path / "broken.py"), *args]) == 2
    assert "cannot be parsed" in capsys.readouterr()[1]


# --- speed ------------------------------------------------------------------------------------------

def test_speed_at_least_50_files_of_200_lines_per_second():
    """The budget: 50 files of 200 lines a second on the 2-core development machine.

    Wall time depends on what else the shared machine runs, so the test bounds the CPU time per
    file (summed over the worker processes): at most 2 cores / 50 files/s = 40 ms per file. Even
    CPU time grows when other jobs share the cores (40.4 ms once, with the suite's own workers
    beside it, against 26 ms measured on its own), so the least disturbed of three runs counts.

    The command runs as a user runs it, in a process of its own: forked from this test process
    (a pytest-xdist worker, with execnet's thread beside the test's) its workers could deadlock.
    """
    runs = [_bench_command(60, jobs=2) for _ in range(3)]
    for r in runs:
        print(bench.describe(r))
    result = min(runs, key=lambda r: r["ms_cpu_per_file"])
    assert result["jobs"] == 2, "the checker did not use its worker processes"
    assert result["files"] == 60 and result["lines_per_file"] >= 200 and result["findings"] > 60
    assert result["ms_cpu_per_file"] <= 2 * 1000 / 50, bench.describe(result)


def _bench_command(n: int, jobs: int) -> dict:
    proc = subprocess.run([sys.executable, "-m", "tipsite.checker", "--bench", str(n), "--jobs", str(jobs),
                           "--format", "json"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=build_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_workers_are_forked_only_from_a_process_with_one_thread(tmp_path):
    """With a second thread running, the checker checks in its own process instead of forking."""
    import threading

    for i in range(8):
        (tmp_path / f"f{i}.py").write_text("import torch\nstate = torch.load('x.pt')\n")
    files, _ = cli.collect([str(tmp_path)])
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not cli.can_fork() and cli.processes(len(files), 2) == 1
        findings, errors = cli.check_files(files, 2)
    finally:
        stop.set()
        other.join()
    assert len(findings) == 8 * 2 and not errors
