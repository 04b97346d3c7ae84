"""Result sets: exported from real builds and merged, one column per build, on the tip pages.

The two result sets are real: the fixture gallery of tests/test_shards.py built at 1 thread
(unsharded) and at 2 threads (sharded, then merged). No number here is typed in.
The CUDA paths of the build's own hooks are exercised up to the device check.
"""

from __future__ import annotations

import html as html_lib
import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # whatever pytest's import mode
from test_shards import build_fixture  # noqa: E402

from conf import settings  # noqa: E402
from tipsite import gallery, records, tipmeta  # noqa: E402


@pytest.fixture(scope="session")
def fixture_builds(tmp_path_factory):
    """The fixture gallery's builds, shared with tests/test_shards.py (built once per session)."""
    return build_fixture(tmp_path_factory)


def _page(html_dir, tip) -> str:
    return (html_dir / "tips" / tip.parent.name / f"{tip.stem}.html").read_text(encoding="utf-8")


def _text(page: str) -> str:
    """The page's text with tags dropped and entities decoded, whitespace collapsed."""
    return re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", " ", page)))


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def test_export_writes_one_result_set_per_build(fixture_builds):
    import torch

    fb = fixture_builds
    (ref,) = fb.ref_sets
    (merged,) = fb.merged_sets
    assert ref.name == f"cpu-torch{torch.__version__}-1threads.json"
    assert merged.name == f"cpu-torch{torch.__version__}.json"
    names = {p.stem for p in fb.tips}
    for path, threads in ((ref, 1), (merged, settings.TIPS_THREADS)):
        data = results.load_set(path)
        assert data["schema"] == results.SCHEMA and data["device"] == "cpu" and data["threads"] == threads
        assert {r["tip"] for r in data["records"]} == names
        for record in data["records"]:
            assert not results.record_problems(record)
            assert record["build_threads"] == threads and record["torch"] == torch.__version__


def test_rows_are_flat_data(fixture_builds):
    data = results.load_set(fixture_builds.merged_sets[0])
    rows = results.rows(data["records"])
    measured = [r for r in data["records"] if r["measurements"]]
    assert len(rows) == sum(len(r["measurements"]) for r in measured)
    for row in rows:
        assert tuple(row) == results.ROW_KEYS
        assert isinstance(row["value"], (int, float)) and row["device_name"] and row["date"]


