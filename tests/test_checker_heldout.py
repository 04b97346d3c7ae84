"""The held-out set stays held out: its code never reaches the rules' own test data, and the
docs publish its table exactly as ``tests/checker_data/heldout.json`` gives it (or say that it
is not yet labelled, with no number)."""

from __future__ import annotations

from pathlib import Path

from tipsite.checker import labels

ROOT = Path(__file__).resolve().parents[1]


def test_held_out_excerpts_are_not_in_the_rules_test_data():
    heldout = labels.load_heldout()
    if heldout is not None:
        assert all(f.get("excerpt") for f in heldout.findings), "every held-out finding carries its excerpt"
        found = labels.leaks(heldout)
        assert not found, "held-out code in the rules' own test data:\n" + "\n".join(found)
    # the check itself finds a copied line (so that it can fail)
    fake = labels.Labels(findings=[{"excerpt": "  12|    total_loss = criterion(outputs, targets) * scale\n"}])
    assert labels.leaks(fake, {"tests/x.py": "x = 1\n    total_loss = criterion(outputs, targets) * scale\n"})
    assert not labels.leaks(fake, {"tests/x.py": "import torch\n"})
    # in a tuning excerpt (cut from another codebase) one shared line is an idiom; two lines
    # next to each other in both are copied code
    pair = labels.Labels(findings=[{"excerpt": "  12|    total_loss = criterion(outputs, targets) * scale\n"
                                                "  13|    total_loss.backward(retain_graph=keep_graph)\n"
                                                "  14|)\n"}])
    cut = str(labels.EXCERPTS.relative_to(ROOT)) + "/o+r/x.py.txt"
    idiom = "  7|    total_loss = criterion(outputs, targets) * scale\n  8|)\n"
    assert not labels.leaks(pair, {cut: idiom}) and labels.leaks(pair, {"tests/x.py": idiom})
    copied_block = "  7|    total_loss = criterion(outputs, targets) * scale\n  9|    total_loss.backward(retain_graph=keep_graph)\n"
    assert labels.leaks(pair, {cut: copied_block})
    # a held-out codebase moved into the tuning set (spent) may be in the tuning excerpts; no other
    moved = labels.Labels(findings=[{"repo": "o/r", "excerpt": fake.findings[0]["excerpt"]}])
    copied = {"tests/x.py": "    total_loss = criterion(outputs, targets) * scale\n"}
    assert not labels.leaks(moved, copied, spent={"o/r"}) and labels.leaks(moved, copied, spent={"o/s"})


def test_the_docs_publish_the_held_out_table_or_say_it_is_not_labelled():
    heldout = labels.load_heldout()
    page = (ROOT / "docs" / "reference" / "checker.rst").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert labels.render_heldout_rst(heldout) in page, "run python -m tipsite.checker.labels table --write"
    assert labels.render_heldout_markdown(heldout) in readme, "run python -m tipsite.checker.labels table --write"
    if heldout is None:
        section = page[page.index(labels.HELD_BEGIN):page.index(labels.HELD_END)]
        assert "Not yet labelled" in section and "%" not in section


def test_a_spent_rounds_misses_stay_with_the_tuning_labels(tmp_path):
    """What a held-out labeller saw and no rule reported moves into the tuning set with its
    round, and survives a rewrite of labels.json (dump once dropped every key it did not know)."""
    tuning = labels.load()
    repos = {c["repo"] for c in tuning.corpora}
    assert tuning.misses and all(m["repo"] in repos and m["round"] and m["what"] for m in tuning.misses)
    out = tmp_path / "labels.json"
    labels.dump(tuning, out)
    assert labels.load(out).misses == tuning.misses


def test_an_excerpt_keeps_the_comments_its_findings_need():
    text = "import torch\n\n# needs cuda\nx = torch.ones(2)\ny = 3\n"
    # a finding that needs only the statement it is on: the comment and the rest go
    assert labels.minimize(text, lambda t: "torch.ones(2)" in t) == {4}
    # one that also reads the file's words (as text facts do): the comment stays
    assert labels.minimize(text, lambda t: "torch.ones(2)" in t and "cuda" in t) == {3, 4}


def test_the_excerpt_tool_reads_a_project_with_a_folder_named_like_a_python_file(tmp_path):
    """fastMRI has a folder named ``unet_reproduce_20201111.py`` beside its inference scripts:
    the excerpt tool read it as a file and stopped (IsADirectoryError) when round 14 moved."""
    (tmp_path / "serve.py").write_text("import torch\nmodel.load_state_dict(torch.load(path))\n", encoding="utf-8")
    (tmp_path / "unet_reproduce_20201111.py").mkdir()
    (tmp_path / "unet_reproduce_20201111.py" / "run.py").write_text("x = 1\n", encoding="utf-8")
    facts = labels._package_facts(tmp_path, ["serve.py"])
    assert facts == {"serve.py": "model.load_state_dict(torch.load(path))\n"}
