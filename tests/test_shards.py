"""Sharded builds: shards 1/2 and 2/2 merged give the same site as an unsharded build.

To keep the suite fast, the builds use a fixture gallery of three tiny tips of their own (one that
times, with a CUDA path; one that measures bytes; one that decides from facts) in a throwaway
Sphinx project that uses the real extension and the real shard code (as ``docs/conf.py`` does).
The session fixture ``fixture_builds`` makes, once per test session:

* an unsharded build at 1 thread (its result set feeds tests/test_results.py),
* shard 1/2 and shard 2/2 builds at the default thread count, each packed,
* the merge of the two packs and a build that executes nothing,
* that merged site rebuilt with the unsharded build's result set and a CUDA result set given
  (``TIPS_RESULT_SETS``); the CUDA set is the fixture's CUDA tips run on the fake CUDA device.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import GOOD_BODY, TINYSITE, build_in_process, make_tip

from conf import settings
from tipsite import build, records, shards, tipmeta

ROOT = Path(__file__).resolve().parents[1]
# The fixture gallery's tips: written here, never the gallery's own (the site's build executes
# those once per run; every test of the build machinery uses tips of its own): one that times
# (with a CUDA path), one that measures bytes, one that decides from facts.
SPEED_BODY = '''\
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
RULE = "holds if summing 64 times more elements takes >5% longer at every size"
sizes = [256, 1024, 4096, 16384]
ratios = []
for n in sizes:
    small, large = torch.ones(n, device=device), torch.ones(64 * n, device=device)
    variants = {"64x more": lambda: large.sum(), "fewer": lambda: small.sum()}
    ratios.append(compare_times(f"sum of {n} elements", variants, threshold=1.05,
                                device=device, x=n, round_s=0.002, budget_s=0.2,
                                work={"bytes": 4 * n, "limit": "copy_device"}))
fig = plot_ratios({"64x more elements": ratios}, xlabel="elements summed",
                  title="A tiny timing sweep")
decision = decide(device, [("holds", {"sizes": "all above"}), ("depends", {})],
                  groups={"sizes": ratios}, key=ratios[-1])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {device.type: decision}, "measurements": [],
          "skipped": []}
'''

MEMORY_BODY = '''\
import torch

RULE = "holds if float64 takes twice the bytes of float32 at every length"
lengths = [16, 256, 4096]
ratios = []
for n in lengths:
    sizes = {"float64": [torch.ones(n, dtype=torch.float64).nbytes] * 3,
             "float32": [torch.ones(n, dtype=torch.float32).nbytes] * 3}
    ratios.append(compare_values(f"bytes of {n} values", sizes, threshold=1.5,
                                 device="cpu", metric="memory", unit="B", x=n))
series = {"float64": (lengths, [c["base"][0] for c in ratios]),
          "float32": (lengths, [c["cand"][0] for c in ratios])}
fig = plot_series(series, xlabel="values", ylabel="bytes", title="Bytes per dtype",
                  device="cpu")
decision = decide("cpu", [("holds", {"bytes": "all above"}), ("wrong", {})],
                  groups={"bytes": ratios}, key=ratios[-1])
report(decision, RULE)
RESULT = {"rule": RULE, "verdicts": {"cpu": decision}, "measurements": [],
          "skipped": []}
'''


def fixture_sources() -> dict[str, str]:
    return {
        "speed/tip_fixture_sweep.py": make_tip(SPEED_BODY, title="A tiny sweep", kind="speed",
                                               devices='["cpu", "cuda"]',
                                               helpers=("compare_times", "decide", "plot_ratios", "report")),
        "memory/tip_fixture_bytes.py": make_tip(MEMORY_BODY, title="Tiny bytes", kind="memory",
                                                helpers=("compare_values", "decide", "plot_series", "report")),
        "correctness/tip_fixture_facts.py": make_tip(GOOD_BODY, title="Tiny facts"),
    }


def fixture_tips(folder: Path) -> list[Path]:
    """The fixture's tips, written to ``folder/<topic>/``."""
    paths = []
    for rel, text in fixture_sources().items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "README.rst").write_text(f"{path.parent.name}\n{'-' * len(path.parent.name)}\n")
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


