"""Sharded builds: split the tips over N runners and merge their outputs into one site.

``nox -s docs -- --shard K/N`` builds the site with ``TIPS_SHARD=K/N`` in the environment:
:func:`filename_pattern` then makes sphinx-gallery execute only shard K's tips (the other pages
are generated without output and are not published). After the build, ``pack`` copies the files
sphinx-gallery generated for shard K's tips, and their result set, to ``build/shards/KofN/``.

``nox -s docs_merge`` runs ``merge`` -- it checks that the packs are shards 1..N of one plan,
that every tip in the gallery was executed by exactly one of them from the current source, and
copies each tip's files into ``docs/tips/`` -- then builds the site with ``TIPS_SHARD=merged``:
nothing may execute, every MD5 matches, and the pages are those an unsharded build makes.

The plan is a greedy longest-first split by each tip's last recorded run time, read from the
committed file ``conf/timings.json`` (``python -m tipsite.shards timings --update`` refreshes it from
the last build's ``<tip>.cost.json`` files). Every runner therefore computes the same plan from
the same commit. A tip missing from the file counts as the median of the known times (1 s when
none is known).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import sys
from pathlib import Path

from conf import settings
from tipsite import build, records, tipmeta, tipsource

ENV_VAR = "TIPS_SHARD"
# TIPS_ONLY=tip_a,tip_b executes only the tips named (the CUDA build's incremental runs,
# tipsite/gpurun.py); it cannot be combined with TIPS_SHARD.
ONLY_VAR = "TIPS_ONLY"
MERGED = "merged"
TIMINGS_FILE = settings.CONF_DIR / "timings.json"
PACKS_DIR = settings.BUILD_DIR / "shards"
# Each shard's own Sphinx output and doctrees (its HTML is not published; the merge's is).
SHARD_BUILDS_DIR = settings.BUILD_DIR / "shard-builds"
DEFAULT_SECONDS = 1.0
NOTHING = r"(?!)"  # a pattern that matches no file: nothing executes
MANIFEST = "manifest.json"


class ShardError(ValueError):
    """A shard request or a set of packs cannot be used; the message says why."""


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/3"`` -> ``(2, 3)``."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m:
        raise ShardError(f"--shard wants K/N (e.g. 1/2), got {text!r}")
    k, n = int(m.group(1)), int(m.group(2))
    if not 1 <= k <= n:
        raise ShardError(f"--shard {text}: K must be between 1 and N")
    return k, n


def docs_options(posargs: list[str]) -> tuple[tuple[int, int] | None, bool, list[str]]:
    """``nox -s docs -- [--clean] [--shard K/N] [sphinx args]`` -> (shard, clean, the rest).

    A bad ``--shard`` raises here, before anything is deleted."""
    args = list(posargs)
    shard = None
    for i, arg in enumerate(args):
        if arg == "--shard" and i + 1 < len(args):
            shard = args[i + 1]
            del args[i:i + 2]
            break
        if arg.startswith("--shard="):
            shard = arg.split("=", 1)[1]
            del args[i]
            break
    parsed = parse_shard(shard) if shard is not None else None
    clean = "--clean" in args
    if clean:
        args.remove("--clean")
    return parsed, clean, args


def clean_outputs() -> None:
    """``--clean`` for a shard build: every tip output, but not the other shards' packs."""
    for path in (settings.TIPS_OUT_DIR, settings.DOCS_DIR / "generated", SHARD_BUILDS_DIR):
        shutil.rmtree(path, ignore_errors=True)


def pack_name(k: int, n: int) -> str:
    return f"{k}of{n}"


def load_timings(path: Path | None = None) -> dict[str, float]:
    path = Path(path or TIMINGS_FILE)
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {str(k): float(v) for k, v in data.get("seconds", {}).items()}


def costs(tips: list[str], timings: dict[str, float]) -> dict[str, float]:
    """Each tip's expected run time: recorded, else the median of the recorded ones."""
    known = [timings[t] for t in tips if t in timings]
    fallback = statistics.median(known) if known else DEFAULT_SECONDS
    return {t: timings.get(t, fallback) for t in tips}


def plan(tips: list[str], n: int, timings: dict[str, float] | None = None) -> list[list[str]]:
    """Split tip names into ``n`` shards of about equal total time, longest tip first.

    Deterministic: ties in time are broken by name, ties in load by shard number.
    """
    cost = costs(tips, load_timings() if timings is None else timings)
    shards: list[list[str]] = [[] for _ in range(n)]
    load = [0.0] * n
    for tip in sorted(tips, key=lambda t: (-cost[t], t)):
        i = min(range(n), key=lambda j: (load[j], j))
        shards[i].append(tip)
        load[i] += cost[tip]
    return [sorted(s) for s in shards]


