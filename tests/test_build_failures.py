"""Broken tips and interrupted builds fed to a real Sphinx build (issue "Builds that never
publish a wrong page"): the build stops and names the file and the problem, and after any
failure or interruption the next build publishes what a clean build would."""

from __future__ import annotations

import json
import re
import time

import pytest
from conftest import make_tip

SPHINX_CRASH_REPORT = "github.com/sphinx-doc/sphinx/issues"


def test_good_tiny_build_passes(tiny_build, good_tip):
    result = tiny_build({"correctness/tip_tiny.py": good_tip})
    assert result.returncode == 0, result.output
    page = result.page("correctness", "tip_tiny")
    assert 'class="tip-verdict tip-verdict-holds"' in page


def test_bad_metadata_stops_the_build(tiny_build, good_tip):
    result = tiny_build({"correctness/tip_tiny.py": good_tip.replace('["autograd"]', '["fast"]')})
    assert result.returncode != 0
    assert "tip_tiny.py: sphinx_gallery_tips_tags: unknown tag 'fast'" in result.output
    assert SPHINX_CRASH_REPORT not in result.output


def test_missing_title_stops_the_build(tiny_build, good_tip):
    result = tiny_build({"correctness/tip_tiny.py": good_tip.replace("A tiny tip\n==========\n", "")})
    assert result.returncode != 0
    assert "tip_tiny.py: title" in result.output


def test_raising_tip_fails_the_build_and_says_it_raised(tiny_build, good_tip):
    broken = good_tip.replace("x = torch.tensor(", "raise RuntimeError('boom in tip')\nx = torch.tensor(")
    result = tiny_build({"correctness/tip_tiny.py": broken})
    assert result.returncode != 0
    assert "tip_tiny.py: failed: RuntimeError: boom in tip" in result.output
    assert "ran without defining RESULT" not in result.output
    assert SPHINX_CRASH_REPORT not in result.output


def test_invalid_result_fails_the_build(tiny_build, good_tip):
    broken = good_tip.replace('"verdicts": {"cpu": decision}',
                              '"verdicts": {"cpu": {**decision,\n"verdict": "probably"}}')
    result = tiny_build({"correctness/tip_tiny.py": broken})
    assert result.returncode != 0
    assert "tip_tiny.py" in result.output and "'probably'" in result.output
    assert "ran without defining RESULT" not in result.output


def test_a_verdict_written_by_hand_fails_the_build(tiny_build, good_tip):
    """The build re-derives each verdict from its evidence: overriding it is refused."""
    broken = good_tip.replace("report(decision, RULE)", 'decision["verdict"] = "wrong"\nreport(decision, RULE)')
    result = tiny_build({"correctness/tip_tiny.py": broken})
    assert result.returncode != 0
    assert "the verdict is 'wrong' but the recorded evidence gives 'holds'" in result.output


def test_tip_that_never_sets_result_fails_the_build(tiny_build, good_tip):
    broken = good_tip.replace("RESULT = {", "if False:\n    RESULT = {")
    result = tiny_build({"correctness/tip_tiny.py": broken})
    assert result.returncode != 0
    assert "tip_tiny.py: ran without defining RESULT" in result.output


def test_missing_topic_readme_is_named(tiny_site, good_tip):
    tiny_site.write({"correctness/tip_tiny.py": good_tip})
    (tiny_site.src / "gallery" / "correctness" / "README.rst").unlink()
    result = tiny_site.build()
    assert result.returncode != 0
    assert "correctness: a topic folder needs a README.rst" in result.output


# --- a failed or interrupted run never poisons the next build ------------------------------------