def test_cli_export_and_rows(fixture_builds, tmp_path, capsys):
    fb = fixture_builds
    assert results.main(["export", "--out", str(tmp_path), "--tips-out", str(fb.unsharded.tips_out),
                         "--tips", ",".join(p.stem for p in fb.tips)]) == 0
    (written,) = tmp_path.glob("*.json")
    assert json.loads(written.read_text()) == json.loads(fb.ref_sets[0].read_text())
    capsys.readouterr()
    assert results.main(["rows", str(written)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ",".join(results.ROW_KEYS)


def test_tip_pages_show_both_builds_side_by_side(fixture_builds):
    """The merged 2-thread site given the 1-thread result set: one column per build, real figures."""
    fb = fixture_builds
    ref = {r["tip"]: r for r in results.load_set(fb.ref_sets[0])["records"]}
    for tip in fb.tips:
        this = gallery.load_result(fb.sharded.tips_out / tip.parent.name / tip.name)
        other = ref[tip.stem]
        text = _text(_page(fb.merged_with_sets, tip))
        assert "Figures measured by each build" in text
        head_this, head_other = results.column_label(this), results.column_label(other)
        assert head_this != head_other and "2 threads" in head_this and "1 thread" in head_other
        # this build's column first, then the given set's
        assert text.index(head_this) < text.index(head_other)
        for record in (this, other):
            for m in record["measurements"]:
                assert f"{_fmt(m['value'])} {m['unit']}" in text, (tip.stem, m)
            if record["key"]:
                assert f"{_fmt(record['key']['value'])} {record['key']['unit']}" in text
        assert f"Provenance: torch {this['torch']}" in text
        assert f"Provenance of the {head_other} column: torch {other['torch']}" in text
        assert other["date"] in text and this["date"] in text


def test_pages_without_result_sets_keep_one_column(fixture_builds):
    fb = fixture_builds
    for tip in fb.tips:
        text = _text(_page(fb.merged_plain, tip))
        assert "Figures measured by this build" in text and "Provenance of the" not in text


def test_cuda_is_named_not_yet_measured_with_no_number(fixture_builds):
    fb = fixture_builds
    for tip in fb.tips:
        meta = tipmeta.read_tip(tip)
        for html_dir in (fb.merged_plain, fb.merged_with_sets):
            text = _text(_page(html_dir, tip))
            said = "not yet measured on CUDA" in text
            assert said == ("cuda" in meta.devices), (tip.stem, html_dir)
            # no CUDA column: no heading, no provenance, hence no figure for it
            assert "CUDA · torch" not in text and "Provenance of the CUDA" not in text


def test_a_given_set_from_this_build_adds_no_column(fixture_builds):
    fb = fixture_builds
    own = results.load_sets(fb.merged_sets)
    for tip in fb.tips:
        this = gallery.load_result(fb.sharded.tips_out / tip.parent.name / tip.name)
        assert results.columns_for(tip.stem, this, own) == [this]
        both = results.columns_for(tip.stem, this, own + results.load_sets(fb.ref_sets))
        assert len(both) == 2 and both[1]["build_threads"] == 1


def test_expect_device_guards_the_cuda_job(fixture_builds, capsys):
    """The CUDA job fails rather than publish a CPU fallback as its results."""
    sets = [str(p) for p in fixture_builds.ref_sets]
    assert results.main(["expect-device", "cpu", *sets]) == 0
    assert results.main(["expect-device", "cuda", *sets]) == 1
    assert "expected result sets from cuda" in capsys.readouterr().err


def test_bad_result_sets_are_refused(tmp_path):
    with pytest.raises(results.ResultSetError, match="neither a result-set file nor a folder"):
        results.paths_from_env(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": results.SCHEMA, "records": [{"tip": "tip_x"}]}))
    with pytest.raises(results.ResultSetError, match="bad.json: record 0: record misses 'topic'"):
        results.load_sets(results.paths_from_env(str(tmp_path)))
    bad.write_text("[]")
    with pytest.raises(results.ResultSetError, match="not a result set"):
        results.load_set(bad)


# --- the build's CUDA paths, up to the device check ------------------------------------------------

class _CudaCalls:
    """Stands in for torch.cuda to check the order of calls; it measures nothing."""

    def __init__(self):
        self.calls: list[str] = []

    def install(self, monkeypatch, torch) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        for name in ("synchronize", "reset_peak_memory_stats", "empty_cache"):
            monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name, **k: self.calls.append(_n))
        monkeypatch.setattr(torch.cuda, "set_sync_debug_mode",
                            lambda mode: self.calls.append(f"set_sync_debug_mode({mode})"))
        monkeypatch.setattr(torch.cuda, "max_memory_allocated",
                            lambda *a, **k: self.calls.append("max_memory_allocated") or 3 * 2**20)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "the CUDA device")


def test_show_memory_on_cpu_returns_peak_and_value():
    peak, out = gallery.PeakMemory()(lambda: sum(range(1000)))
    assert out == 499500 and peak > 0
    assert gallery.device_description()["device"] == ("cuda" if _cuda() else "cpu")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_show_memory_cuda_path_resets_peak_before_and_reads_it_after(monkeypatch):
    import torch

    cuda = _CudaCalls()
    cuda.install(monkeypatch, torch)
    peak, out = gallery.PeakMemory()(lambda: cuda.calls.append("tip") or "value")
    assert out == "value" and peak == 3.0
    assert cuda.calls == ["synchronize", "reset_peak_memory_stats", "tip", "synchronize",
                          "max_memory_allocated"]
    desc = gallery.device_description()
    assert desc["device"] == "cuda" and desc["device_name"] == "the CUDA device"


def test_reset_hook_cuda_path(monkeypatch):
    import torch

    cuda = _CudaCalls()
    cuda.install(monkeypatch, torch)
    gallery.reset_torch({"gallery_dirs": "tips", "src_dir": "."}, None, "before")
    assert "set_sync_debug_mode(0)" in cuda.calls and "empty_cache" in cuda.calls