def shard_tips(k: int, n: int, gallery_dir: Path | None = None,
               timings: dict[str, float] | None = None) -> list[str]:
    names = [p.stem for p in tipmeta.tip_files(gallery_dir)]
    return plan(names, n, timings)[k - 1]


def only_pattern(names: list[str]) -> str:
    """The ``filename_pattern`` that executes exactly the tips ``names`` (none if empty)."""
    if not names:
        return NOTHING
    return r"[\\/](?:" + "|".join(re.escape(t) for t in sorted(names)) + r")\.py$"


def parse_only(text: str, gallery_dir: Path | None = None) -> list[str]:
    """``TIPS_ONLY``'s tip names, each checked to be a tip of the gallery."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    known = {p.stem for p in tipmeta.tip_files(gallery_dir)}
    unknown = sorted(set(names) - known)
    if unknown:
        raise ShardError(f"{ONLY_VAR} names tips that are not in the gallery: {', '.join(unknown)}")
    return names


def filename_pattern(gallery_dir: Path | None = None, default: str = r"/tip_",
                     shard: str | None = None, only: str | None = None) -> str:
    """sphinx-gallery's ``filename_pattern`` for this build, from ``TIPS_SHARD``/``TIPS_ONLY``.

    Both unset: ``default`` (every tip executes). ``TIPS_SHARD=K/N``: only shard K's tips;
    ``merged``: none. ``TIPS_ONLY=a,b``: only the tips named.
    """
    shard = os.environ.get(ENV_VAR, "") if shard is None else shard
    only = os.environ.get(ONLY_VAR, "") if only is None else only
    if only.strip():
        if shard.strip():
            raise ShardError(f"{ENV_VAR} and {ONLY_VAR} cannot both be set")
        return only_pattern(parse_only(only, gallery_dir))
    if not shard.strip():
        return default
    if shard.strip() == MERGED:
        return NOTHING
    k, n = parse_shard(shard)
    return only_pattern(shard_tips(k, n, gallery_dir))


# --- what sphinx-gallery generates for one tip ------------------------------------------------

def tip_output_files(topic_dir: Path, tip: str) -> list[Path]:
    """Every file sphinx-gallery (and the result scraper) wrote for ``tip`` in its topic folder:
    ``tip.py``, ``.py.md5``, ``.rst``, ``.ipynb``, ``.zip``, ``.codeobj.json``, ``.cost.json``,
    ``.result.json``, ... and its images (``images/sphx_glr_<tip>_NNN.png``, the thumbnail)."""
    files = [p for p in topic_dir.glob(f"{glob_escape(tip)}.*") if p.is_file()]
    image_re = re.compile(rf"sphx_glr_{re.escape(tip)}_(?:\d+|thumb)\.\w+")
    images = topic_dir / "images"
    if images.is_dir():
        files += [p for p in images.rglob("*") if p.is_file() and image_re.fullmatch(p.name)]
    return sorted(files)


def glob_escape(text: str) -> str:
    return re.sub(r"([*?[])", r"[\1]", text)


def source_md5(path: Path) -> str:
    """The checksum sphinx-gallery keeps in ``<tip>.py.md5`` for the tip at ``path``: that of the
    file it executes, the tip's download (text mode, see its get_md5sum)."""
    text = tipsource.inline(Path(path).read_text(encoding="utf-8", errors="surrogateescape"), path)
    return hashlib.md5(text.encode("utf-8", errors="surrogateescape")).hexdigest()


