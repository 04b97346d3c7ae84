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

from tipsite import contribute, records, tipcheck, tipmeta

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


@pytest.fixture(scope="module")
def manifest(contribution):
    """The rule manifest of the two tiny tips, made from the project's own run of them (the
    fixture's: the repository's conf/tip-rules.json knows only the gallery's tips)."""
    path, _, _ = contribution
    made = {"tips": {}}
    for record in records.load_set(path)["records"]:
        records.rules.add(made, record)
    return made


def _vet(path, tips, manifest):
    return records.vet_set(path, versions={}, rules_manifest=manifest, committed=[],
                           tips=tips)


FORGERIES = json.loads((ROOT / "tests" / "fixtures" / "hostile-sets" / "forgeries.json").read_text())["cases"]


def _forge(data: dict, case: dict) -> dict:
    data = copy.deepcopy(data)
    for path, value in case.get("set", []):
        # what makes the machine and run (hosts, build_threads) is changed in every record
        run = path[2] in ("hosts", "build_threads")
        for where in ([["records", i, *path[2:]] for i in range(len(data["records"]))] if run else [path]):
            *parents, last = where
            target = data
            for p in parents:
                target = target[p]
            target[last] = copy.deepcopy(value)
    if "samples" in case:
        c = data["records"][1]["verdicts"]["cpu"]["comparisons"][0]
        n = case["samples"]
        c["base"], c["cand"] = [2.0] * n, [1.0] * n
        c["ratios"] = [2.0] * n
    return data


def test_a_reader_s_set_from_another_machine_class_is_accepted_and_shown_as_one_more_row(
        contribution, manifest, tiny_site):
    path, tips, paths = contribution
    assert records.load_set(path)["contributed"] is True
    assert _vet(path, tips, manifest) == []
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


@pytest.mark.parametrize("case", FORGERIES, ids=lambda c: c["name"])
def test_a_forged_or_hostile_set_is_refused_with_the_reason(contribution, manifest, tmp_path, case):
    """Each forgery of tests/fixtures/hostile-sets/forgeries.json is refused, the reason naming
    the file and the record; vetting writes nothing."""
    path, tips, _ = contribution
    bad = tmp_path / "contrib-bad.json"
    bad.write_text(json.dumps(_forge(json.loads(path.read_text()), case)))
    before = sorted(p.name for p in records.DATA_DIR.glob("*.json"))
    problems = _vet(bad, tips, manifest)
    reasons = case["refused"] if isinstance(case["refused"], list) else [case["refused"]]
    assert any(r in p for p in problems for r in reasons), problems
    assert all(p.startswith(f"{bad}: ") for p in problems), problems
    assert sorted(p.name for p in records.DATA_DIR.glob("*.json")) == before  # vetting writes nothing


@pytest.mark.parametrize("forge,reason", [
    (lambda r: r["verdicts"]["cpu"].update(verdict="wrong" if r["verdicts"]["cpu"]["verdict"] != "wrong" else "holds"),
     "but the recorded evidence gives"),
    (lambda r: r.update(date="2099-01-01 00:00 UTC"), "is not between"),
    (lambda r: r["hosts"]["cpu"].pop("flags"), "needs the CPU's flags and cores"),
    (lambda r: r.update(tip=f"tip_not_here_{r['topic']}"), "no tip named"),
])
def test_a_forged_record_is_refused_with_the_reason(contribution, manifest, tmp_path, forge, reason):
    path, tips, _ = contribution
    data = json.loads(path.read_text())
    for record in data["records"]:
        forge(record)
    bad = tmp_path / "contrib-bad.json"
    bad.write_text(json.dumps(data))
    problems = _vet(bad, tips, manifest)
    assert any(reason in p and "record 0 (" in p for p in problems), problems


