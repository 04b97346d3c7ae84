"""The CUDA build on a lent GPU machine: one command per slot, results under ``$OUT``.

A lent machine has no network and its own Python 3.12 and CUDA torch (with numpy, matplotlib
and pillow), no Sphinx; the working tree travels with it, plus up to 8 git-ignored paths named
by the caller (64 MiB in all); what the command writes under ``$OUT`` comes back. The procedure
(docs/how_built.rst, "CUDA results") is two commands of at most 300 s each::

    .ci/gpu-run first     # shard 1 of the CUDA plan of the tips whose CUDA record is not current
    .ci/gpu-run rest      # every tip still not current: shard 2, or what a cut command left

Each command installs the carried wheels (``.whl/``, :data:`WHEELS`) into ``build/gpu-site`` if
Sphinx is missing, works out which tips to run, builds the site with ``TIPS_ONLY`` naming them
(:mod:`tipsite.shards`), and, every few seconds while Sphinx runs and once at the end, exports
the records of the tips that finished into ``$OUT`` (so a command cut short by its limit still
returns what it measured). It stops Sphinx at ``--deadline`` seconds. Which tips still need a
run is decided from records, never from a list: a tip is done when a result set (the committed
ones in ``docs/_data/results``, the returned ones carried back in ``.gpu-done/``) or this
machine's own build holds a CUDA record of its current version (:func:`tipsite.records.is_current`).

``collect`` merges the returned sets into one per machine for committing; ``--fake-cuda``
rehearses all of it on :mod:`tipsite.fakecuda` (its figures mean nothing and are never
committed).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from conf import settings
from tipsite import build, cudacost, records, shards, tipmeta

WHEELS = settings.ROOT / ".whl"           # carried: the docs wheels for Python 3.12
DONE_DIR = settings.ROOT / ".gpu-done"     # carried: result sets returned by earlier commands
SITE_PACKAGES = settings.BUILD_DIR / "gpu-site"
WORK_DIR = settings.BUILD_DIR / "gpu"
PARTS = ("first", "rest")
DEADLINE_S = 270.0      # Sphinx is stopped after this many seconds of the command
EXPORT_EVERY_S = 10.0   # how often finished tips' records are written to $OUT while Sphinx runs
RESERVE_S = 15.0        # kept for the last export and the pages' archive
FAKE_BOOT = ("import sys\nfrom tipsite import fakecuda\nfakecuda.install()\n"
             "from sphinx.cmd.build import main\nsys.exit(main(sys.argv[1:]))\n")


class GpuRunError(RuntimeError):
    """The command cannot go on; the message says why."""


# --- which tips -------------------------------------------------------------------------------

def cuda_record(record: dict | None, version: dict[str, str]) -> bool:
    """A CUDA record (a CUDA host, a CUDA decision) of this version of the tip."""
    return bool(record) and "cuda" in (record.get("hosts") or {}) \
        and "cuda" in (record.get("verdicts") or {}) and records.is_current(record, version)


def set_files(folders: list[Path]) -> list[Path]:
    return sorted(p for f in folders if Path(f).is_dir() for p in Path(f).glob("*.json"))


def done_tips(tips: list[tipmeta.Tip], set_folders: list[Path], tips_out: Path) -> dict[str, str]:
    """The CUDA tips that need no run, each with where its current CUDA record is."""
    versions = {t.name: records.tip_version(t.path) for t in tips}
    found: dict[str, str] = {}
    for path in set_files(set_folders):
        try:
            result_set = records.load_set(path)
        except records.RecordError:
            continue  # an unreadable set counts for nothing; vetting names it
        for record in result_set["records"]:
            name = record.get("tip")
            if name in versions and name not in found and cuda_record(record, versions[name]):
                found[name] = path.name
    for tip in tips:
        if tip.name not in found and finished(tip, tips_out):
            found[tip.name] = "this machine's build"
    return found


def finished(tip: tipmeta.Tip, tips_out: Path) -> bool:
    """This build executed the tip's current source to the end and left a current CUDA record."""
    topic = Path(tips_out) / tip.path.parent.name
    md5 = topic / f"{tip.name}.py.md5"
    if not md5.exists() or md5.read_text().strip() != shards.source_md5(tip.path):
        return False
    try:
        record = records.read_record(topic / f"{tip.name}.py")
    except records.RecordError:
        return False
    return cuda_record(record, records.tip_version(tip.path))


