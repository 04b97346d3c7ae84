"""Which version of a tip a record measured: the run's provenance (the file's SHA-256, the
version digests of :mod:`tipsite.tipsource`, the date, the machine) and every version of every tip
in the git history."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
from collections.abc import Iterable
from pathlib import Path

from conf import settings
from tipsite import devices as devices_table
from tipsite.records.check import RECORD_SCHEMA, VERSION_KEYS


def source_sha256(path: Path | str) -> str:
    """The SHA-256 of the file that ran (provenance; :func:`tip_version` decides currency)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def tip_version(path: Path | str) -> dict[str, str]:
    """Which version of a tip the file at ``path`` is: the digests of its own code and of the
    helpers that measure and decide (:mod:`tipsite.tipsource`). A tip, its download and an
    older copy carrying the helpers give the same version when their code is the same."""
    from tipsite import tipsource

    return tipsource.file_version(path)


def is_current(record: dict, version: dict[str, str]) -> bool:
    """Whether ``record`` measured this version of the tip (prose and printing may differ)."""
    return all(record.get(k) == version[k] for k in VERSION_KEYS)


def build_date() -> str:
    """UTC date of the build; SOURCE_DATE_EPOCH wins for reproducible builds."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    now = (_dt.datetime.fromtimestamp(int(epoch), _dt.UTC) if epoch
           else _dt.datetime.now(_dt.UTC))
    return now.strftime("%Y-%m-%d %H:%M UTC")


def make_record(tip_path: Path | str, result: dict, *, build_threads: int) -> dict:
    """A record of this run of the tip at ``tip_path``: its RESULT plus provenance."""
    import torch

    tip_path = Path(tip_path)
    return {
        "schema": RECORD_SCHEMA,
        "tip": tip_path.stem,
        "topic": tip_path.parent.name,
        "source_sha256": source_sha256(tip_path),
        **tip_version(tip_path),
        **json.loads(json.dumps(result, allow_nan=False)),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "build_threads": build_threads,
        "date": build_date(),
        "hosts": devices_table.hosts(),
    }


KIT = "tipsite/tipkit.py"


def history_versions(paths: Iterable[str] = ("gallery",), root: Path = settings.ROOT,
                     tips: Iterable[str] | None = None) -> dict[str, dict]:
    """SHA-256 of every tip file the git history holds -> its version digests, tip and commit.

    A tip that imports its helpers is digested with the tipkit.py of the same commit; the file
    of a tip that carried them is digested as it is. ``tips`` limits the search to those names.
    """
    import subprocess

    from tipsite import tipsource

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=True).stdout

    wanted = set(tips) if tips is not None else None
    found: dict[str, dict] = {}
    seen: set[tuple[str, str]] = set()
    kits: dict[str, tipsource.Kit] = {}
    for commit in git("log", "--format=%H", "--", *paths, KIT).split():
        listing = git("ls-tree", "-r", commit, "--", *paths, KIT).splitlines()
        blobs = {line.split("\t", 1)[1]: line.split()[2] for line in listing}
        kit_blob = blobs.get(KIT)
        if kit_blob and kit_blob not in kits:
            try:
                kits[kit_blob] = tipsource.kit_from_text(git("cat-file", "blob", kit_blob))
            except (SyntaxError, ValueError, KeyError):
                kits[kit_blob] = tipsource.current_kit()
        kit = kits.get(kit_blob) or tipsource.current_kit()
        for path, blob in blobs.items():
            name = Path(path).name
            if path == KIT or not (name.startswith("tip_") and name.endswith(".py")):
                continue
            if wanted is not None and Path(path).stem not in wanted:
                continue
            if (blob, kit_blob) in seen:
                continue
            seen.add((blob, kit_blob))
            text = git("cat-file", "blob", blob)
            sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
            try:
                version = tipsource.version(text, path, kit)
                download = tipsource.inline(text, path, kit)
            except (tipsource.TipSourceError, KeyError):
                continue
            entry = {"tip": Path(path).stem, "commit": commit, **version}
            found.setdefault(sha, entry)
            found.setdefault(hashlib.sha256(download.encode("utf-8")).hexdigest(), entry)
    return found
