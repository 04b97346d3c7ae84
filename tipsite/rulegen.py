"""Make the rule manifest, ``conf/tip-rules.json`` (:mod:`tipsite.records.rules`), from runs of
the tips: ``python -m tipsite.rulegen [--fake-cuda] [TIP ...]`` (default: every tip; with
``--fake-cuda`` every tip that measures CUDA, its CUDA path on the fake device).

The manifest holds what each version of a tip's code decides by (its rule, cases, groups,
comparisons and thresholds, facts, key), never a figure: so each tip runs here from its source,
one after another in this process, with :func:`tipsite.tipkit.compare_times` timing as few rounds
as it can (``QUICK``). A tip whose comparisons depend on what it measured would need its real
runs (``python -m tipsite.tipcheck --rules``, or ``python -m tipsite.records rules SET`` of a
build's result sets): each adds the shapes it saw.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conf import settings
from tipsite import records, tipmeta, tiprunner

QUICK = {"min_rounds": 2, "max_rounds": 3, "budget_s": 0.01, "round_s": 0.001}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tipsite.rulegen", description=__doc__.split("\n\n")[0])
    parser.add_argument("tips", nargs="*", help="tip names (default: every tip)")
    parser.add_argument("--fake-cuda", action="store_true", help="the CUDA path, on the fake device")
    parser.add_argument("--manifest", type=Path, default=None,
                        help="the manifest to add to (default: conf/tip-rules.json)")
    parser.add_argument("--merge", type=Path, nargs="*", default=[],
                        help="only add the shapes of these manifests (from runs made elsewhere)")
    args = parser.parse_args(argv)
    if args.merge:
        manifest = records.rules.load(args.manifest)
        for path in args.merge:
            print(f"merged {path}: {', '.join(records.rules.merge(manifest, records.rules.load(path))) or 'nothing new'}")
        records.rules.write(manifest, args.manifest)
        return 0
    tips = [t for t in tipmeta.read_all() if (not args.tips or t.name in args.tips)
            and (not args.fake_cuda or "cuda" in t.devices)]
    sys.path.insert(1, str(settings.ROOT))  # the tips import tipsite.tipkit; run() sets sys.path[0]
    from tipsite import tipkit

    tipkit.compare_times.__kwdefaults__.update(QUICK)
    manifest = records.rules.load(args.manifest)
    failed = 0
    for i, tip in enumerate(tips):
        if i:
            tiprunner.reset_between_tips()
        report = tiprunner.run(str(tip.path), fake_cuda=args.fake_cuda)
        result = report.get("result")
        problems = ([f"failed: {str(report.get('error'))[-500:]}"] if report["status"] != "passed"
                    else records.result_problems(result))
        if problems:
            failed += 1
            print(f"FAIL {tip.name}: {'; '.join(problems)}", flush=True)
            continue
        record = {"tip": tip.name, "code_sha256": records.tip_version(tip.path)["code_sha256"], **result}
        added = records.rules.add(manifest, record)
        records.rules.write(manifest, args.manifest)
        print(f"ok   {tip.name}: {', '.join(added) or 'nothing new'} ({report['seconds']} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
