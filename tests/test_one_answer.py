"""One machine class, one torch release, one tip version: one answer in every view (issue 31.2).

The build and the torch-release matrix both run the tips on this machine. For each tip that both
ran in their current version, on the same machine class and torch release, the built views must
show each run's own verdict: the tip page's "Measured on" table (one row per run), the
compatibility page's cell, and the checker's evidence for that release; and where the two runs
decided differently (neither was busy), the page must say that they disagree, with both.
"""

from __future__ import annotations

import html
import json
import re

import pytest

from conf import settings
from tipsite import compat, records
from tipsite.checker import shipdata
from tipsite.sphinxext import view

pytest_plugins = ["_browser"]  # the html_dir fixture: the built site

MATRIX = "torch-version matrix, torch {release}"


def _rows(page: str) -> list[dict[str, str]]:
    """The "Measured on" table of a built tip page, one dict per row."""
    table = re.search(r'<table class="tip-measured-on[^"]*">(.*?)</table>', page, re.S)
    assert table, "the page has no Measured on table"
    heads = [html.unescape(re.sub(r"<[^>]+>", "", h)).strip()
             for h in re.findall(r"<th[^>]*>(.*?)</th>", table.group(1), re.S)]
    rows = []
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.S)[1:]:
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
                 for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        rows.append(dict(zip(heads, cells)))
    return rows


def _pairs(tips):
    """(tip, this build's record, the matrix's record, release) for every tip both ran in its
    current version on this machine class and torch release."""
    release = settings.TORCH_DEFAULT.split("+")[0]
    run = compat.load(release)
    if run is None:
        return release, []
    found = []
    for tip in tips:
        this = records.read_record(settings.TIPS_OUT_DIR / tip.topic / tip.path.name)
        theirs = run["records"].get(tip.name)
        version = records.tip_version(tip.path)
        if not this or not theirs or not records.is_current(theirs, version) \
                or not records.is_current(this, version):
            continue
        if this["torch"].split("+")[0] != release:
            continue
        for device in set(this["verdicts"]) & set(theirs["verdicts"]):
            if records.machine_class(this, device) == records.machine_class(theirs, device):
                found.append((tip, device, this, theirs))
    return release, found


def test_the_build_and_the_matrix_show_one_answer_each_and_say_when_they_differ(html_dir, tips):
    release, pairs = _pairs(tips)
    if not pairs:  # the matrix ran on another machine class, or on older versions of the tips
        pytest.skip(f"no tip has current runs of the build and the torch {release} matrix "
                    "on one machine class")
    evidence = shipdata.build()["tips"]
    compat_page = (html_dir / "reference" / "compat.html").read_text(encoding="utf-8")
    problems, differing = [], []
    for tip, device, this, theirs in pairs:
        page = (html_dir / "tips" / tip.topic / f"{tip.name}.html").read_text(encoding="utf-8")
        rows = _rows(page)
        word = records.device_word(device)
        mine = [r for r in rows if r["from"] == "this build" and r["device"] == word]
        matrix = [r for r in rows if r["from"] == MATRIX.format(release=release) and r["device"] == word]
        want_this, want_matrix = this["verdicts"][device]["verdict"], theirs["verdicts"][device]["verdict"]
        if [r["verdict"] for r in mine] != [view.verdict_word(want_this)]:
            problems.append(f"{tip.name}: the build's row reads {[r['verdict'] for r in mine]}, "
                            f"its record {want_this}")
        if [r["verdict"] for r in matrix] != [view.verdict_word(want_matrix)]:
            problems.append(f"{tip.name}: the matrix's row reads {[r['verdict'] for r in matrix]}, "
                            f"its record {want_matrix}")
        decided = {want_this, want_matrix}.isdisjoint(view.NOT_DECIDED)
        if decided and want_this != want_matrix:
            differing.append(tip.name)
            said = html.unescape(re.sub(r"<[^>]+>", "", page))
            if "runs of this version disagree" not in said or f"torch {release}" not in said:
                problems.append(f"{tip.name}: the build says {want_this}, the matrix {want_matrix}, "
                                "and the page does not say they disagree")
        # the checker's evidence for this release counts the matrix's run (the build is not shipped)
        state = (((evidence.get(tip.name) or {}).get("states") or {}).get(device) or {}).get(
            ".".join(release.split(".")[:2]))
        if state and state.get("set", "").endswith(compat.data_path(release).name) \
                and state["verdict"] != want_matrix:
            problems.append(f"{tip.name}: the checker's evidence says {state['verdict']}, "
                            f"the matrix's record {want_matrix}")
        if tip.name not in compat_page:
            problems.append(f"{tip.name}: not on the compatibility page")
    assert not problems, "\n".join(problems)
    print(f"{len(pairs)} runs compared on torch {release}; the build and the matrix decided "
          f"differently for {len(differing)}: {', '.join(differing) or 'none'}")


def test_the_matrix_file_holds_no_verdict_of_its_own():
    """A release's run writes its verdicts once, in its result set: a matrix file written since
    holds none (older files, written before the sets, keep theirs and are marked as such)."""
    for release in settings.TORCH_MATRIX:
        path = compat.data_path(release)
        if not compat.set_path(path).exists():
            continue
        raw = json.loads(path.read_text(encoding="utf-8"))
        typed = {k: e["verdicts"] for k, e in raw["tips"].items() if e.get("verdicts")}
        assert not typed, f"{path.name}: verdicts outside its result set: {sorted(typed)[:5]}"