@dataclass
class Project:
    """A throwaway Sphinx project holding copies of some gallery tips."""

    root: Path
    tips: list[Path]
    logs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        gallery = self.src / "gallery"
        gallery.mkdir(parents=True)
        shutil.copy(settings.GALLERY_DIR / "README.rst", gallery / "README.rst")
        for tip in self.tips:
            topic = gallery / tip.parent.name
            topic.mkdir(exist_ok=True)
            shutil.copy(tip.parent / "README.rst", topic / "README.rst")
            shutil.copy(tip, topic / tip.name)
        for name in ("conf.py", "index.rst"):
            shutil.copy(TINYSITE / name, self.src / name)

    @property
    def src(self) -> Path:
        return self.root / "src"

    @property
    def gallery(self) -> Path:
        return self.src / "gallery"

    @property
    def tips_out(self) -> Path:
        return self.src / "tips"

    def html(self, name: str) -> Path:
        return self.root / name / "html"

    def build(self, name: str, **env: str) -> Path:
        out = self.html(name)
        code, self.logs[name] = build_in_process(self.src, out, self.root / name / "doctrees", **env)
        assert code == 0, f"{name} build failed:\n{self.logs[name][-6000:]}"
        return out


@dataclass
class FixtureBuilds:
    tips: list[Path]
    unsharded: Project
    sharded: Project
    packs: list[Path]
    ref_sets: list[Path]        # the unsharded build's result set(s), 1 thread
    merged_sets: list[Path]     # the merged build's result set(s), default threads
    merged_plain: Path          # merged site, no result sets given
    merged_with_sets: Path      # the same site rebuilt with TIPS_RESULT_SETS=<ref_sets>:<cuda_set>
    shard_executed: list[set[str]]  # tips whose result record each shard build (re)wrote
    result_mtimes: dict[str, int]
    result_mtimes_after: dict[str, int]
    cuda_set: Path              # the fixture's CUDA tips run on the fake CUDA device


def _result_mtimes(tips_out: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in tips_out.glob("*/*" + records.RECORD_SUFFIX)}


_BUILT: dict[str, FixtureBuilds] = {}


@pytest.fixture(scope="session")
def fixture_builds(tmp_path_factory) -> FixtureBuilds:
    return build_fixture(tmp_path_factory)


def build_fixture(tmp_path_factory) -> FixtureBuilds:
    """The builds, made once per test session (tests/test_results.py uses them too)."""
    if "builds" not in _BUILT:
        _BUILT["builds"] = _make_builds(tmp_path_factory)
    return _BUILT["builds"]


def _make_builds(tmp_path_factory) -> FixtureBuilds:
    base = tmp_path_factory.mktemp("shards")
    tips = fixture_tips(base / "fixture-gallery")

    unsharded = Project(base / "unsharded", tips)
    unsharded.build("html-1thread", TINYSITE_THREADS="1")
    ref_sets = records.export(base / "results-1thread", unsharded.tips_out, gallery_dir=unsharded.gallery)

    sharded = Project(base / "sharded", tips)
    packs, executed = [], []
    for k in (1, 2):
        seen = _result_mtimes(sharded.tips_out)
        sharded.build(f"shard-{k}", **{shards.ENV_VAR: f"{k}/2"})
        executed.append({name[: -len(records.RECORD_SUFFIX)]
                         for name, t in _result_mtimes(sharded.tips_out).items() if seen.get(name) != t})
        packs.append(shards.pack(k, 2, sharded.tips_out, base / "packs", gallery_dir=sharded.gallery))
    shards.merge(packs, sharded.tips_out, gallery_dir=sharded.gallery)
    before = _result_mtimes(sharded.tips_out)
    merged = sharded.build("merged", **{shards.ENV_VAR: shards.MERGED})
    plain = base / "merged-plain"
    shutil.copytree(merged, plain)
    merged_sets = records.export(base / "results-merged", sharded.tips_out, gallery_dir=sharded.gallery)
    cuda_set = fake_cuda_set(tips, base / "results-cuda")
    # Rebuilt in place: the given result sets alone must make Sphinx dress the pages again.
    given = os.pathsep.join(str(p) for p in (base / "results-1thread", cuda_set))
    sharded.build("merged", **{shards.ENV_VAR: shards.MERGED, records.ENV_VAR: given})
    return FixtureBuilds(tips, unsharded, sharded, packs, ref_sets, merged_sets, plain, merged,
                         executed, before, _result_mtimes(sharded.tips_out), cuda_set)


