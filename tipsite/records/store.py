"""Reading and writing records and result sets: a record beside its executed tip, a build's
records gathered into result sets (:func:`export`), the sets named by ``TIPS_RESULT_SETS``, each
checked as it is read (:mod:`tipsite.records.check`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

from conf import settings
from tipsite import devices as devices_table
from tipsite.records.check import (
    ENV_VAR,
    OLD_SET_SCHEMA,
    RECORD_SUFFIX,
    SET_SCHEMA,
    V2_SET_SCHEMA,
    RecordError,
    record_problems,
)


def write_record(path: Path, record: dict) -> None:
    """Write atomically: a reader never sees half a record."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def record_path(target_file: str | Path) -> Path:
    """``docs/tips/speed/tip_x.py`` -> ``docs/tips/speed/tip_x.result.json``."""
    target = Path(target_file)
    return target.with_name(target.stem + RECORD_SUFFIX)


def read_record(target_file: str | Path) -> dict | None:
    """The record beside an executed tip, or None; an invalid record raises, naming the file."""
    path = record_path(target_file)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: cannot be read as JSON: {exc}") from None
    problems = record_problems(record)
    if problems:
        raise RecordError(f"{path}: " + "; ".join(problems))
    return record


# --- result sets ---------------------------------------------------------------------------------

def run_key(record: dict) -> tuple:
    """Records with the same key come from the same build configuration: one result set."""
    hosts_ = record["hosts"]
    return (record["torch"], record["build_threads"],
            *(hosts_[d]["name"] for d in sorted(hosts_)))


def set_label(record: dict) -> str:
    """``cpu-amd-epyc-torch2.13.0+cpu`` (``-1threads`` when not the default thread setting)."""
    hosts_ = record["hosts"]
    device = devices_table.primary(hosts_)
    slug = re.sub(r"[^a-z0-9]+", "-", hosts_[device]["name"].lower()).strip("-")[:40] or "unknown"
    label = f"{device}-{slug}-torch{record['torch']}"
    if record["build_threads"] != settings.TIPS_THREADS:
        label += f"-{record['build_threads']}threads"
    return label


def tip_records(tips_out_dir: Path | None = None, tips: Iterable[str] | None = None,
                gallery_dir: Path | None = None) -> list[dict]:
    """The records in a build's output folder, for ``tips`` (default: every tip in the gallery)."""
    from tipsite import tipmeta

    tips_out_dir = Path(tips_out_dir or settings.TIPS_OUT_DIR)
    wanted = set(tips) if tips is not None else {p.stem for p in tipmeta.tip_files(gallery_dir)}
    records = []
    for path in sorted(tips_out_dir.glob(f"*/*{RECORD_SUFFIX}")):
        if path.name[: -len(RECORD_SUFFIX)] in wanted:
            records.append(read_record(path.with_name(path.name[: -len(RECORD_SUFFIX)] + ".py")))
    return records


def make_set(records: list[dict]) -> dict:
    keys = {run_key(r) for r in records}
    if len(keys) != 1:
        raise RecordError(f"records from {len(keys)} build configurations cannot form one set: {sorted(keys)}")
    first = records[0]
    return {"schema": SET_SCHEMA, "torch": first["torch"], "build_threads": first["build_threads"],
            "hosts": first["hosts"], "records": sorted(records, key=lambda r: (r["topic"], r["tip"]))}


def export(out_dir: Path | None = None, tips_out_dir: Path | None = None,
           tips: Iterable[str] | None = None, suffix: str = "",
           gallery_dir: Path | None = None) -> list[Path]:
    """Write the build's records as result sets, one file per build configuration found.

    Two configurations never share a file: a name collision stops the export, naming both.
    """
    out_dir = Path(out_dir or settings.RESULTS_DIR)
    groups: dict[tuple, list[dict]] = {}
    for record in tip_records(tips_out_dir, tips, gallery_dir):
        groups.setdefault(run_key(record), []).append(record)
    names: dict[str, tuple] = {}
    for key, group in groups.items():
        name = f"{set_label(group[0])}{suffix}.json"
        if name in names:
            raise RecordError(f"two build configurations would both be written to {name}: "
                              f"{names[name]} and {key}")
        names[name] = key
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, key in names.items():
        path = out_dir / name
        write_record(path, make_set(groups[key]))
        written.append(path)
    return sorted(written)