def choose(part: str, pending: list[str], estimates: dict[str, float]) -> list[str]:
    """``first``: shard 1 of the two-way CUDA plan of ``pending``; ``rest``: all of them."""
    if part == "first":
        return shards.plan(pending, cudacost.SLOT_COMMANDS, estimates)[0]
    return sorted(pending)


# --- the command ------------------------------------------------------------------------------

class Run:
    """One command on the lent machine, writing everything it has to ``out`` as it goes."""

    def __init__(self, part: str, out: Path, *, docs: Path, gallery: Path, tips_out: Path,
                 set_folders: list[Path], deadline: float, fake_cuda: bool,
                 work: Path = WORK_DIR, estimates: dict[str, float] | None = None,
                 export_every: float = EXPORT_EVERY_S) -> None:
        self.part, self.out = part, Path(out)
        self.docs, self.gallery, self.tips_out = Path(docs), Path(gallery), Path(tips_out)
        self.set_folders, self.deadline, self.fake_cuda = set_folders, deadline, fake_cuda
        self.work = Path(work)
        self.estimates = cudacost.load_estimates() if estimates is None else estimates
        self.export_every = export_every
        self.t0 = time.monotonic()
        self.stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        self.label = f"{part}-{self.stamp}"
        self.summary: dict = {"part": part, "started": self.stamp, "fake_cuda": fake_cuda,
                              "deadline_s": deadline, "estimates_are": "estimates, not measurements"}
        self.out.mkdir(parents=True, exist_ok=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def log(self, text: str) -> None:
        line = f"[{self.elapsed():6.1f}s] {text}"
        print(line, flush=True)
        with open(self.out / f"steps-{self.label}.log", "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def save_summary(self) -> None:
        self.summary["elapsed_s"] = round(self.elapsed(), 1)
        (self.out / f"summary-{self.label}.json").write_text(
            json.dumps(self.summary, indent=1) + "\n", encoding="utf-8")

    def env_facts(self) -> subprocess.Popen:
        """Start writing what this machine is (Python, torch, GPU, nvidia-smi) to ``out``;
        it runs beside the build (a torch import and CUDA start of its own)."""
        code = ("import sys, torch\nprint('python', sys.version.split()[0])\n"
                "print('torch', torch.__version__, 'cuda', torch.version.cuda)\n"
                "print('device', torch.cuda.get_device_name() if torch.cuda.is_available() else None)\n"
                "import numpy, matplotlib; print('numpy', numpy.__version__, 'matplotlib', "
                "matplotlib.__version__)\n"
                "import shutil, subprocess\nsmi = shutil.which('nvidia-smi')\n"
                "print(subprocess.run([smi], capture_output=True, text=True).stdout if smi else "
                "'no nvidia-smi')\n")
        boot = "from tipsite import fakecuda\nfakecuda.install()\n" if self.fake_cuda else ""
        facts = open(self.out / f"env-{self.label}.txt", "w", encoding="utf-8")
        return subprocess.Popen([sys.executable, "-c", boot + code], stdout=facts,
                                stderr=subprocess.STDOUT, env=self.env(), cwd=settings.ROOT)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        paths = [str(SITE_PACKAGES)] if SITE_PACKAGES.is_dir() else []
        paths.append(str(settings.ROOT))
        env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
        env["PYTHONUNBUFFERED"] = "1"
        env.pop(shards.ENV_VAR, None)
        return env

    def install_wheels(self) -> None:
        """The carried wheels into ``build/gpu-site``, unless this Python has Sphinx already."""
        probe = subprocess.run([sys.executable, "-c", "import sphinx, sphinx_gallery, furo"],
                               env=self.env(), capture_output=True, timeout=120)
        if probe.returncode == 0:
            self.log("Sphinx is importable: no wheels installed")
            return
        wheels = sorted(WHEELS.glob("*.whl"))
        if not wheels:
            raise GpuRunError(f"no Sphinx here and no wheels in {WHEELS}: download them first "
                              "(docs/how_built.rst, 'CUDA results') and carry .whl")
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                               "--no-compile", "--no-cache-dir", "--target", str(SITE_PACKAGES),
                               *map(str, wheels)], capture_output=True, text=True, timeout=180)
        (self.out / f"pip-{self.label}.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
        if proc.returncode:
            raise GpuRunError(f"pip could not install the wheels (exit {proc.returncode}): "
                              f"{proc.stderr[-800:]}")
        self.log(f"installed {len(wheels)} wheels into {SITE_PACKAGES}")

    def sphinx(self, names: list[str]) -> tuple[int | None, bool]:
        """Build with only ``names`` executing; export as tips finish. (exit, cut short)."""
        where = self.work
        args = build.sphinx_args(src=self.docs, out=where / "html", doctrees=where / "doctrees")
        head = [sys.executable, "-c", FAKE_BOOT] if self.fake_cuda else [sys.executable, "-m", "sphinx"]
        env = {**self.env(), shards.ONLY_VAR: ",".join(names)}
        log = open(self.out / f"sphinx-{self.label}.log", "w", encoding="utf-8")
        proc = subprocess.Popen([*head, *args], cwd=self.docs, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.summary["sphinx_pid"] = proc.pid  # its own process group, with the tips' children
        self.save_summary()
        cut = False
        try:
            while True:
                left = self.deadline - RESERVE_S - self.elapsed()
                try:
                    proc.wait(timeout=max(0.1, min(self.export_every, left)))
                    break
                except subprocess.TimeoutExpired:
                    pass
                self.export(names)
                if self.deadline - RESERVE_S - self.elapsed() <= 0:
                    cut = True
                    self.log("deadline: stopping Sphinx; what finished is exported")
                    os.killpg(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                    break
        finally:
            log.close()
        return (None if cut else proc.returncode), cut

    def export(self, names: list[str]) -> list[str]:
        """Write the records of the tips in ``names`` that finished to ``out``; return them."""
        tips = {t.name: t for t in tipmeta.read_all(self.gallery)}
        done = [n for n in names if finished(tips[n], self.tips_out)]
        self.summary["done"] = done
        self.summary["missing"] = [n for n in names if n not in done]
        seconds = {}
        for n in done:
            cost = self.tips_out / tips[n].path.parent.name / f"{n}.cost.json"
            if cost.exists():
                seconds[n] = round(float(json.loads(cost.read_text(encoding="utf-8"))["time"]), 2)
        self.summary["seconds"] = seconds
        if done:
            first = records.read_record(self.tips_out / tips[done[0]].path.parent.name / f"{done[0]}.py")
            self.summary["gpu"] = first["hosts"]["cuda"]["name"]
            self.summary["date"] = first["date"][:10]
            for old in self.out.glob(f"*-{self.label}.json"):
                if not old.name.startswith("summary-"):
                    old.unlink()
            records.export(self.out, self.tips_out, done, suffix=f"-{self.label}",
                           gallery_dir=self.gallery)
        self.save_summary()
        return done

    def pages(self, names: list[str]) -> None:
        """What each tip printed: its executed page source (``.rst``) and record, one archive."""
        tips = {t.name: t for t in tipmeta.read_all(self.gallery)}
        with tarfile.open(self.out / f"pages-{self.label}.tgz", "w:gz") as tar:
            for n in names:
                topic = self.tips_out / tips[n].path.parent.name
                for suffix in (".rst", records.RECORD_SUFFIX, ".cost.json"):
                    path = topic / f"{n}{suffix}"
                    if path.exists():
                        tar.add(path, arcname=f"{topic.name}/{path.name}")

    def __call__(self) -> int:
        self.log(f"part {self.part}; deadline {self.deadline:.0f} s; results to {self.out}")
        self.install_wheels()
        facts = self.env_facts()
        try:
            return self.build()
        finally:
            try:
                facts.wait(timeout=30)
            except subprocess.TimeoutExpired:
                facts.kill()

    def build(self) -> int:
        tips = [t for t in tipmeta.read_all(self.gallery) if "cuda" in t.devices]
        done = done_tips(tips, self.set_folders, self.tips_out)
        pending = [t.name for t in tips if t.name not in done]
        estimates = self.estimates
        names = choose(self.part, pending, estimates)
        self.summary.update({"cuda_tips": len(tips), "already_current": done, "pending": pending,
                             "planned": names,
                             "planned_estimate_s": round(sum(estimates.get(n, 0.0) for n in names), 1)})
        self.save_summary()
        self.log(f"{len(tips)} CUDA tips: {len(done)} current, {len(pending)} to run; this command "
                 f"runs {len(names)} (estimated {self.summary['planned_estimate_s']} s, an estimate)")
        if not names:
            self.log("nothing to run")
            return 0
        code, cut = self.sphinx(names)
        self.log(f"Sphinx: {'stopped at the deadline' if cut else f'exit {code}'}")
        done_now = self.export(names)
        self.pages(names)
        self.summary["sphinx_exit"], self.summary["cut_short"] = code, cut
        self.save_summary()
        missing = self.summary["missing"]
        self.log(f"{len(done_now)} of {len(names)} tips finished with a current CUDA record"
                 + (f"; missing: {' '.join(missing)} (run `rest` again)" if missing else ""))
        return 0 if not missing and code == 0 else 1


# --- back here: one set per machine for committing ------------------------------------------

def collect(files: list[Path], out_dir: Path) -> list[Path]:
    """Merge returned result sets into one set per build configuration, a tip's latest record
    winning, written as ``<label>-<date>.json`` in ``out_dir``."""
    latest: dict[tuple, dict[str, dict]] = {}
    for path in files:
        for record in records.load_set(path)["records"]:
            group = latest.setdefault(records.run_key(record), {})
            old = group.get(record["tip"])
            if old is None or record["date"] >= old["date"]:
                group[record["tip"]] = record
    written = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for group in latest.values():
        recs = list(group.values())
        day = max(r["date"] for r in recs)[:10]
        path = out_dir / f"{records.set_label(recs[0])}-{day}.json"
        records.write_record(path, records.make_set(recs))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tipsite.gpurun", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for part in PARTS:
        p = sub.add_parser(part, help=("shard 1 of the CUDA plan of the tips not current" if part == "first"
                                       else "every CUDA tip not current (shard 2, or what was cut)"))
        p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or WORK_DIR / "out"),
                       help="where results go (default: $OUT)")
        p.add_argument("--deadline", type=float, default=DEADLINE_S,
                       help=f"stop Sphinx after this many seconds (default {DEADLINE_S:.0f})")
        p.add_argument("--fake-cuda", action="store_true", help="rehearse on tipsite/fakecuda.py")
        p.add_argument("--docs", type=Path, default=settings.DOCS_DIR, help=argparse.SUPPRESS)
        p.add_argument("--gallery", type=Path, default=settings.GALLERY_DIR, help=argparse.SUPPRESS)
        p.add_argument("--tips-out", type=Path, default=settings.TIPS_OUT_DIR, help=argparse.SUPPRESS)
        p.add_argument("--work", type=Path, default=WORK_DIR, help=argparse.SUPPRESS)
        p.add_argument("--estimates", type=Path, help=argparse.SUPPRESS)  # JSON {tip: s}, tests
        p.add_argument("--export-every", type=float, default=EXPORT_EVERY_S, help=argparse.SUPPRESS)
        p.add_argument("--sets", type=Path, action="append",
                       help="folders of result sets whose current CUDA records count as done "
                            "(default: docs/_data/results and .gpu-done)")
    col = sub.add_parser("collect", help="merge returned sets into one per machine, for committing")
    col.add_argument("files", nargs="+", type=Path)
    col.add_argument("--out", type=Path, default=records.DATA_DIR)
    pl = sub.add_parser("plan", help="the CUDA plan and its estimated duration (estimates)")
    pl.add_argument("--all", action="store_true", help="every CUDA tip, current or not")
    args = parser.parse_args(argv)
    try:
        if args.command == "collect":
            for path in collect(args.files, args.out):
                print(f"result set: {path}")
            return 0
        if args.command == "plan":
            tips = [t for t in tipmeta.read_all() if "cuda" in t.devices]
            done = {} if args.all else done_tips(tips, [records.DATA_DIR, DONE_DIR], settings.TIPS_OUT_DIR)
            names = [t.name for t in tips if t.name not in done]
            print(cudacost.describe(names))
            return 0
        run = Run(args.command, args.out, docs=args.docs, gallery=args.gallery, tips_out=args.tips_out,
                  set_folders=args.sets or [records.DATA_DIR, DONE_DIR], deadline=args.deadline,
                  fake_cuda=args.fake_cuda, work=args.work, export_every=args.export_every,
                  estimates=(json.loads(args.estimates.read_text(encoding="utf-8"))
                             if args.estimates else None))
        return run()
    except (GpuRunError, records.RecordError, shards.ShardError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