# A CUDA machine's name as another machine could send it: markup must never reach the page.
HOSTILE_NAME = "Fake GPU\n.. raw:: html\n\n   <script>alert('name')</script>\n"


def fake_cuda_set(tips: list[Path], out: Path) -> Path:
    """A result set of the fixture's CUDA tips, run on the fake CUDA device (tipsite/fakecuda.py)
    through the tip runner: real decisions from a real run, whose figures mean nothing. Its
    machine name is hostile, to check the pages treat it as text; its host records a compute
    capability, as a real CUDA host does, so the name leads the machine class the header shows."""
    from tipsite import tipcheck

    made = []
    for tip in tips:
        if "cuda" not in tipmeta.read_tip(tip).devices:
            continue
        report = tipcheck.run_tip(tip, fake_cuda=True)
        assert report["status"] == "passed", report.get("error")
        record = records.make_record(tip, report["result"], build_threads=settings.TIPS_THREADS)
        record["hosts"]["cuda"] = {"name": HOSTILE_NAME, "capability": "9.0", "cuda": "13.0", "driver": "580"}
        made.append(record)
    assert made, "the fixture needs a tip with a CUDA path"
    out.mkdir(parents=True)
    path = out / "cuda-fake.json"
    records.write_record(path, records.make_set(made))
    return path


# --- the plan -------------------------------------------------------------------------------

def test_plan_is_longest_first_and_balanced():
    timings = {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0, "e": 1.0}
    assert shards.plan(list(timings), 2, timings) == [["a", "d", "e"], ["b", "c"]]
    # more shards than tips: the extra shards are empty, every tip is in exactly one
    assert shards.plan(["a", "b"], 3, timings) == [["a"], ["b"], []]


def test_plan_counts_untimed_tips_as_the_median():
    timings = {"a": 10.0, "b": 2.0, "c": 1.0}
    # "new" counts as 2 s: a | b, c, new -> 10 vs 5
    assert shards.plan(["a", "b", "c", "new"], 2, timings) == [["a"], ["b", "c", "new"]]
    assert shards.plan(["x", "y", "z"], 2, {}) == [["x", "z"], ["y"]]


def test_plan_covers_the_real_gallery_once():
    names = [p.stem for p in tipmeta.tip_files()]
    for n in (1, 2, 3):
        split = shards.plan(names, n)
        assert sorted(t for s in split for t in s) == sorted(names)


def test_filename_pattern_selects_the_shard(tmp_path):
    gallery = tmp_path / "gallery"
    for rel in ("speed/tip_a.py", "memory/tip_b.py", "memory/tip_ab.py"):
        (gallery / rel).parent.mkdir(parents=True, exist_ok=True)
        (gallery / rel).write_text("")
    files = [str(p) for p in tipmeta.tip_files(gallery)]
    executed = set()
    for k in (1, 2):
        pattern = shards.filename_pattern(gallery, shard=f"{k}/2")
        mine = {Path(f).stem for f in files if re.search(pattern, f)}
        assert mine == set(shards.shard_tips(k, 2, gallery)) and not mine & executed
        executed |= mine
    assert executed == {"tip_a", "tip_b", "tip_ab"}
    assert not any(re.search(shards.filename_pattern(gallery, shard="merged"), f) for f in files)
    assert shards.filename_pattern(gallery, shard="") == r"/tip_"
    with pytest.raises(shards.ShardError, match="K/N"):
        shards.filename_pattern(gallery, shard="3")
    with pytest.raises(shards.ShardError, match="between 1 and N"):
        shards.parse_shard("3/2")