def paths_from_env(value: str | None = None) -> list[Path]:
    """The result-set files named by ``TIPS_RESULT_SETS`` (or ``value``), folders expanded."""
    value = os.environ.get(ENV_VAR, "") if value is None else value
    paths: list[Path] = []
    for part in value.split(os.pathsep):
        if not part.strip():
            continue
        path = Path(part.strip()).expanduser()
        if path.is_dir():
            paths += sorted(path.glob("*.json"))
        elif path.is_file():
            paths.append(path)
        else:
            raise RecordError(f"{ENV_VAR}: {part!r} is neither a result-set file nor a folder")
    return paths


# Result sets committed with the sources (e.g. a GPU runner's), shown by every build. A
# configuration may point it elsewhere (tests/tinysite/conf.py sets records.store.DATA_DIR).
DATA_DIR = settings.DOCS_DIR / "_data" / "results"


def committed_paths() -> list[Path]:
    return sorted(DATA_DIR.glob("*.json")) if DATA_DIR.is_dir() else []


# A result set of every tip, with its figures' data, is about 1 MB; a file over this is refused
# before it is parsed.
MAX_SET_BYTES = 8 * 2**20


def read_json(path: Path, limit: int = MAX_SET_BYTES):
    """The JSON in ``path``, at most ``limit`` bytes of it; :class:`RecordError` names the file."""
    try:
        size = Path(path).stat().st_size
        if size > limit:
            raise RecordError(f"{path}: {size} bytes; a result set holds at most {limit}")
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise RecordError(f"{path}: cannot be read as JSON: {type(exc).__name__}: {str(exc)[:200]}") from None


def content_digest(value) -> str:
    """A record's or set's identity: the SHA-256 of its content, written canonically."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def set_digest(data: dict) -> str:
    """A result set's identity: the digest of its records (where it is stored and what its
    file is called are not part of it)."""
    return content_digest(sorted(content_digest(r) for r in data["records"]))


def load_set(path: Path) -> dict:
    """Read and check a result set; raise :class:`RecordError` naming the file and the problem."""
    data = read_json(path)
    if isinstance(data, dict) and data.get("schema") == OLD_SET_SCHEMA:
        raise RecordError(f"{path}: a {OLD_SET_SCHEMA} result set labels every record with the "
                          "build's device, even CPU-only tips run on a GPU machine; convert it with "
                          "`python -m tipsite.records upgrade` and the tips' sources it was built from")
    if isinstance(data, dict) and data.get("schema") == V2_SET_SCHEMA:
        raise RecordError(f"{path}: a {V2_SET_SCHEMA} result set knows each tip's version only as the "
                          "SHA-256 of its whole file; add the version digests with `python -m "
                          "tipsite.records upgrade-v2` (it finds each file in the git history)")
    if not isinstance(data, dict) or data.get("schema") != SET_SCHEMA:
        raise RecordError(f"{path}: not a result set (schema {SET_SCHEMA!r} expected)")
    records = data.get("records")
    if not isinstance(records, list):
        raise RecordError(f"{path}: 'records' must be a list")
    for i, record in enumerate(records):
        problems = record_problems(record)
        if problems:
            tip = record.get("tip") if isinstance(record, dict) else None
            raise RecordError(f"{path}: record {i} ({str(tip)[:80]}): " + "; ".join(problems))
    return {**data, "path": str(path)}


def load_sets(paths: Iterable[Path]) -> list[dict]:
    return [load_set(p) for p in paths]


def fingerprint(paths: Iterable[Path]) -> str:
    """Changes whenever the given result sets change, so the pages showing them are rebuilt."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(str(Path(path).resolve()).encode())
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()