def test_failure_after_result_then_revert_runs_the_tip_again(tiny_site, good_tip):
    """(a) A tip raising after its RESULT fails the build; reverted, it runs again (no cached
    traceback page, no stale downloads)."""
    tiny_site.write({"correctness/tip_tiny.py": good_tip})
    assert tiny_site.build().returncode == 0
    tiny_site.write({"correctness/tip_tiny.py": good_tip + "\nraise RuntimeError('after RESULT')\n"})
    failed = tiny_site.build()
    assert failed.returncode != 0 and "after RESULT" in failed.output
    tiny_site.write({"correctness/tip_tiny.py": good_tip})
    again = tiny_site.build()
    assert again.returncode == 0, again.output
    page = again.page("correctness", "tip_tiny")
    assert "after RESULT" not in page and "highlight-pytb" not in page
    download = next(again.html.glob("_downloads/*/tip_tiny.py")).read_text()
    assert "after RESULT" not in download


def test_early_raise_then_revert_does_not_need_a_hand_deleted_md5(tiny_site, good_tip):
    """(c) After an early raise and a revert, the next build runs the tip and passes."""
    tiny_site.write({"correctness/tip_tiny.py": good_tip})
    assert tiny_site.build().returncode == 0
    tiny_site.write({"correctness/tip_tiny.py": good_tip.replace("x = torch.tensor(", "raise KeyError('early')\nx = torch.tensor(")})
    assert tiny_site.build().returncode != 0
    tiny_site.write({"correctness/tip_tiny.py": good_tip})
    again = tiny_site.build()
    assert again.returncode == 0, again.output


def test_a_tip_that_stops_defining_result_never_shows_its_old_record(tiny_site, good_tip):
    tiny_site.write({"correctness/tip_tiny.py": good_tip})
    assert tiny_site.build().returncode == 0
    tiny_site.write({"correctness/tip_tiny.py": good_tip.replace("RESULT = {", "NOT_RESULT = {")})
    result = tiny_site.build()
    assert result.returncode != 0 and "ran without defining RESULT" in result.output


def test_interrupted_tip_then_revert_runs_it_again(tiny_site, good_tip):
    """(b) A tip killed after it wrote its record (timeout here, like Ctrl-C) leaves no MD5:
    reverted, it runs again and its page and record agree."""
    tiny_site.write({"correctness/tip_tiny.py": good_tip})
    assert tiny_site.build().returncode == 0
    slow = good_tip + "\nimport time\ntime.sleep(60)\n"
    tiny_site.write({"correctness/tip_tiny.py": slow})
    stopped = tiny_site.build(TIPS_TIMEOUT="4")
    assert stopped.returncode != 0
    assert not list((tiny_site.src / "tips").glob("*/tip_tiny.py.md5"))
    tiny_site.write({"correctness/tip_tiny.py": good_tip})
    again = tiny_site.build()
    assert again.returncode == 0, again.output
    record = json.loads(next((tiny_site.src / "tips").glob("*/tip_tiny.result.json")).read_text())
    assert "time.sleep" not in again.page("correctness", "tip_tiny")
    assert record["verdicts"]["cpu"]["verdict"] == "holds"


def test_a_tip_past_its_time_limit_stops_the_build_naming_it(tiny_build, good_tip):
    endless = good_tip.replace("RULE =", "while True:\n    pass\nRULE =")
    start = time.monotonic()
    result = tiny_build({"correctness/tip_tiny.py": endless}, TIPS_TIMEOUT="5")
    assert result.returncode != 0
    assert time.monotonic() - start < 120
    assert "tip_tiny.py ran for more than 5 s (TIPS_TIMEOUT)" in result.output
    assert SPHINX_CRASH_REPORT not in result.output


STUBBORN = {
    # catches every TipTimeout, again and again
    "catches BaseException": "import time\nwhile True:\n    try:\n        time.sleep(0.2)\n"
                             "    except BaseException:\n        pass\n",
    # a C loop: no Python signal handler runs until it returns
    "loops in C": "import itertools\nsum(itertools.repeat(1, 10**13))\n",
}