def test_site_conf_executes_the_shard_named_by_the_environment():
    """docs/conf.py hands sphinx-gallery the pattern of the shard TIPS_SHARD names."""
    code = ("import runpy; print(runpy.run_path('docs/conf.py')"
            "['sphinx_gallery_conf']['filename_pattern'])")
    for shard, expected in (("", r"/tip_"), ("merged", shards.NOTHING),
                            ("2/3", shards.filename_pattern(settings.GALLERY_DIR, shard="2/3"))):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                              check=False, env={**env, shards.ENV_VAR: shard})
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == expected


def test_tip_output_files_do_not_take_a_longer_namesake(tmp_path):
    topic = tmp_path / "speed"
    (topic / "images" / "thumb").mkdir(parents=True)
    for name in ("tip_a.py", "tip_a.rst", "tip_a.py.md5", "tip_ab.py", "tip_a_b.rst",
                 "images/sphx_glr_tip_a_001.png", "images/thumb/sphx_glr_tip_a_thumb.png",
                 "images/sphx_glr_tip_a_b_001.png"):
        (topic / name).write_text("x")
    got = {p.relative_to(topic).as_posix() for p in shards.tip_output_files(topic, "tip_a")}
    assert got == {"tip_a.py", "tip_a.rst", "tip_a.py.md5", "images/sphx_glr_tip_a_001.png",
                   "images/thumb/sphx_glr_tip_a_thumb.png"}


# --- sharded builds and their merge ----------------------------------------------------------------

def _tip_pages(html: Path) -> set[str]:
    return {p.relative_to(html).as_posix() for p in (html / "tips").rglob("*.html")}


def _manifest(pack: Path) -> dict:
    return json.loads((pack / shards.MANIFEST).read_text())


def test_each_shard_executes_only_its_tips(fixture_builds):
    fb = fixture_builds
    names = {p.stem for p in fb.tips}
    owned = [set(_manifest(p)["tips"]) for p in fb.packs]
    assert all(owned), f"with {len(names)} tips both shards should execute some: {owned}"
    assert owned[0].isdisjoint(owned[1]) and owned[0] | owned[1] == names
    assert fb.shard_executed == owned, "a shard build executed tips outside its shard"
    # Shard 1 ran first in a fresh tree: only its own pages have output. (Shard 2, run in the
    # same tree afterwards, reuses shard 1's cached pages; CI runs shards in separate trees.)
    html = fb.sharded.html("shard-1")
    for tip in fb.tips:
        page = (html / "tips" / tip.parent.name / f"{tip.stem}.html").read_text()
        assert ("sphx-glr-script-out" in page) == (tip.stem in owned[0]), tip.stem
    for k, mine in enumerate(owned, 1):
        # the pack holds only its own tips' files, and their result set
        packed = {p.name.split(".")[0] for p in (fb.packs[k - 1] / "tips").glob("*/*.*")}
        assert packed == mine
        (result_set,) = (fb.packs[k - 1] / "results").glob("*.json")
        assert {r["tip"] for r in records.load_set(result_set)["records"]} == mine


def test_merged_site_has_the_pages_of_an_unsharded_build(fixture_builds):
    fb = fixture_builds
    ref = fb.unsharded.html("html-1thread")
    assert _tip_pages(fb.merged_plain) == _tip_pages(ref)
    for tip in fb.tips:
        rel = f"tips/{tip.parent.name}/{tip.stem}.html"
        for html in (ref, fb.merged_plain, fb.merged_with_sets):
            page = (html / rel).read_text(encoding="utf-8")
            assert "sphx-glr-script-out" in page, f"{rel}: no executed output in {html}"
            record = records.read_record(fb.sharded.tips_out / tip.parent.name / tip.name)
            for device, decision in record["verdicts"].items():
                # a run that found the machine busy decided nothing: "not measured: machine busy"
                token = "not-measured" if decision["verdict"] == "busy" else decision["verdict"]
                assert f"tip-verdict-{token}" in page, rel
                if decision["verdict"] != "busy":  # the tip's own output, for a verdict
                    assert f"Verdict on {device.upper()}: {decision['verdict']}" in page, rel
            assert "Figures and provenance" in page and "build threads" in page, rel
            assert f"{tip.stem}.py" in page and f"{tip.stem}.ipynb" in page, f"{rel}: no downloads"
        times = (fb.merged_plain / "sg_execution_times.html").read_text(encoding="utf-8")
        assert f"{tip.stem}.py" in times


