"""Every verdict a tip's rule names can be reached (issue 31.5).

A rule that names "wrong" but can never give it tests nothing: the tip would say "holds" or
"depends" whatever it measured. This test reads each tip's ``decide(...)`` cases from its source
(without running the tip) and drives :func:`tipsite.tipkit.decide` itself, the function the
build runs, with synthetic measurements: for each verdict the cases name, it searches the
outcomes of the groups (``above``, ``below``, ``noise``, and mixes of two) and the values of the
facts (those the cases mention, and one they do not) for measurements that give that verdict.
Nothing here re-implements a rule: the cases are the tip's, and the verdict is decide's.

A tip whose cases are not literals (built in a loop or a comprehension, or spliced with ``**``)
cannot be read without running it; such tips are listed in :data:`NOT_READABLE`, and a test
keeps that list exact, so it shrinks as tips are rewritten.
"""

from __future__ import annotations

import ast
import itertools
import random

import pytest

from tipsite import tipkit, tipmeta

# tips whose decide cases are built at run time: not checked here (see the module docstring)
NOT_READABLE = {"tip_arange_indexing", "tip_from_numpy", "tip_mixed_precision", "tip_module_list",
                "tip_register_buffer_parameter", "tip_track_metrics"}

OUTCOMES = ("above", "below", "noise")
MIXES = [[o] for o in OUTCOMES] + [list(p) for p in itertools.combinations(OUTCOMES, 2)]


class _Other:
    """A fact's value that no case asks for."""

    def __eq__(self, other):
        return isinstance(other, _Other)

    def __hash__(self):
        return 0

    def __repr__(self):
        return "<another value>"


def _assignments(tree: ast.Module) -> dict[str, list[ast.AST]]:
    found: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found.setdefault(node.targets[0].id, []).append(node.value)
    return found


def _literal(node: ast.AST, names: dict[str, list[ast.AST]], depth: int = 0):
    """``node`` as a value, its names replaced by what the module assigns them (the first
    assignment that reads as a literal); ValueError when it does not read as one."""
    if depth > 8:
        raise ValueError("too deep")

    class Substitute(ast.NodeTransformer):
        def visit_Name(self, n):
            for value in names.get(n.id, []):
                try:
                    return ast.Constant(_literal(value, names, depth + 1))
                except ValueError:
                    continue
            return n

        def visit_JoinedStr(self, n):
            parts = []
            for v in n.values:
                if isinstance(v, ast.Constant):
                    parts.append(str(v.value))
                elif isinstance(v, ast.FormattedValue) and v.format_spec is None and v.conversion == -1:
                    parts.append(str(_literal(v.value, names, depth + 1)))
                else:
                    raise ValueError("f-string with a format")
            return ast.Constant("".join(parts))

    tree = ast.fix_missing_locations(Substitute().visit(ast.parse(ast.unparse(node), mode="eval")))
    return ast.literal_eval(tree.body)


