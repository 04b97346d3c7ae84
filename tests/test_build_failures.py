"""Broken tips fed to a real Sphinx build: the build stops and says which file and what."""

from __future__ import annotations


def test_good_tiny_build_passes(tiny_build, good_tip):
    result = tiny_build({"correctness/tip_tiny.py": good_tip})
    assert result.returncode == 0, result.output
    page = (result.html / "tips" / "correctness" / "tip_tiny.html").read_text()
    assert "tip-verdict-holds" in page and "Provenance: torch" in page


def test_bad_metadata_stops_the_build(tiny_build, good_tip):
    result = tiny_build({"correctness/tip_tiny.py": good_tip.replace('["autograd"]', '["fast"]')})
    assert result.returncode != 0
    assert "tip_tiny.py: sphinx_gallery_tips_tags: unknown tag 'fast'" in result.output


def test_missing_title_stops_the_build(tiny_build, good_tip):
    result = tiny_build({"correctness/tip_tiny.py": good_tip.replace("A tiny tip\n==========\n", "")})
    assert result.returncode != 0
    assert "tip_tiny.py: title" in result.output


def test_raising_tip_fails_the_build_and_publishes_no_page(tiny_build, good_tip):
    broken = good_tip.replace("import torch\n", "import torch\nraise RuntimeError('boom in tip')\n")
    result = tiny_build({"correctness/tip_tiny.py": broken})
    assert result.returncode != 0
    assert "tip_tiny.py" in result.output and "boom in tip" in result.output
    assert not (result.html / "tips" / "correctness" / "tip_tiny.html").exists()


def test_invalid_result_fails_the_build(tiny_build, good_tip):
    broken = good_tip.replace('{"verdict": verdict,', '{"verdict": "probably",')
    result = tiny_build({"correctness/tip_tiny.py": broken})
    assert result.returncode != 0
    assert "tip_tiny.py" in result.output and "'probably'" in result.output


def test_tip_that_never_sets_result_fails_the_build(tiny_build, good_tip):
    broken = good_tip.replace("RESULT = {", "if False:\n    RESULT = {").replace(
        '\n          "key": None', '\n              "key": None')
    result = tiny_build({"correctness/tip_tiny.py": broken})
    assert result.returncode != 0
    assert "tip_tiny.py: ran without defining RESULT" in result.output
