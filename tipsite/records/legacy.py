"""Result sets of older schemas, upgraded: schema 1 (one device per build) and schema 2 (a tip's
version known only as its file's SHA-256)."""

from __future__ import annotations

from tipsite.records.check import (
    OLD_SET_SCHEMA,
    RECORD_SCHEMA,
    SET_SCHEMA,
    V2_RECORD_SCHEMA,
    V2_SET_SCHEMA,
    VERSION_KEYS,
    RecordError,
)


def upgrade_v1(old: dict, sources: dict[str, dict], *, cpu_name: str, cuda_host: dict) -> dict:
    """A schema-1 result set from a GPU machine as a schema-2 set, each record on its true device.

    Schema 1 labelled every record with the build's device. ``sources`` gives, per tip, the
    SHA-256 and ``sphinx_gallery_tips_devices`` of the tip file that ran: a tip that measured no
    CUDA there is a CPU result of that machine's CPU (``cpu_name``), the others are CUDA results.
    Schema 1 kept no samples, so these decisions cannot be re-derived: they are marked
    ``"legacy": True`` and the pages say so.
    """
    if old.get("schema") != OLD_SET_SCHEMA:
        raise RecordError(f"not a {OLD_SET_SCHEMA} result set")
    records = []
    for r in old["records"]:
        info = sources.get(r["tip"])
        if info is None:
            raise RecordError(f"{r['tip']}: no source recorded for it")
        device = "cuda" if (r["device"] == "cuda" and "cuda" in info["devices"]) else "cpu"
        records.append({
            "schema": V2_RECORD_SCHEMA, "upgraded_from": OLD_SET_SCHEMA,
            "tip": r["tip"], "topic": r["topic"], "source_sha256": info["sha256"],
            "rule": r["rule"],
            "verdicts": {device: {"device": device, "verdict": r["verdict"], "key": r["key"],
                                  "threads": [r["threads"]], "legacy": True}},
            "measurements": [{**m, "device": device} for m in r["measurements"]],
            "skipped": r["skipped"], "torch": r["torch"], "python": r["python"],
            "build_threads": r.get("build_threads", r["threads"]), "date": r["date"],
            "hosts": {"cpu": {"name": cpu_name}, "cuda": cuda_host},
        })
    return {"schema": V2_SET_SCHEMA, "upgraded_from": OLD_SET_SCHEMA, "torch": old["torch"],
            "build_threads": records[0]["build_threads"], "hosts": records[0]["hosts"],
            "records": records}


# --- result sets of schema 2 (a tip's version as its file's SHA-256) ----------------------------

def upgrade_v2(old: dict, versions: dict[str, dict]) -> dict:
    """A schema-2 result set as a schema-3 one: each record gains the version digests of the
    file it ran, looked up by that file's SHA-256 in ``versions`` (:func:`history_versions`)."""
    if old.get("schema") != V2_SET_SCHEMA:
        raise RecordError(f"not a {V2_SET_SCHEMA} result set")
    records = []
    for r in old["records"]:
        found = versions.get(r["source_sha256"])
        if found is None:
            raise RecordError(f"{r['tip']}: no tip file with SHA-256 {r['source_sha256'][:12]} in the "
                              "history searched: cannot tell which version of the tip it measured")
        records.append({**r, "schema": RECORD_SCHEMA, **{k: found[k] for k in VERSION_KEYS}})
    return {**old, "schema": SET_SCHEMA, "records": records}