def rules_of(path) -> list[list[tuple[str, dict]]]:
    """The cases of every ``decide(...)`` call in a tip (a ``cases`` variable assigned in
    several places gives one rule per assignment)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = _assignments(tree)
    rules = []
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "decide"):
            continue
        arg = call.args[1] if len(call.args) > 1 else next(k.value for k in call.keywords if k.arg == "cases")
        options = names.get(arg.id, []) if isinstance(arg, ast.Name) else [arg]
        rules += [_literal(option, names) for option in options]
    return rules


def _tips():
    return {t.name: t for t in tipmeta.read_all()}


def _readable():
    found = []
    for name, tip in sorted(_tips().items()):
        if name in NOT_READABLE:
            continue
        try:
            rules = rules_of(tip.path)
        except (ValueError, StopIteration):
            continue  # the listing test names it
        for i, cases in enumerate(rules):
            for verdict in dict.fromkeys(v for v, _ in cases):
                found.append(pytest.param(name, i, verdict, id=f"{name}-{i}-{verdict}"))
    return found


# An interval for each outcome, clear of the threshold (1.0) by far more than the 3% that
# tipkit.judge needs to call a verdict settled: the outcomes alone decide.
INTERVALS = {"above": (2.0, 1.5, 2.5), "below": (0.5, 0.4, 0.6), "noise": (1.0, 0.5, 1.5)}


def _comparisons(group: str, outcomes: list[str]) -> list[dict]:
    return [{"name": f"{group} #{i}", "outcome": o, "threads": 1, "measure": "ratio", "x": i,
             **dict(zip(("median", "low", "high"), INTERVALS[o])), "ratios": [INTERVALS[o][0]],
             "threshold": 1.0, "margin": "clear",
             "cores": {"needed": 1, "others": 0.0, "free": True}}
            for i, o in enumerate(outcomes)]


def _candidates(cases) -> tuple[dict[str, list], dict[str, list]]:
    """What each group and fact the cases test may be set to."""
    groups, facts = {}, {}
    for _, conditions in cases:
        for name, condition in conditions.items():
            accepted = condition if isinstance(condition, list) else [condition]
            if all(isinstance(c, str) and c.split(" ")[0] in ("all", "any", "none")
                   and c.split(" ")[-1] in OUTCOMES and len(c.split()) == 2 for c in accepted):
                groups[name] = MIXES
            else:
                values = facts.setdefault(name, [_Other()])
                for c in accepted:
                    if c not in values:
                        values.append(c)
                if any(isinstance(c, bool) for c in accepted):
                    values += [b for b in (True, False) if b not in values]
    return groups, facts


def reach(cases, verdict, tries=3000) -> dict | None:
    """Measurements that make decide give ``verdict`` with these cases, or None."""
    groups, facts = _candidates(cases)
    names = list(groups) + list(facts)
    choices = [groups[n] if n in groups else facts[n] for n in names]
    size = 1
    for c in choices:
        size *= len(c)
    combos = (itertools.product(*choices) if size <= tries else
              (tuple(random.Random(i).choice(c) for c in choices) for i in range(tries)))
    # the verdict's own conditions first: most rules give it at once
    firsts = []
    for v, conditions in cases:
        if v == verdict:
            firsts.append(tuple(
                (groups[n][[m[0] for m in MIXES].index(conditions[n].split()[1])]
                 if conditions[n].split()[0] != "none" else ["noise"])
                if n in groups and n in conditions and isinstance(conditions[n], str) else
                ((conditions[n] if not isinstance(conditions[n], list) else conditions[n][0])
                 if n in conditions and n in facts else choices[k][0])
                for k, n in enumerate(names)))
    for combo in itertools.chain(firsts, combos):
        chosen = dict(zip(names, combo))
        decision = tipkit.decide(
            "cpu", cases,
            groups={n: _comparisons(n, chosen[n]) for n in groups},
            facts={n: chosen[n] for n in facts})
        if decision["verdict"] == verdict:
            return chosen
    return None


@pytest.mark.parametrize(("tip_name", "rule", "verdict"), _readable())
def test_each_verdict_a_rule_names_is_reachable(tip_name, rule, verdict):
    cases = rules_of(_tips()[tip_name].path)[rule]
    found = reach(cases, verdict)
    assert found is not None, (f"{tip_name}: no measurement gives {verdict!r} with these cases "
                               f"(an earlier case always wins, or its conditions contradict): "
                               f"{cases}")


def test_the_tips_whose_rules_cannot_be_read_are_listed_exactly():
    unreadable = set()
    for name, tip in _tips().items():
        try:
            if not rules_of(tip.path):
                unreadable.add(name)
        except (ValueError, StopIteration):
            unreadable.add(name)
    assert unreadable == NOT_READABLE


def test_reach_finds_an_unreachable_verdict():
    """The search is no rubber stamp: a case behind one that always wins is unreachable."""
    cases = [("holds", {"speed-up": ["all above", "any below", "none above"]}),
             ("wrong", {"speed-up": "all below"}), ("depends", {})]
    assert reach(cases, "holds") is not None
    assert reach(cases, "wrong") is None
    assert reach([("holds", {"a": True}), ("wrong", {"a": True}), ("depends", {})], "wrong") is None