@pytest.mark.parametrize("body", STUBBORN.values(), ids=STUBBORN.keys())
def test_a_tip_that_will_not_stop_is_ended_with_its_process_naming_it(tiny_site, good_tip, body):
    """Issue 32: the time limit raised once inside the tip; a tip catching BaseException or looping
    in C hung the build with nothing printed. Its process is killed, the tip named."""
    tiny_site.write({"correctness/tip_tiny.py": good_tip.replace("RULE =", body + "RULE =")})
    start = time.monotonic()
    result = tiny_site.build(in_process=False, timeout=300, TIPS_TIMEOUT="3")
    assert result.returncode != 0
    assert time.monotonic() - start < 240
    assert "tip_tiny.py ran for more than 3 s (TIPS_TIMEOUT) and did not stop" in result.output, result.output[-3000:]
    assert not list((tiny_site.src / "tips").glob("*/tip_tiny.result.json"))


def test_a_tip_that_catches_its_time_limit_and_ends_still_fails(tiny_site, good_tip):
    """Caught once, the limit still holds: the build fails naming the tip, and no record stays."""
    caught = "import time\ntry:\n    time.sleep(30)\nexcept BaseException:\n    pass\n"
    tiny_site.write({"correctness/tip_tiny.py": good_tip.replace("RULE =", caught + "RULE =")})
    result = tiny_site.build(in_process=False, timeout=300, TIPS_TIMEOUT="3")
    assert result.returncode != 0
    assert "tip_tiny.py ran for more than 3 s (TIPS_TIMEOUT)" in result.output, result.output[-3000:]
    assert "did not stop" not in result.output  # it stopped: the build failed, nothing was killed
    assert not list((tiny_site.src / "tips").glob("*/tip_tiny.result.json"))


def test_printed_output_is_capped_and_the_page_says_so(tiny_build, good_tip):
    noisy = good_tip.replace("RULE =", "for i in range(100_000):\n    print('x' * 50)\nRULE =")
    result = tiny_build({"correctness/tip_tiny.py": noisy})
    assert result.returncode == 0, result.output
    page = result.page("correctness", "tip_tiny")
    assert len(page.encode()) < 400_000
    assert "KiB more was cut. Run the tip to see all of it." in page


# These three, and test_a_failed_build_keeps_failing_until_its_cause_is_fixed below, test what
# Sphinx keeps between builds, so each build runs in a process of its own: in one process Sphinx
# rewrites every page on each build, which would hide what they look for.
def test_a_deleted_tip_leaves_nothing_behind(tiny_site, good_tip):
    """Its page, downloads and index entries go, and the page of a tip left unchanged is written
    again without its link to it (a stale page would keep it)."""
    other = good_tip.replace("A tiny tip\n==========", "Another tip\n===========")
    tiny_site.write({"correctness/tip_tiny.py": good_tip, "correctness/tip_other.py": other})
    first = tiny_site.build(in_process=False)
    assert first.returncode == 0, first.output
    assert "tip_other.html" in first.page("correctness", "tip_tiny")
    (tiny_site.src / "gallery" / "correctness" / "tip_other.py").unlink()
    result = tiny_site.build(in_process=False)
    assert result.returncode == 0, result.output
    assert not (result.html / "tips" / "correctness" / "tip_other.html").exists()
    assert not list(result.html.glob("_downloads/*/tip_other.*"))
    assert "tip_other" not in (result.html / "searchindex.js").read_text()
    assert "tip_other" not in (result.html / "index.html").read_text()
    assert "tip_other" not in result.page("correctness", "tip_tiny"), "the remaining tip's page links the deleted one"


def test_a_new_tip_appears_in_every_page_s_navigation(tiny_site, good_tip):
    tiny_site.write({"correctness/tip_tiny.py": good_tip})
    assert tiny_site.build(in_process=False).returncode == 0
    other = good_tip.replace("A tiny tip\n==========", "Another tip\n===========")
    tiny_site.write({"correctness/tip_other.py": other})
    result = tiny_site.build(in_process=False)
    assert result.returncode == 0, result.output
    assert "tip_other.html" in result.page("correctness", "tip_tiny")


