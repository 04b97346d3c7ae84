"""The metadata validator rejects every kind of malformed tip, naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tipsite import records, tipmeta


def write(tmp_path: Path, text: str, topic: str = "speed", name: str = "tip_tiny.py") -> Path:
    path = tmp_path / topic / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_good_tip_is_read(tmp_path, good_tip):
    tip = tipmeta.read_tip(write(tmp_path, good_tip))
    assert tip.title == "A tiny tip"
    assert tip.claims == ("S4-4",) and tip.tags == ("autograd",) and tip.kind == "behaviour"


BROKEN = {
    "no title": (('"""\nA tiny tip\n==========\n', '"""\nno underline here\n'), "title"),
    "short underline": (("==========", "===="), "title"),
    "unknown claim id": (('["S4-4"]', '["S9-99"]'), "sphinx_gallery_tips_claims: unknown claim id 'S9-99'"),
    "claim id shape": (('["S4-4"]', '["inference"]'), "ids look like S0-5"),
    "unknown tag": (('["autograd"]', '["fast"]'), "sphinx_gallery_tips_tags: unknown tag 'fast'"),
    "bad version": (('"2.0"', '"two"'), "sphinx_gallery_tips_min_torch: bad version string"),
    "version not a string": (('"2.0"', "2.0"), "sphinx_gallery_tips_min_torch: must be a string"),
    "unknown device": (('["cpu"]', '["tpu"]'), "sphinx_gallery_tips_devices: unknown device 'tpu'"),
    "unknown kind": (('"behaviour"', '"vibes"'), "sphinx_gallery_tips_kind: unknown kind 'vibes'"),
    "missing field": (('# sphinx_gallery_tips_kind = "behaviour"\n', ""), "sphinx_gallery_tips_kind: missing"),
    "not a literal": (('["autograd"]', "[autograd"), "sphinx_gallery_tips_tags: not a Python literal"),
    "unknown field": (("# sphinx_gallery_tips_kind", "# sphinx_gallery_tips_colour = 'red'\n# sphinx_gallery_tips_kind"),
                      "sphinx_gallery_tips_colour: unknown field"),
    "empty tags": (('["autograd"]', "[]"), "sphinx_gallery_tips_tags: must not be empty"),
    "takeaway two lines": (('"A tiny tip for tests."', '"one\\ntwo"'), "sphinx_gallery_tips_takeaway"),
    "no RESULT": (("RESULT = {", "OUTCOME = {"), "RESULT: the tip never defines"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_validator_rejects(tmp_path, good_tip, case):
    (old, new), expected = BROKEN[case]
    assert old in good_tip, f"test case {case!r} does not apply to the good tip"
    path = write(tmp_path, good_tip.replace(old, new, 1))
    with pytest.raises(tipmeta.TipError) as err:
        tipmeta.read_tip(path)
    message = str(err.value)
    assert expected in message
    assert "tip_tiny.py" in message.splitlines()[0]


def test_validator_rejects_unknown_topic(tmp_path, good_tip):
    with pytest.raises(tipmeta.TipError, match="topic folder: 'misc'"):
        tipmeta.read_tip(write(tmp_path, good_tip, topic="misc"))


def test_validator_rejects_duplicate_tip_names(tmp_path, good_tip):
    write(tmp_path, good_tip, topic="speed")
    write(tmp_path, good_tip, topic="memory")
    with pytest.raises(ValueError, match="tip_tiny also exists"):
        tipmeta.read_all(tmp_path)


def test_syntax_error_is_reported_with_the_file(tmp_path):
    with pytest.raises(tipmeta.TipError, match="tip_tiny.py: cannot be read as Python"):
        tipmeta.read_tip(write(tmp_path, "def (:\n"))


@pytest.mark.parametrize(
    "result, expected",
    [
        ({"rule": "r", "verdicts": {"cpu": {"verdict": "maybe"}}, "measurements": [], "skipped": []},
         "make it with decide()"),
        ({"rule": "", "verdicts": {}, "measurements": [], "skipped": []}, "rule"),
        ({"rule": "r", "measurements": [], "skipped": []}, "misses ['verdicts']"),
        ({"rule": "r", "verdicts": {"tpu": {}}, "measurements": [], "skipped": []}, "unknown device"),
        ({"rule": "r", "verdicts": {}, "measurements": [{"variant": "a"}], "skipped": []}, "measurements'][0]"),
        ({"rule": "r", "verdicts": {}, "measurements": [], "skipped": "none"}, "skipped"),
        ([], "must be a dict"),
    ],
)
def test_result_validation(result, expected):
    problems = records.result_problems(result)
    assert any(expected in p for p in problems), problems


def test_metadata_inside_a_string_is_not_metadata(tmp_path, good_tip):
    text = good_tip.replace("import torch\n\nx =", 'import torch\n\nDOC = """\n# sphinx_gallery_tips_kind = "speed"\n"""\nx =')
    assert text != good_tip
    assert tipmeta.read_tip(write(tmp_path, text)).kind == "behaviour"