def pack(k: int, n: int, tips_out_dir: Path | None = None, dest_root: Path | None = None,
         gallery_dir: Path | None = None) -> Path:
    """Copy shard K's executed tips and their result set to ``<dest_root>/KofN/``."""
    tips_out_dir = Path(tips_out_dir or settings.TIPS_OUT_DIR)
    dest = Path(dest_root or PACKS_DIR) / pack_name(k, n)
    shutil.rmtree(dest, ignore_errors=True)
    by_name = {p.stem: p for p in tipmeta.tip_files(gallery_dir)}
    names = shard_tips(k, n, gallery_dir)
    problems = []
    # What the pack claims, checked file by file at merge: the split, the commit and the
    # execution layer that produced it, and every file of every tip with its SHA-256.
    manifest = {"shard": k, "of": n, "commit": build.commit(),
                "execution": build.execution_fingerprint(), "tips": {}}
    for name in names:
        src = by_name[name]
        topic_dir = tips_out_dir / src.parent.name
        md5_file, md5 = topic_dir / f"{name}.py.md5", source_md5(src)
        if not md5_file.exists() or md5_file.read_text().strip() != md5:
            problems.append(f"{name}: not executed from its current source by this build")
            continue
        if not (topic_dir / f"{name}{records.RECORD_SUFFIX}").exists():
            problems.append(f"{name}: executed but left no result record")
            continue
        files = {}
        for path in tip_output_files(topic_dir, name):
            rel = path.relative_to(tips_out_dir)
            target = dest / "tips" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            files[rel.as_posix()] = _sha256(path)
        manifest["tips"][name] = {"topic": src.parent.name, "md5": md5, "files": files}
    if problems:
        raise ShardError(f"shard {k}/{n} is incomplete:\n" + "\n".join(problems))
    dest.mkdir(parents=True, exist_ok=True)
    records.export(dest / "results", tips_out_dir, names, suffix=f"-shard{pack_name(k, n)}",
                   gallery_dir=gallery_dir)
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return dest


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_manifest(pack_dir: Path) -> dict:
    """A pack's manifest; a missing or unreadable one stops the merge, naming the pack."""
    path = Path(pack_dir) / MANIFEST
    if not path.exists():
        raise ShardError(f"{pack_dir}: not a shard pack (no {MANIFEST}; run nox -s docs -- --shard K/N)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ShardError(f"{path}: cannot be read as a shard manifest: {exc}") from None
    if (not isinstance(data, dict) or not isinstance(data.get("tips"), dict)
            or not isinstance(data.get("shard"), int) or not isinstance(data.get("of"), int)):
        raise ShardError(f"{path}: not a shard manifest (needs shard, of, tips)")
    return data


def _pack_file_problems(pack_dir: Path, name: str, info: dict) -> list[str]:
    """Every file the manifest lists is in the pack, unchanged; the page, record and MD5 are there."""
    files = info.get("files") if isinstance(info, dict) else None
    if not isinstance(files, dict) or not files:
        return ["the manifest lists no files for it"]
    problems = []
    for rel, sha in files.items():
        path = Path(pack_dir) / "tips" / rel
        if ".." in Path(rel).parts or not path.is_file():
            problems.append(f"{rel} is missing from the pack")
        elif _sha256(path) != sha:
            problems.append(f"{rel} differs from what the shard packed")
    topic = info.get("topic", "")
    for needed in (f"{name}.rst", f"{name}.py.md5", f"{name}{records.RECORD_SUFFIX}"):
        if f"{topic}/{needed}" not in files:
            problems.append(f"the pack has no {needed}")
    if not problems:
        try:
            records.read_record(Path(pack_dir) / "tips" / topic / f"{name}.py")
        except records.RecordError as exc:
            problems.append(str(exc))
    return problems


def merge(packs: list[Path], tips_out_dir: Path | None = None,
          gallery_dir: Path | None = None) -> list[str]:
    """Check the packs form one complete, current sharded build; copy them into ``tips_out_dir``.

    ``tips_out_dir`` is emptied first: every page of the merged site comes from a shard.
    Returns the merged tip names.
    """
    tips_out_dir = Path(tips_out_dir or settings.TIPS_OUT_DIR)
    manifests = [(Path(p), read_manifest(Path(p))) for p in packs]
    if not manifests:
        raise ShardError("no shard packs to merge")
    fingerprint = build.execution_fingerprint()
    for pack_dir, m in manifests:
        if m.get("execution") != fingerprint:
            raise ShardError(f"{pack_dir}: built by another version of the build's execution layer "
                             "(tipsite/gallery.py, records/, tipkit.py, tipmeta.py or conf/settings.py "
                             "differ from this checkout): rebuild the shards from this commit")
    commits = {m.get("commit") for _, m in manifests}
    if len(commits) > 1:
        raise ShardError(f"packs come from different commits: {sorted(map(str, commits))}")
    ns = {m["of"] for _, m in manifests}
    if len(ns) != 1:
        raise ShardError(f"packs come from different splits: N = {sorted(ns)}")
    n = ns.pop()
    ks = sorted(m["shard"] for _, m in manifests)
    if ks != list(range(1, n + 1)):
        raise ShardError(f"need shards 1..{n} exactly once, got {ks}")
    current = {p.stem: p for p in tipmeta.tip_files(gallery_dir)}
    owner: dict[str, Path] = {}
    problems = []
    for pack_dir, m in manifests:
        for name, info in m["tips"].items():
            if name in owner:
                problems.append(f"{name}: executed by both {owner[name]} and {pack_dir}")
            owner[name] = pack_dir
            if name in current and info["md5"] != source_md5(current[name]):
                problems.append(f"{name}: {pack_dir} executed an older version of the tip")
    for name in sorted(set(current) - set(owner)):
        problems.append(f"{name}: executed by no shard")
    for pack_dir, m in manifests:
        for name, info in m["tips"].items():
            problems += [f"{name}: {pack_dir}: {p}" for p in _pack_file_problems(pack_dir, name, info)]
    if problems:
        raise ShardError("the shards do not make one site:\n" + "\n".join(problems))
    shutil.rmtree(tips_out_dir, ignore_errors=True)
    tips_out_dir.mkdir(parents=True)
    for name in sorted(current):
        src_root = owner[name] / "tips"
        topic_dir = src_root / current[name].parent.name
        for path in tip_output_files(topic_dir, name):
            target = tips_out_dir / path.relative_to(src_root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    return sorted(current)


def record_timings(tips_out_dir: Path | None = None, path: Path | None = None,
                   gallery_dir: Path | None = None, conditions: dict | None = None) -> dict[str, float]:
    """Update the timings file with each tip's last run time (sphinx-gallery's ``.cost.json``).

    ``conditions`` says how the build that measured them ran (the machine, its load, ``nice``):
    stored beside the times, as the file's ``measured``; kept from before when not given."""
    tips_out_dir = Path(tips_out_dir or settings.TIPS_OUT_DIR)
    path = Path(path or TIMINGS_FILE)
    seconds = load_timings(path)
    old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    names = {p.stem for p in tipmeta.tip_files(gallery_dir)}
    for cost in tips_out_dir.glob("*/*.cost.json"):
        name = cost.name[: -len(".cost.json")]
        if name in names:
            seconds[name] = round(float(json.loads(cost.read_text(encoding="utf-8"))["time"]), 2)
    seconds = {k: v for k, v in sorted(seconds.items()) if k in names}
    data = {
        "about": "Each tip's last recorded run time in seconds, for balancing sharded builds "
                 "(python -m tipsite.shards timings --update).",
        "seconds": seconds,
    }
    measured = conditions if conditions is not None else old.get("measured")
    if measured is not None:
        data["measured"] = measured
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tipsite.shards", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    pl = sub.add_parser("plan", help="print which tips each of N shards executes")
    pl.add_argument("n", type=int)
    pk = sub.add_parser("pack", help="after a --shard K/N build: copy its outputs to build/shards/KofN")
    pk.add_argument("shard")
    mg = sub.add_parser("merge", help="check shard packs and copy them into docs/tips")
    mg.add_argument("packs", nargs="*", type=Path, help="default: every pack in build/shards/")
    tm = sub.add_parser("timings", help="show (or --update) the run times the plan balances")
    tm.add_argument("--update", action="store_true", help="read the last build's .cost.json files")
    tm.add_argument("--conditions", type=Path,
                    help="with --update: a JSON file saying how that build ran (machine, load)")
    args = parser.parse_args(argv)
    try:
        if args.command == "plan":
            names = [p.stem for p in tipmeta.tip_files()]
            cost = costs(names, load_timings())
            for i, mine in enumerate(plan(names, args.n), 1):
                total = sum(cost[t] for t in mine)
                print(f"shard {i}/{args.n} (~{total:.1f} s): {' '.join(mine) or '(empty)'}")
        elif args.command == "pack":
            k, n = parse_shard(args.shard)
            print(f"shard pack: {pack(k, n)}")
        elif args.command == "merge":
            packs = args.packs or sorted(p.parent for p in PACKS_DIR.glob(f"*/{MANIFEST}"))
            names = merge(packs)
            print(f"merged {len(names)} tips from {len(packs)} shards into {settings.TIPS_OUT_DIR}")
        else:
            conditions = (json.loads(args.conditions.read_text(encoding="utf-8"))
                          if args.conditions else None)
            seconds = record_timings(conditions=conditions) if args.update else load_timings()
            print(json.dumps(seconds, indent=1))
    except (ShardError, records.RecordError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