def test_an_unfinished_build_makes_the_next_one_write_every_page(tiny_site, good_tip):
    """Sphinx saves what it read before it writes: a build stopped while writing left pages that
    the next build would call current. The marker it leaves makes the next build rewrite them."""
    tiny_site.write({"correctness/tip_tiny.py": good_tip})
    assert tiny_site.build(in_process=False).returncode == 0
    page = tiny_site.html / "tips" / "correctness" / "tip_tiny.html"
    page.write_text("half-written")
    (tiny_site.html / ".tipsite-build-incomplete").write_text("interrupted\n")
    result = tiny_site.build(in_process=False)
    assert result.returncode == 0, result.output
    assert "half-written" not in page.read_text()
    assert not (tiny_site.html / ".tipsite-build-incomplete").exists()


@pytest.mark.parametrize("field,value,message", [
    ("low", float("nan"), "key low must be a finite number"),
    ("high", float("inf"), "key high must be a finite number"),
])
def test_non_finite_key_figures_are_refused(tiny_build, good_tip, field, value, message):
    broken = good_tip.replace("report(decision, RULE)",
                              f'decision["key"] = {{"name": "k", "value": 1.0, "unit": "x", "{field}": float("{value}")}}\n'
                              "report(decision, RULE)")
    result = tiny_build({"correctness/tip_tiny.py": broken})
    assert result.returncode != 0
    assert message in result.output or "plain data" in result.output


def test_metadata_lines_inside_strings_are_not_metadata(tiny_build, good_tip):
    text = good_tip.replace("x = torch.tensor(", 'NOTE = """\n# sphinx_gallery_tips_kind = "speed"\n"""\nx = torch.tensor(')
    result = tiny_build({"correctness/tip_tiny.py": text})
    assert result.returncode == 0, result.output
    assert "given twice" not in result.output


def test_a_cuda_only_tip_on_a_cpu_build_shows_no_cpu_verdict(tiny_build):
    body = '''\
    import torch

    RULE = "holds if CUDA is there"
    verdicts = {}
    if torch.cuda.is_available():
        verdicts["cuda"] = decide("cuda", [("holds", {})], facts={"cuda": True})
    else:
        print("Skipped: no CUDA device in this build")
    RESULT = {"rule": RULE, "verdicts": verdicts, "measurements": [],
              "skipped": ["no CUDA"]}
    '''
    result = tiny_build({"speed/tip_gpu.py": make_tip(body, devices='["cuda"]')})
    assert result.returncode == 0, result.output
    page = result.page("speed", "tip_gpu")
    header = page[page.index("tip-header"):page.index("Figures and provenance")]
    assert not re.search(r"tip-verdict-(holds|depends|outdated|wrong|inconclusive)", header)
    assert re.search(r"CUDA:\s*not measured\s*The tip runs on CUDA; no run of it there has decided a verdict yet",
                     re.sub(r"<[^>]+>", "", header))
    assert "CPU:" not in re.sub(r"<[^>]+>", "", header)


def test_a_failed_build_keeps_failing_until_its_cause_is_fixed(tiny_site, good_tip):
    """A page that warns fails the build (-W); Sphinx has saved what it read, so an unchanged
    rebuild would skip that page, warn nothing and pass. It must fail again, then pass once fixed.
    (The page is one nothing else refers to: such a page is neither read nor written again.)"""
    tiny_site.write({"correctness/tip_tiny.py": good_tip})
    notes = tiny_site.src / "notes.rst"
    notes.write_text(":orphan:\n\nNotes\n=====\n\nSee :doc:`/nowhere`.\n", encoding="utf-8")
    first = tiny_site.build(in_process=False)
    assert first.returncode != 0 and "nowhere" in first.output
    again = tiny_site.build(in_process=False)
    assert again.returncode != 0 and "nowhere" in again.output, "a rebuild forgot the failure"
    notes.write_text(":orphan:\n\nNotes\n=====\n\nNothing to see.\n", encoding="utf-8")
    fixed = tiny_site.build(in_process=False)
    assert fixed.returncode == 0, fixed.output[-3000:]