def test_ordinary_text_is_not_taken_for_markup(contribution, manifest, tmp_path):
    """tip_profile_low_gpu_utilization's own set was refused: "profile:" looked like a file: link and
    "|grad|" like a substitution. Text is escaped where it is shown; vet refuses no ordinary text."""
    path, tips, _ = contribution
    data = json.loads(path.read_text())
    for record in data["records"]:
        record["skipped"] = ["profile: the |grad| norm <= 1.1x, see `torch.profiler` at https://pytorch.org",
                             "a :func:`x` role, a <b>tag</b>, $x^2$ and .. note:: text"]
        record["measurements"] = [{"variant": "profile: |grad|", "metric": "time", "value": 1.0,
                                   "unit": "s", "device": "cpu"}]
    ok = tmp_path / "contrib-text.json"
    ok.write_text(json.dumps(data))
    honest = [p.split(": ", 1)[1] for p in _vet(path, tips, manifest)]  # [] unless the run was odd
    assert [p.split(": ", 1)[1] for p in _vet(ok, tips, manifest)] == honest


def test_sizes_are_bounded_before_anything_is_parsed(contribution, manifest, tmp_path):
    """A 9 MB file and a file nested too deep for the JSON reader are refused, naming the file."""
    _, tips, _ = contribution
    big = tmp_path / "contrib-big.json"
    big.write_text(" " * (records.MAX_SET_BYTES + 1))
    deep = ROOT / "tests" / "fixtures" / "hostile-sets" / "nested-too-deep.json"
    for path, reason in ((big, "a result set holds at most"), (deep, "cannot be read as JSON")):
        problems = _vet(path, tips, manifest)
        assert len(problems) == 1 and problems[0].startswith(f"{path}: ") and reason in problems[0], problems


def test_a_set_is_its_content_and_a_duplicate_is_refused(contribution, manifest, tmp_path):
    """The same set under another name, or another set that repeats a committed record, is
    refused; a set that repeats a tip inside itself too."""
    path, tips, _ = contribution
    copy_ = tmp_path / "contrib-copy.json"
    copy_.write_text(path.read_text())
    problems = records.vet_set(copy_, versions={}, rules_manifest=manifest, committed=[path], tips=tips)
    assert any("the same set as the committed" in p for p in problems), problems
    data = json.loads(path.read_text())
    data["records"] = data["records"][:1]
    part = tmp_path / "contrib-part.json"
    part.write_text(json.dumps(data))
    problems = records.vet_set(part, versions={}, rules_manifest=manifest, committed=[path], tips=tips)
    assert any("repeat those in the committed" in p for p in problems), problems
    data = json.loads(path.read_text())
    data["records"].append(copy.deepcopy(data["records"][0]))
    twice = tmp_path / "contrib-twice.json"
    twice.write_text(json.dumps(data))
    assert any("one record of each tip" in p for p in _vet(twice, tips, manifest))


