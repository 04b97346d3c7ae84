"""Result records and result sets: the one owner of what a build measured.

A **record** is what one run of one tip left: the tip's ``RESULT`` (its rule, one *decision* per
device it measured, extra measurements, skipped parts) plus the provenance of the run: the tip
file's SHA-256, torch and Python versions, the build's thread setting, the date, and a
description of each device of the machine (``hosts``): the CPU's model, its relevant
instruction-set flags and core count; the GPU's name, CUDA version and driver. Each decision names
its device and the thread counts it measured with, so a CPU-only tip built on a GPU machine is a
CPU result of that machine's CPU, labelled so.

The build writes one record per executed tip beside its page (``<tip>.result.json``,
:func:`write_record`); :func:`export` gathers a build's records into a **result set**
(``build/results/<label>.json``); the site shows, for every tip and device, the decision of the
newest record whose tip source is the current one (:func:`device_states`), from this build,
from the committed sets in ``docs/_data/results/``, or from the sets named by ``TIPS_RESULT_SETS``.

Result sets come from other machines. Everything in them is checked here (types, finite
numbers, verdicts re-derived from their evidence) and treated as text, never as markup, by the
pages.

The package, by job: :mod:`~tipsite.records.check` (validation and re-derivation),
:mod:`~tipsite.records.versions` (provenance, a tip's versions), :mod:`~tipsite.records.store`
(reading and writing records and sets), :mod:`~tipsite.records.views` (what a page shows),
:mod:`~tipsite.records.vet` (sets from other machines), :mod:`~tipsite.records.rules`
(what each tip version decides by), :mod:`~tipsite.records.legacy` (older
schemas), :mod:`~tipsite.records.cli` (``python -m tipsite.records``). Every public name is
re-exported here: ``from tipsite import records; records.read_record(...)``.
"""

from __future__ import annotations

from tipsite.records import rules, store
from tipsite.records.check import (
    BUSY,
    COMPARISON_KEYS,
    COMPAT_STATUSES,
    DECISION_KEYS,
    ENV_VAR,
    MAX_SAMPLES,
    MEASUREMENT_KEYS,
    NOT_MEASURED,
    OLD_SET_SCHEMA,
    PROVENANCE_KEYS,
    RECORD_SCHEMA,
    RECORD_SUFFIX,
    RESULT_KEYS,
    SET_SCHEMA,
    V2_RECORD_SCHEMA,
    V2_SET_SCHEMA,
    VERSION_KEYS,
    WARNING_ORIGINS,
    RecordError,
    calibration_problems,
    comparison_problems,
    compat_entry_problems,
    compat_run_problems,
    coverage_problems,
    decision_problems,
    decision_verdicts,
    device_word,
    devices,
    figures_problems,
    key_problems,
    machine_class,
    record_problems,
    required_devices,
    result_problems,
    verdicts,
    warnings_problems,
)
from tipsite.records.cli import (
    ROW_KEYS,
    main,
    rows,
)
from tipsite.records.legacy import (
    upgrade_v1,
    upgrade_v2,
)
from tipsite.records.store import (
    MAX_SET_BYTES,
    committed_paths,
    content_digest,
    export,
    fingerprint,
    load_set,
    load_sets,
    make_set,
    paths_from_env,
    read_json,
    read_record,
    record_path,
    run_key,
    set_digest,
    set_label,
    tip_records,
    write_record,
)
from tipsite.records.versions import (
    KIT,
    build_date,
    history_versions,
    is_current,
    make_record,
    source_sha256,
    tip_version,
)
from tipsite.records.vet import (
    OLDEST_DATE,
    evidence_problems,
    expect_device,
    source_problems,
    text_problems,
    vet_record,
    vet_set,
)
from tipsite.records.views import (
    columns,
    device_states,
)

__all__ = [
    "BUSY",
    "COMPARISON_KEYS",
    "COMPAT_STATUSES",
    "DATA_DIR",
    "DECISION_KEYS",
    "ENV_VAR",
    "KIT",
    "MAX_SAMPLES",
    "MAX_SET_BYTES",
    "MEASUREMENT_KEYS",
    "NOT_MEASURED",
    "OLDEST_DATE",
    "OLD_SET_SCHEMA",
    "PROVENANCE_KEYS",
    "RECORD_SCHEMA",
    "RECORD_SUFFIX",
    "RESULT_KEYS",
    "ROW_KEYS",
    "RecordError",
    "SET_SCHEMA",
    "V2_RECORD_SCHEMA",
    "V2_SET_SCHEMA",
    "VERSION_KEYS",
    "WARNING_ORIGINS",
    "build_date",
    "calibration_problems",
    "columns",
    "committed_paths",
    "comparison_problems",
    "compat_entry_problems",
    "compat_run_problems",
    "content_digest",
    "coverage_problems",
    "decision_problems",
    "decision_verdicts",
    "device_states",
    "device_word",
    "devices",
    "evidence_problems",
    "expect_device",
    "export",
    "figures_problems",
    "fingerprint",
    "history_versions",
    "is_current",
    "key_problems",
    "load_set",
    "load_sets",
    "machine_class",
    "main",
    "make_record",
    "make_set",
    "paths_from_env",
    "read_json",
    "read_record",
    "record_path",
    "record_problems",
    "required_devices",
    "result_problems",
    "rows",
    "rules",
    "run_key",
    "set_digest",
    "set_label",
    "source_problems",
    "source_sha256",
    "store",
    "text_problems",
    "tip_records",
    "tip_version",
    "upgrade_v1",
    "upgrade_v2",
    "verdicts",
    "vet_record",
    "vet_set",
    "warnings_problems",
    "write_record",
]



def __getattr__(name: str):
    # DATA_DIR lives in tipsite.records.store, which reads it; a configuration that shows other
    # committed sets sets records.store.DATA_DIR (tests/tinysite/conf.py), and reads see that.
    if name == "DATA_DIR":
        return store.DATA_DIR
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
