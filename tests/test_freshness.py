"""The pages a test reads reflect every source they depend on: the tips, and the build's own hooks
and page layer (tipsite/). A tiny site is built with a copy of the build's programs, the copy is
edited, and the next incremental build must show the edit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, TINYSITE, build_env

from conf import settings
from tipsite import build, gallery, records


class CopiedBuild:
    """tests/tinysite built with a copy of conf/ and tipsite/ that the test may edit."""

    def __init__(self, root: Path, tip: str):
        self.code = root / "code"
        for name in ("conf", "tipsite"):
            shutil.copytree(ROOT / name, self.code / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        self.src = root / "src"
        shutil.copytree(TINYSITE, self.src)
        topic = self.src / "gallery" / "correctness"
        topic.mkdir()
        (topic / "README.rst").write_text("correctness\n-----------\n")
        (topic / "tip_tiny.py").write_text(tip)
        self.html = root / "html"
        self.doctrees = root / "doctrees"

    def build(self) -> str:
        cmd = build.sphinx_command(src=self.src, out=self.html, doctrees=self.doctrees, quiet=True)
        proc = subprocess.run(cmd, cwd=self.src, capture_output=True, text=True, timeout=600,
                              env=build_env(PYTHONPATH=str(self.code)))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return (self.html / "tips" / "correctness" / "tip_tiny.html").read_text(encoding="utf-8")

    def edit(self, rel: str, old: str, new: str) -> None:
        path = self.code / rel
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{rel} no longer holds {old!r}"
        path.write_text(text.replace(old, new), encoding="utf-8")

    def record_mtime(self) -> int:
        return (self.src / "tips" / "correctness" / f"tip_tiny{records.RECORD_SUFFIX}").stat().st_mtime_ns


def test_a_changed_template_rereads_every_page(tmp_path, good_tip):
    site = CopiedBuild(tmp_path, good_tip)
    assert "Figures and provenance" in site.build()
    site.edit("tipsite/sphinxext/templates/tip_footer.rst.jinja",
              ".. rubric:: Figures and provenance", ".. rubric:: Measured figures")
    page = site.build()
    assert 'class="rubric"' in page
    assert "Measured figures</p>" in page and "Figures and provenance</p>" not in page


def test_changed_hooks_run_every_tip_again(tmp_path, good_tip):
    site = CopiedBuild(tmp_path, good_tip)
    site.build()
    before = site.record_mtime()
    site.build()
    assert site.record_mtime() == before, "a rebuild with nothing changed ran the tip"
    site.edit("tipsite/gallery.py", "# --- hooks", "# --- hooks (edited)")
    site.build()
    assert site.record_mtime() != before, "the edited hooks did not run the tip again"


def test_the_reset_hook_restores_the_build_s_thread_count():
    """One tip's set_num_threads(1) must not leak into the next (a record once said 2 threads
    where the tip ran with 1): the reset before each tip puts the build's setting back."""
    import torch

    torch.set_num_threads(1)
    conf = {"gallery_dirs": "tips", "src_dir": str(Path(settings.DOCS_DIR))}
    try:
        gallery.reset_torch(conf, None, "before")
        assert torch.get_num_threads() == settings.TIPS_THREADS
    finally:
        torch.set_num_threads(settings.TIPS_THREADS)


def test_a_real_tip_with_its_verdict_written_by_hand_is_refused(tmp_path):
    """tip_arange_indexing with its verdict overwritten after decide() by one its facts do not
    give: the re-derivation from its recorded facts refuses it."""
    from tipsite import tipcheck, tipmeta

    path = settings.GALLERY_DIR / "correctness" / "tip_arange_indexing.py"
    honest, report = tipcheck.check(path)
    assert not honest, honest
    truth = report["verdicts"]["cpu"]["verdict"]
    forged = next(v for v in tipmeta.vocab()["verdicts"] if v != truth)
    source = path.read_text(encoding="utf-8")
    assert "report(decision, RULE)" in source
    tip = tmp_path / "correctness" / path.name
    tip.parent.mkdir()
    tip.write_text(source.replace("report(decision, RULE)",
                                  f'decision["verdict"] = "{forged}"\nreport(decision, RULE)'))
    problems, _ = tipcheck.check(tip)
    assert f"the verdict is '{forged}' but the recorded evidence gives '{truth}'" in " ".join(problems)


def test_the_site_fixture_builds_with_this_checkout_s_programs():
    """The site fixture runs Sphinx with this checkout first on PYTHONPATH (not an installed copy)."""
    code = "import tipsite, conf; print(tipsite.__file__); print(conf.__file__)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=build_env(),
                          cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert all(line.startswith(str(ROOT)) for line in proc.stdout.split()), proc.stdout