def test_the_vet_command_refuses_with_the_reason_and_its_exit_status(contribution, tmp_path):
    path, _, _ = contribution
    data = json.loads(path.read_text())
    for record in data["records"]:
        record["hosts"]["cpu"]["name"] = "<img src=x onerror=alert(1)>"
    bad = tmp_path / "contrib-bad.json"
    bad.write_text(json.dumps(data))
    proc = subprocess.run([sys.executable, "-m", "tipsite.records", "vet", str(bad)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "refused:" in proc.stderr and "not what a machine reports" in proc.stderr


def test_a_set_of_two_machines_is_refused(contribution, manifest, tmp_path):
    path, tips, _ = contribution
    data = json.loads(path.read_text())
    other = copy.deepcopy(data["records"][1])
    other["hosts"] = {"cpu": {**XEON["cpu"], "cores": 32}}
    data["records"][1] = other
    bad = tmp_path / "contrib-two.json"
    bad.write_text(json.dumps(data))
    assert any("one machine and run" in p for p in _vet(bad, contribution[1], manifest))


@pytest.fixture(scope="module")
def contributed_all(tmp_path_factory):
    """The real command on every tip of the gallery, once (the slowest fixture of this file: its
    tests share one worker, tests/conftest.py)."""
    out = tmp_path_factory.mktemp("all") / "contrib-all.json"
    proc = subprocess.run([sys.executable, "-m", "tipsite.contribute", "all", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=3 * 3600)
    return proc, out


def test_contribute_all_succeeds_on_an_honest_machine_and_its_file_passes_vet(contributed_all):
    """Issue 32: `contribute all` failed its own vet ("profile:" taken for a link, "|grad|" for a
    substitution), so no reader could contribute. Every tip is recorded, and vet accepts it."""
    proc, out = contributed_all
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "not recorded" not in proc.stderr, proc.stderr[-6000:]
    assert {r["tip"] for r in records.load_set(out)["records"]} == {t.name for t in tipmeta.read_all()}
    assert records.vet_set(out) == []


def test_a_tip_that_will_not_stop_is_killed_and_the_tips_after_it_still_run(tmp_path):
    """Issue 32 item 5 for a reader's run (one runner process runs every tip): a tip looping in C
    is killed with its runner past its limit and reported failed, naming the limit; one that
    catches the limit's exception fails; the tips after them run in a new runner."""
    bodies = {"tip_a": "", "tip_c_loop": "import itertools\nsum(itertools.repeat(1, 10**13))\n",
              "tip_catches": "import time\ntry:\n    time.sleep(30)\nexcept BaseException:\n    pass\n",
              "tip_d": ""}
    paths = []
    for name, body in bodies.items():
        path = tmp_path / "correctness" / f"{name}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(make_tip(GOOD_BODY.replace("RULE =", body + "RULE =")), encoding="utf-8")
        paths.append(path)
    reports = tipcheck.run_tips(paths, per_tip=3, timeout=600)
    assert reports["tip_a"]["status"] == "passed" and reports["tip_d"]["status"] == "passed", reports
    assert reports["tip_c_loop"]["status"] == "failed"
    assert "tip_c_loop.py ran for more than 3 s (the time limit) and did not stop" in reports["tip_c_loop"]["error"]
    assert reports["tip_catches"]["status"] == "failed"
    assert "tip_catches.py ran for more than 3 s" in reports["tip_catches"]["error"]


def test_a_tip_that_refuses_its_measurement_as_a_defect_runs_once_more_alone(tmp_path, capsys):
    """On a machine another process takes for a moment, a tip may refuse its own measurement (a
    speed-up its cores cannot give: tipkit.check_plausible). `contribute` runs such a tip once
    more, alone, keeps that run and says so in its record; a tip refused twice, or failing for
    another reason, is not run again."""
    from tipsite import contribute

    paths = [tmp_path / f"{n}.py" for n in ("tip_a", "tip_b", "tip_c")]
    defect = "Traceback ...\nRuntimeError: x: 9x [8-10] is more than the 2x that 2 cores allows: " + contribute.DEFECT
    first = {"tip_a": {"status": "passed"}, "tip_b": {"status": "failed", "error": defect},
             "tip_c": {"status": "failed", "error": "Traceback ...\nValueError: a bug"}}
    asked = []

    def run(some):
        asked.append([p.stem for p in some])
        return {"tip_b": {"status": "passed", "result": "second"}}

    reports, notes = contribute.retry_defects(paths, first, run)
    assert asked == [["tip_b"]]  # only the refused one, alone
    assert reports["tip_b"] == {"status": "passed", "result": "second"} and reports["tip_c"] == first["tip_c"]
    assert notes == {"tip_b": [f"ran twice: the first run refused its measurement ({defect.splitlines()[-1]})"]}
    assert "running 1 tip(s) again, alone" in capsys.readouterr().out
    # refused again: the second report stands (failed); nothing refused: nothing runs again
    reports, _ = contribute.retry_defects(paths, first, lambda some: {"tip_b": first["tip_b"]})
    assert reports["tip_b"]["status"] == "failed"
    assert contribute.retry_defects(paths, {"tip_a": {"status": "passed"}}, run) == ({"tip_a": {"status": "passed"}}, {})
    assert len(asked) == 1