@pytest.mark.parametrize("url", ["javascript:alert(1)", "http://example.com", "https://x.org/a b"])
def test_docs_links_must_be_plain_https(tmp_path, good_tip, url):
    text = good_tip.replace("# sphinx_gallery_tips_kind", f'# sphinx_gallery_tips_docs = ["{url}"]\n# sphinx_gallery_tips_kind')
    with pytest.raises(tipmeta.TipError, match="is not a plain https:// address"):
        tipmeta.read_tip(write(tmp_path, text))


def test_a_new_tip_from_the_template_is_a_valid_tip_that_runs(tmp_path):
    """`nox -s new_tip` writes a tip that already meets the contract and decides from a run."""
    from tipsite import newtip, tipcheck

    for topic in tipmeta.vocab()["topics"]:
        (tmp_path / topic).mkdir()
    path = newtip.new_tip("speed", "tip_try_me", gallery=tmp_path)
    problems, report = tipcheck.check(path)
    assert not problems, problems
    assert report["figures"] == 1 and "cpu" in report["verdicts"]
    with pytest.raises(ValueError, match="already exists"):
        newtip.new_tip("speed", "tip_try_me", gallery=tmp_path)


def test_the_coverage_page_names_real_tips_and_every_tuning_guide_claim_s_tip():
    """conf/coverage.toml: each entry names tips that exist, or says why none can run here; every
    tip examining a tuning-guide claim (S5) is listed, and every tip is listed somewhere or
    examines a seed article's claim."""
    from tipsite.sphinxext import coverage

    tips = {t.name: t for t in tipmeta.read_all()}
    listed = set()
    for group in coverage.load():
        for item in group["item"]:
            assert item.get("tips") or item.get("why"), f"{item['name']}: no tip and no reason"
            assert not (item.get("why") or "").lower().startswith("no tip yet"), (
                f"{item['name']}: 'no tip yet' is not a reason why no tip can run here")
            unknown = set(item.get("tips", [])) - set(tips)
            assert not unknown, f"{item['name']}: no such tip {sorted(unknown)}"
            listed |= set(item.get("tips", []))
    guide = {name for name, t in tips.items() if any(c.startswith("S5-") for c in t.claims)}
    assert guide and guide <= listed, f"tuning-guide tips missing from the coverage page: {sorted(guide - listed)}"
    new = {name for name, t in tips.items() if not any(c[:2] in ("S0", "S1", "S2", "S3", "S4") for c in t.claims)}
    assert new <= listed, f"tips answering no seed claim and missing from the coverage page: {sorted(new - listed)}"


def test_the_device_table_and_the_vocabulary_name_the_same_devices():
    """A device is one entry of tipsite/devices.py and one line of conf/vocab.toml [devices]:
    metadata is checked against the vocabulary, records and pages read the table."""
    from tipsite import devices

    assert list(devices.DEVICES) == records.devices()