def test_merge_build_executes_nothing(fixture_builds):
    fb = fixture_builds
    assert fb.result_mtimes and fb.result_mtimes == fb.result_mtimes_after
    for tip in fb.tips:
        md5 = fb.sharded.tips_out / tip.parent.name / f"{tip.stem}.py.md5"
        assert md5.read_text().strip() == shards.source_md5(tip)


def test_merge_refuses_an_incomplete_or_stale_set_of_shards(fixture_builds, tmp_path):
    fb = fixture_builds
    with pytest.raises(shards.ShardError, match=r"need shards 1\.\.2 exactly once"):
        shards.merge(fb.packs[:1], tmp_path / "out", gallery_dir=fb.sharded.gallery)
    with pytest.raises(shards.ShardError, match="need shards"):
        shards.merge([fb.packs[0], fb.packs[0]], tmp_path / "out", gallery_dir=fb.sharded.gallery)
    # a tip edited after the shards ran: its packed output is stale
    gallery = tmp_path / "gallery"
    shutil.copytree(fb.sharded.gallery, gallery)
    tip = fb.tips[0]
    edited = gallery / tip.parent.name / tip.name
    edited.write_text(edited.read_text() + "\n# edited\n")
    with pytest.raises(shards.ShardError, match=f"{tip.stem}: .* executed an older version"):
        shards.merge(fb.packs, tmp_path / "out", gallery_dir=gallery)
    # a tip added after the shards ran: no shard executed it
    extra = gallery / tip.parent.name / "tip_zz_added_later.py"
    extra.write_text(tip.read_text())
    with pytest.raises(shards.ShardError, match="tip_zz_added_later: executed by no shard"):
        shards.merge(fb.packs, tmp_path / "out", gallery_dir=gallery)


def _copy_packs(fb, tmp_path) -> list[Path]:
    copies = []
    for pack in fb.packs:
        dest = tmp_path / "packs" / pack.name
        shutil.copytree(pack, dest)
        copies.append(dest)
    return copies


def test_merge_checks_every_packed_file_against_the_manifest(fixture_builds, tmp_path):
    """A pack missing a tip's files, or only its record, stops the merge naming the tip."""
    fb = fixture_builds
    packs = _copy_packs(fb, tmp_path)
    name, info = next(iter(_manifest(packs[0])["tips"].items()))
    (packs[0] / "tips" / info["topic"] / f"{name}{records.RECORD_SUFFIX}").unlink()
    with pytest.raises(shards.ShardError, match=f"{name}: .*{name}{re.escape(records.RECORD_SUFFIX)} is missing"):
        shards.merge(packs, tmp_path / "out", gallery_dir=fb.sharded.gallery)
    packs = _copy_packs(fb, tmp_path / "again")
    for path in (packs[0] / "tips").rglob(f"{name}.*"):
        path.unlink()
    with pytest.raises(shards.ShardError, match=f"{name}: .* is missing from the pack"):
        shards.merge(packs, tmp_path / "out", gallery_dir=fb.sharded.gallery)
    packs = _copy_packs(fb, tmp_path / "third")
    page = packs[0] / "tips" / info["topic"] / f"{name}.rst"
    page.write_text(page.read_text() + "\nedited after packing\n")
    with pytest.raises(shards.ShardError, match="differs from what the shard packed"):
        shards.merge(packs, tmp_path / "out", gallery_dir=fb.sharded.gallery)


def test_a_corrupt_manifest_is_named(fixture_builds, tmp_path):
    packs = _copy_packs(fixture_builds, tmp_path)
    (packs[0] / shards.MANIFEST).write_text("{ not json")
    with pytest.raises(shards.ShardError, match=f"{re.escape(str(packs[0] / shards.MANIFEST))}: cannot be read"):
        shards.merge(packs, tmp_path / "out", gallery_dir=fixture_builds.sharded.gallery)


def test_packs_record_their_commit_and_execution_layer(fixture_builds, tmp_path):
    fb = fixture_builds
    for pack in fb.packs:
        m = _manifest(pack)
        assert m["execution"] == build.execution_fingerprint() and "commit" in m
    packs = _copy_packs(fb, tmp_path)
    m = _manifest(packs[1])
    (packs[1] / shards.MANIFEST).write_text(json.dumps({**m, "commit": "0" * 40}))
    with pytest.raises(shards.ShardError, match="packs come from different commits"):
        shards.merge(packs, tmp_path / "out", gallery_dir=fb.sharded.gallery)
    (packs[1] / shards.MANIFEST).write_text(json.dumps({**m, "execution": "another"}))
    with pytest.raises(shards.ShardError, match="another version of the build's execution layer"):
        shards.merge(packs, tmp_path / "out", gallery_dir=fb.sharded.gallery)


def test_a_bad_shard_argument_deletes_nothing(tmp_path):
    with pytest.raises(shards.ShardError):
        shards.docs_options(["--clean", "--shard", "3/2"])


def test_record_timings_reads_the_builds_costs(fixture_builds, tmp_path):
    path = tmp_path / "timings.json"
    seconds = shards.record_timings(fixture_builds.sharded.tips_out, path, gallery_dir=fixture_builds.sharded.gallery)
    assert set(seconds) == {p.stem for p in fixture_builds.tips}
    assert all(s > 0 for s in seconds.values())
    assert shards.load_timings(path) == seconds


def test_every_tip_has_a_committed_timing():
    """The plan balances on measured times, not on the median guessed for a missing tip."""
    seconds = shards.load_timings()
    names = {p.stem for p in tipmeta.tip_files()}
    missing = sorted(names - set(seconds))
    assert not missing, f"conf/timings.json has no time for {missing}: " \
        "python -m tipsite.shards timings --update after a full build"
    assert not set(seconds) - names, "conf/timings.json times tips that are gone"
    assert all(s > 0 for s in seconds.values())


def test_the_timings_say_how_they_were_measured():
    data = json.loads(shards.TIMINGS_FILE.read_text(encoding="utf-8"))
    measured = data.get("measured") or {}
    for key in ("date", "commit", "cores", "nice", "load1"):
        assert key in measured, f"conf/timings.json: 'measured' lacks {key!r}"
    assert {"min", "mean", "max"} <= set(measured["load1"])


def test_record_timings_keeps_or_replaces_the_conditions(tmp_path):
    gallery, out = tmp_path / "gallery", tmp_path / "tips"
    fixture_tips(gallery)
    (out / "speed").mkdir(parents=True)
    (out / "speed" / "tip_fixture_sweep.cost.json").write_text('{"time": 1.5, "memory": 0}')
    path, kw = tmp_path / "timings.json", {"gallery_dir": gallery}
    shards.record_timings(out, path, conditions={"load1": {"mean": 1}}, **kw)
    shards.record_timings(out, path, **kw)
    data = json.loads(path.read_text())
    assert data["measured"] == {"load1": {"mean": 1}} and data["seconds"] == {"tip_fixture_sweep": 1.5}
    shards.record_timings(out, path, conditions={"load1": {"mean": 2}}, **kw)
    assert json.loads(path.read_text())["measured"] == {"load1": {"mean": 2}}


def test_workflows_lint_clean():
    # nox puts the venv's bin first on PATH; a direct `python -m pytest` may not
    actionlint = shutil.which("actionlint", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                                  os.environ.get("PATH", "")]))
    assert actionlint, "actionlint is missing: conf/requirements/tests.txt installs it"
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    assert workflows
    proc = subprocess.run([actionlint, *workflows], capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
