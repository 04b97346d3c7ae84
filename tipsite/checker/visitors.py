"""The rules as libcst visitors, on TorchFix's machinery.

Every visitor here subclasses TorchFix's :class:`torchfix.common.TorchVisitor` (a libcst
``BatchableCSTVisitor``) and uses its helpers (``get_qualified_name_for_call``,
``get_specific_arg``, ``add_violation``), exactly as TorchFix's own visitors do. The rules TorchFix
already has are TorchFix's visitors themselves (:data:`TORCHFIX_RULES`); their error codes are
reported under this project's codes.

The engine (:mod:`tipsite.checker.engine`) runs all visitors in one batched traversal of each
piece of source that can hold a finding, and gives them:

* ``self.facts``: what Python's ``ast`` saw in the whole file (imports, what a name was bound to);
* ``self.where``: a :class:`Tracker` of the enclosing loops, functions, classes and ``with``
  blocks of the node being visited;
* ``self.at_module_level``: whether the piece is top-level code of the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import QualifiedNameProvider
from torchfix.common import LintViolation, TorchError, TorchVisitor
from torchfix.visitors import TorchSynchronizedDataLoaderVisitor, TorchUnsafeLoadVisitor

from tipsite.checker.registry import RULES

# TorchFix visitor -> {TorchFix code: our code}
TORCHFIX_RULES = {
    TorchUnsafeLoadVisitor: {"TOR102": "PTT001"},
    TorchSynchronizedDataLoaderVisitor: {"TOR401": "PTT020"},
}

FACTORIES = {f"torch.{n}" for n in ("ones", "zeros", "empty", "full", "rand", "randn", "randint",
                                     "randperm", "arange", "eye", "linspace", "logspace", "tensor")}
GRAD_FREE = {"torch.no_grad", "torch.inference_mode", "torch.autograd.grad_mode.no_grad",
             "torch.autograd.grad_mode.inference_mode"}
OPTIMIZERS = {f"torch.optim.{n}" for n in ("Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Adamax",
                                           "NAdam", "RAdam", "Adadelta")}
HOST_READS = {"item", "cpu", "tolist", "numpy"}
UNTRACKED = {"item", "detach", "tolist", "numpy"}  # calls that leave no graph behind
LOADER_WRAPPERS = {"enumerate", "tqdm", "iter", "zip", "tqdm.tqdm"}


@dataclass
class Facts:
    """Whole-file facts from ``ast`` (see :func:`tipsite.checker.engine.file_facts`)."""

    aliases: dict[str, str] = field(default_factory=dict)  # local name -> qualified name
    numpy_names: set[str] = field(default_factory=set)
    loader_names: set[str] = field(default_factory=set)
    load_names: set[str] = field(default_factory=set)  # bound to torch.load(...) without mmap=True
    param_list_names: set[str] = field(default_factory=set)
    module_names: set[str] = field(default_factory=set)  # bound to SomeClass(...)
    backward_receivers: set[str] = field(default_factory=set)
    module_backward: bool = False  # top-level code calls .backward()


def is_module_class(node: cst.ClassDef) -> bool:
    return any((get_full_name_for_node(b.value) or "").endswith("Module") for b in node.bases)


class Tracker:
    """The enclosing nodes of the one being visited (the engine pushes and pops every node)."""

    KINDS = frozenset({cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.With, cst.If})

    def __init__(self) -> None:
        self.stack: list[cst.CSTNode] = []

    def push(self, node: cst.CSTNode) -> None:
        if type(node) in self.KINDS:
            self.stack.append(node)

    def pop(self, node: cst.CSTNode) -> None:
        if self.stack and self.stack[-1] is node:
            self.stack.pop()

    def _inner(self, kinds, stop=(cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        for node in reversed(self.stack):
            if isinstance(node, kinds):
                return node
            if isinstance(node, stop):
                return None
        return None

    def loop(self) -> cst.For | cst.While | None:
        """The innermost loop around the node, within the same function."""
        return self._inner((cst.For, cst.While))

    def function(self) -> cst.FunctionDef | None:
        return self._inner(cst.FunctionDef, stop=(cst.ClassDef,))

    def method_of_module(self, name: str) -> bool:
        """Inside method ``name`` (at any depth) of a class deriving from a ``...Module``."""
        for i in range(len(self.stack) - 1, 0, -1):
            node, parent = self.stack[i], self.stack[i - 1]
            if isinstance(node, cst.FunctionDef) and isinstance(parent, cst.ClassDef):
                return node.name.value == name and is_module_class(parent)
        return False

    def under(self, names: set[str], visitor: TorchVisitor) -> bool:
        """Inside a ``with`` whose items call one of ``names``, within the same function."""
        for node in reversed(self.stack):
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return _decorated(node, names, visitor) if isinstance(node, cst.FunctionDef) else False
            if isinstance(node, cst.With) and any(
                    isinstance(i.item, cst.Call) and visitor.get_qualified_name_for_call(i.item) in names
                    for i in node.items):
                return True
        return False

    def under_cuda_check(self) -> bool:
        return any(isinstance(n, cst.If) and _mentions(n.test, "cuda") for n in self.stack)


def _decorated(func: cst.FunctionDef, names: set[str], visitor: TorchVisitor) -> bool:
    for d in func.decorators:
        dec = d.decorator
        name = visitor.get_qualified_name_for_call(dec) if isinstance(dec, cst.Call) else visitor.qualify(dec)
        if name in names:
            return True
    return False


def _mentions(node: cst.CSTNode, word: str) -> bool:
    if isinstance(node, cst.Name):
        return word in node.value
    if isinstance(node, cst.SimpleString):
        return word in node.value
    if isinstance(node, cst.Attribute):
        return word in node.attr.value or _mentions(node.value, word)
    return any(_mentions(c, word) for c in node.children)


def _method(call: cst.Call) -> str | None:
    """``x.item()`` -> ``"item"``; None for a plain name call."""
    return call.func.attr.value if type(call.func) is cst.Attribute else None


def _int(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        try:
            return int(node.value.replace("_", ""), 0)
        except ValueError:
            return None
    return None


def _is_false(node: cst.BaseExpression) -> bool:
    return (isinstance(node, cst.Name) and node.value == "False") or _int(node) == 0


def _is_true(node: cst.BaseExpression) -> bool:
    return (isinstance(node, cst.Name) and node.value == "True") or (_int(node) or 0) > 0


def _star_kwargs(call: cst.Call) -> bool:
    return any(a.star == "**" for a in call.args)


def _positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


class RuleVisitor(TorchVisitor):
    """A rule of this project: TorchFix's visitor base, with the engine's facts and tracker."""

    CODE = ""

    def __init__(self) -> None:
        super().__init__()
        self.ERRORS = [TorchError(self.CODE, RULES[self.CODE].finding)]
        self.facts = Facts()
        self.where = Tracker()
        self.at_module_level = False

    def flag(self, node: cst.CSTNode) -> None:
        self.add_violation(node, error_code=self.CODE, message=RULES[self.CODE].finding)

    def add_violation(self, node, error_code, message, replacement=None) -> None:
        # Positions are resolved by the engine afterwards, only for pieces that have a finding.
        self.violations.append(LintViolation(error_code, message, 0, 0, node, replacement))

    def qualify(self, node: cst.CSTNode) -> str | None:
        name = get_full_name_for_node(node)
        if name is None:
            return None
        root, _, rest = name.partition(".")
        base = self.facts.aliases.get(root)
        return (base + ("." + rest if rest else "")) if base else name

    def qname(self, call: cst.Call) -> str | None:
        """TorchFix's ``get_qualified_name_for_call``, read straight from the engine's cache."""
        names = self.metadata[QualifiedNameProvider][call]
        return next(iter(names)).name if names else None

    def visit_Module(self, node: cst.Module) -> None:
        self.reset()

    def reset(self) -> None:
        """Per-piece state; rules with memory override it."""


# --- saving and loading ------------------------------------------------------------------------

class LoadWeightsOnlyFalse(RuleVisitor):
    """PTT001, the half TorchFix lacks: an explicit ``weights_only=False``."""

    CODE = "PTT001"

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname(node) == "torch.load":
            arg = self.get_specific_arg(node, "weights_only", -1)
            if arg is not None and _is_false(arg.value):
                self.flag(node)


class LoadWithoutMapLocation(RuleVisitor):
    CODE = "PTT002"

    def visit_Call(self, node: cst.Call) -> None:
        if (self.qname(node) == "torch.load" and not _star_kwargs(node)
                and self.get_specific_arg(node, "map_location", 1) is None):
            self.flag(node)


class LoadStateDictWithoutMmap(RuleVisitor):
    CODE = "PTT003"

    def reset(self) -> None:
        self.loaded: dict[str, bool] = {}  # name -> bound to torch.load(...) without mmap=True

    def _plain_load(self, value: cst.BaseExpression) -> bool | None:
        if isinstance(value, cst.Call) and self.qname(value) == "torch.load":
            mmap = self.get_specific_arg(value, "mmap", -1)
            return mmap is None or not _is_true(mmap.value)
        return None

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            if isinstance(t.target, cst.Name):
                self.loaded[t.target.value] = bool(self._plain_load(node.value))

    def visit_Call(self, node: cst.Call) -> None:
        if _method(node) != "load_state_dict" or not node.args:
            return
        assign = self.get_specific_arg(node, "assign", -1)
        if assign is not None and _is_true(assign.value):
            return  # the meta-device recipe
        value = node.args[0].value
        if isinstance(value, cst.Name):
            plain = self.loaded.get(value.value, value.value in self.facts.load_names)
        else:
            plain = bool(self._plain_load(value))
        if plain:
            self.flag(node)


_MODULE_NAME = re.compile(r"(^|_)(model|net|module|network)s?\d*$", re.IGNORECASE)


class SaveWholeModule(RuleVisitor):
    CODE = "PTT004"

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname(node) != "torch.save":
            return
        args = _positional(node)
        if not args:
            return
        value = args[0].value
        name = get_full_name_for_node(value) if isinstance(value, (cst.Name, cst.Attribute)) else None
        if name is None:
            return
        last = name.rsplit(".", 1)[-1]
        if _MODULE_NAME.search(last) or name in self.facts.module_names:
            self.flag(node)


# --- APIs that changed -------------------------------------------------------------------------

class CudaAmp(RuleVisitor):
    CODE = "PTT005"

    def visit_Call(self, node: cst.Call) -> None:
        name = self.qname(node)
        if name and name.startswith("torch.cuda.amp."):
            self.flag(node)


class ZeroGradKeepsZeros(RuleVisitor):
    CODE = "PTT006"

    def visit_Call(self, node: cst.Call) -> None:
        if _method(node) == "zero_grad":
            arg = self.get_specific_arg(node, "set_to_none", 0)
            if arg is not None and _is_false(arg.value):
                self.flag(node)


class VariableWrapping(RuleVisitor):
    CODE = "PTT007"

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname(node) in ("torch.autograd.Variable", "torch.autograd.variable.Variable"):
            self.flag(node)


# --- model design --------------------------------------------------------------------------------

def _calls_in(node: cst.BaseExpression) -> list[cst.Call]:
    if isinstance(node, (cst.List, cst.Tuple)):
        return [e.value for e in node.elements if isinstance(e.value, cst.Call)]
    if isinstance(node, (cst.ListComp, cst.GeneratorExp)) and isinstance(node.elt, cst.Call):
        return [node.elt]
    return []


def _self_target(node: cst.Assign) -> bool:
    return (len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Attribute)
            and isinstance(node.targets[0].target.value, cst.Name)
            and node.targets[0].target.value.value == "self")


class PlainListOfModules(RuleVisitor):
    CODE = "PTT008"

    def visit_Assign(self, node: cst.Assign) -> None:
        if not isinstance(node.value, (cst.List, cst.ListComp)) or not _self_target(node):
            return
        if not self.where.method_of_module("__init__"):
            return
        for call in _calls_in(node.value):
            name = self.qname(call) or ""
            last = name.rsplit(".", 1)[-1]
            if name.startswith("torch.nn.") or last == "Parameter" or (last[:1].isupper() and "nn." in name):
                self.flag(node)
                return


def _parameter_calls(visitor: RuleVisitor, node: cst.BaseExpression) -> bool:
    calls = _calls_in(node)
    return bool(calls) and all((visitor.qname(c) or "").endswith("Parameter") for c in calls)


class ModuleListOfParameters(RuleVisitor):
    CODE = "PTT009"

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname(node) != "torch.nn.ModuleList" or not node.args:
            return
        value = node.args[0].value
        if _parameter_calls(self, value) or (isinstance(value, cst.Name)
                                             and value.value in self.facts.param_list_names):
            self.flag(node)


class RegisterParameterWithoutValue(RuleVisitor):
    CODE = "PTT029"

    def visit_Call(self, node: cst.Call) -> None:
        if _method(node) == "register_parameter" and len(node.args) == 1 and not node.args[0].star:
            self.flag(node)


class TensorAttributeNotBuffer(RuleVisitor):
    CODE = "PTT030"

    def visit_Assign(self, node: cst.Assign) -> None:
        if (_self_target(node) and isinstance(node.value, cst.Call)
                and self.qname(node.value) in FACTORIES and self.where.method_of_module("__init__")):
            self.flag(node)


class DeviceInForward(RuleVisitor):
    CODE = "PTT015"

    def visit_Call(self, node: cst.Call) -> None:
        if _method(node) in ("cuda", "cpu") and self.where.method_of_module("forward"):
            self.flag(node)


class FactoryWithoutDevice(RuleVisitor):
    CODE = "PTT016"

    def visit_Call(self, node: cst.Call) -> None:
        if (self.qname(node) in FACTORIES and self.get_specific_arg(node, "device", -1) is None
                and not _star_kwargs(node) and self.where.method_of_module("forward")):
            self.flag(node)


class NoGradInForward(RuleVisitor):
    CODE = "PTT017"

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if (isinstance(node.item, cst.Call) and self.qname(node.item) == "torch.no_grad"
                and self.where.method_of_module("forward")):
            self.flag(node.item)


class ModeSwitchInForward(RuleVisitor):
    CODE = "PTT018"

    def visit_Call(self, node: cst.Call) -> None:
        if (_method(node) in ("eval", "train") and isinstance(node.func.value, cst.Name)
                and node.func.value.value == "self" and self.where.method_of_module("forward")):
            self.flag(node)


class LinearNotMultipleOf8(RuleVisitor):
    CODE = "PTT032"

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname(node) != "torch.nn.Linear":
            return
        sizes = [_int(a.value) for a in node.args[:2] if a.keyword is None
                 or a.keyword.value in ("in_features", "out_features")]
        if any(s is not None and s >= 64 and s % 8 for s in sizes):
            self.flag(node)


# --- autograd and evaluation ------------------------------------------------------------------------

def _inplace(node: cst.CSTNode) -> bool:
    """Parameter-style updates: ``p -= ...``, ``p.add_(...)``, ``w[i] = ...``."""
    if isinstance(node, cst.AugAssign):
        return True
    if isinstance(node, cst.Assign) and any(isinstance(t.target, cst.Subscript) for t in node.targets):
        return True
    if isinstance(node, cst.Call):
        m = _method(node)
        if m and m.endswith("_") and not m.startswith("_"):
            return True
    return any(_inplace(c) for c in node.children)


class NoGradForInference(RuleVisitor):
    CODE = "PTT019"

    def visit_With(self, node: cst.With) -> None:
        for item in node.items:
            if isinstance(item.item, cst.Call) and self.qname(item.item) == "torch.no_grad":
                if not self.where.method_of_module("forward") and not _inplace(node.body):
                    self.flag(item.item)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        for d in node.decorators:
            dec = d.decorator
            name = self.qname(dec) if isinstance(dec, cst.Call) else self.qualify(dec)
            if name == "torch.no_grad" and not _inplace(node.body):
                self.flag(dec)


class EvalWithoutNoGrad(RuleVisitor):
    CODE = "PTT023"

    def reset(self) -> None:
        self.evaluated: dict[int, set[str]] = {}  # id(function) -> receivers of .eval()
        self.done: set[tuple[int, str]] = set()

    def visit_Call(self, node: cst.Call) -> None:
        func = self.where.function()
        if func is None:
            return
        seen = self.evaluated.setdefault(id(func), set())
        if _method(node) == "eval" and not node.args:
            receiver = get_full_name_for_node(node.func.value)
            if receiver and receiver != "self":
                seen.add(receiver)
            return
        callee = get_full_name_for_node(node.func)
        if callee in seen and (id(func), callee) not in self.done and not self.where.under(GRAD_FREE, self):
            self.done.add((id(func), callee))
            self.flag(node)


def _loss_like(node: cst.BaseExpression, names: set[str], clean: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether the expression carries a loss tensor (with its graph) into its value.

    ``names`` hold a loss; a name that says "loss" does too unless ``clean`` knows it was bound
    to something else (``loss = criterion(...).item()``).
    """
    if isinstance(node, cst.Name):
        return node.value in names or ("loss" in node.value.lower() and node.value not in clean)
    if isinstance(node, cst.Call):
        if _method(node) in UNTRACKED:
            return False
        if isinstance(node.func, cst.Name) and node.func.value in ("float", "int", "len", "str"):
            return False
        callee = (get_full_name_for_node(node.func) or "").lower()
        if "loss" in callee or "criterion" in callee:
            return True
        return any(_loss_like(a.value, names, clean) for a in node.args) or (
            isinstance(node.func, cst.Attribute) and _loss_like(node.func.value, names, clean))
    if isinstance(node, cst.Attribute):
        return _loss_like(node.value, names, clean)
    if isinstance(node, (cst.BinaryOperation, cst.IfExp, cst.UnaryOperation, cst.Subscript)):
        parts = {cst.BinaryOperation: ("left", "right"), cst.IfExp: ("body", "orelse"),
                 cst.UnaryOperation: ("expression",), cst.Subscript: ("value",)}[type(node)]
        return any(_loss_like(getattr(node, p), names, clean) for p in parts)
    return False


class _LossTracking(RuleVisitor):
    """Names that hold a loss tensor: ``.backward()`` receivers, and names assigned from one."""

    def reset(self) -> None:
        self.loss_names = set(self.facts.backward_receivers)
        self.clean: set[str] = set()

    def carries_loss(self, node: cst.BaseExpression) -> bool:
        return _loss_like(node, self.loss_names, self.clean)

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        lossy = self.carries_loss(value)
        untracked = isinstance(value, cst.Call) and (
            _method(value) in UNTRACKED
            or (isinstance(value.func, cst.Name) and value.func.value in ("float", "int")))
        for t in node.targets:
            if isinstance(t.target, cst.Name):
                if lossy:
                    self.loss_names.add(t.target.value)
                    self.clean.discard(t.target.value)
                elif untracked:  # known to hold no graph: loss = criterion(...).item()
                    self.clean.add(t.target.value)
                    self.loss_names.discard(t.target.value)


class RunningLossTensor(_LossTracking):
    CODE = "PTT012"

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if (isinstance(node.operator, cst.AddAssign) and self.where.loop() is not None
                and self.carries_loss(node.value)
                and not (isinstance(node.target, cst.Name)
                         and node.target.value in self.facts.backward_receivers)):
            self.flag(node)


class LoggedLossTensor(_LossTracking):
    CODE = "PTT013"

    def visit_Call(self, node: cst.Call) -> None:
        if (_method(node) == "append" and len(node.args) == 1 and self.where.loop() is not None
                and self.carries_loss(node.args[0].value)):
            self.flag(node)


class DetachBeforeLayers(RuleVisitor):
    CODE = "PTT025"

    def reset(self) -> None:
        self.pending: dict[int, list[cst.Call]] = {}  # id(function or 0) -> detach calls
        self.backward: set[int] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if (len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
                and isinstance(value, cst.Call) and _method(value) == "detach" and not value.args
                and isinstance(value.func.value, cst.Name)
                and value.func.value.value == node.targets[0].target.value):
            func = self.where.function()
            if func is not None or self.at_module_level:
                self.pending.setdefault(id(func) if func else 0, []).append(value)

    def visit_Call(self, node: cst.Call) -> None:
        if _method(node) == "backward":
            func = self.where.function()
            self.backward.add(id(func) if func else 0)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        if id(node) in self.backward:
            for call in self.pending.pop(id(node), []):
                self.flag(call)

    def leave_Module(self, node: cst.Module) -> None:
        if 0 in self.pending and (0 in self.backward or self.facts.module_backward):
            for call in self.pending.pop(0):
                self.flag(call)


# --- loops ------------------------------------------------------------------------------------------

class HostReadInLoop(RuleVisitor):
    CODE = "PTT011"

    def visit_Call(self, node: cst.Call) -> None:
        if _method(node) in HOST_READS and not node.args and self.where.loop() is not None:
            self.flag(node)


def _loader_iter(node: cst.BaseExpression, facts: Facts) -> bool:
    while isinstance(node, cst.Call) and get_full_name_for_node(node.func) in LOADER_WRAPPERS and node.args:
        node = node.args[0].value
    name = get_full_name_for_node(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
    return bool(name) and (name in facts.loader_names or "loader" in name.rsplit(".", 1)[-1].lower())


class BlockingCopyInLoader(RuleVisitor):
    CODE = "PTT022"

    def visit_Call(self, node: cst.Call) -> None:
        if _method(node) not in ("to", "cuda"):
            return
        loop = self.where.loop()
        if not isinstance(loop, cst.For) or not _loader_iter(loop.iter, self.facts):
            return
        if self.get_specific_arg(node, "non_blocking", 1 if _method(node) == "cuda" else 2) is not None:
            return
        args = _positional(node)
        if _method(node) == "to" and (not args or (isinstance(args[0].value, cst.SimpleString)
                                                   and "cpu" in args[0].value.value)):
            return
        self.flag(node)


def _has_mod(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
        return True
    return any(_has_mod(c) for c in node.children)


def _divided(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Divide, cst.FloorDivide))


class AccumulationWithoutScaling(RuleVisitor):
    CODE = "PTT024"

    def reset(self) -> None:
        self.loops: dict[int, dict] = {}
        self.scaled: set[str] = set()
        self.assigned: dict[str, bool] = {}  # name -> its last assignment divides

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            if isinstance(t.target, cst.Name):
                self.assigned[t.target.value] = _divided(node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.target, cst.Name) and isinstance(node.operator, (cst.DivideAssign, cst.FloorDivideAssign)):
            self.assigned[node.target.value] = True

    def visit_Call(self, node: cst.Call) -> None:
        loop = self.where.loop()
        if not isinstance(loop, cst.For):
            return
        state = self.loops.setdefault(id(loop), {"backward": [], "gated_step": False})
        method = _method(node)
        if method == "backward":
            receiver = node.func.value
            if isinstance(receiver, cst.Call) and _method(receiver) == "scale" and receiver.args:
                receiver = receiver.args[0].value  # scaler.scale(loss).backward()
            divided = _divided(receiver) or (isinstance(receiver, cst.Name)
                                              and self.assigned.get(receiver.value, False))
            if not divided:
                state["backward"].append(node)
        elif method == "step" and any(isinstance(n, cst.If) and _has_mod(n.test)
                                      for n in self.where.stack[self.where.stack.index(loop):]):
            state["gated_step"] = True

    def leave_For(self, node: cst.For) -> None:
        state = self.loops.pop(id(node), None)
        if state and state["gated_step"]:
            for call in state["backward"]:
                self.flag(call)


def _binds(node: cst.CSTNode) -> bool:
    if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
        return True
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        return False
    return any(_binds(c) for c in node.children)


def _calls_backward(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.Call) and _method(node) == "backward":
        return True
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        return False
    return any(_calls_backward(c) for c in node.children)


class LoopTensorsOutliveLoop(RuleVisitor):
    CODE = "PTT026"

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        body = list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else []
        for i, stmt in enumerate(body):
            if not isinstance(stmt, (cst.For, cst.While)) or not _calls_backward(stmt.body):
                continue
            if not _binds(stmt.body) and not isinstance(stmt, cst.For):
                continue
            after = body[i + 1:]
            small = [x for s in after if isinstance(s, cst.SimpleStatementLine) for x in s.body]
            if any(isinstance(x, cst.Del) for x in small):
                continue  # the loop's names are deleted after it
            only_return = all(isinstance(s, cst.SimpleStatementLine)
                              and all(isinstance(x, (cst.Return, cst.Pass)) for x in s.body)
                              for s in after)
            if not only_return:
                self.flag(stmt)


class RowLoop(RuleVisitor):
    CODE = "PTT033"

    def visit_For(self, node: cst.For) -> None:
        it = node.iter
        if not (isinstance(it, cst.Call) and get_full_name_for_node(it.func) == "range" and len(it.args) == 1):
            return
        bound = it.args[0].value
        sized = ((isinstance(bound, cst.Call) and (_method(bound) in ("size", "numel")
                                                   or get_full_name_for_node(bound.func) == "len"))
                 or (isinstance(bound, cst.Subscript) and isinstance(bound.value, cst.Attribute)
                     and bound.value.attr.value == "shape"))
        if not sized or not isinstance(node.target, cst.Name):
            return
        var = node.target.value
        if _writes_element(node.body, var):
            self.flag(node)


def _writes_element(node: cst.CSTNode, var: str) -> bool:
    if isinstance(node, cst.Assign):
        for t in node.targets:
            if isinstance(t.target, cst.Subscript) and any(
                    isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name)
                    and e.slice.value.value == var for e in t.target.slice):
                return True
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        return False
    return any(_writes_element(c, var) for c in node.children)


class RetryOnAnyRuntimeError(RuleVisitor):
    CODE = "PTT028"

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.type is None or self.where.loop() is None:
            return
        types = [e.value for e in node.type.elements] if isinstance(node.type, cst.Tuple) else [node.type]
        if not any(get_full_name_for_node(t) == "RuntimeError" for t in types):
            return
        if _mentions(node.body, "memory") or _has_raise(node.body):
            return
        self.flag(node)


def _has_raise(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.Raise):
        return True
    return any(_has_raise(c) for c in node.children)


# --- calls judged on their own ------------------------------------------------------------------

class ArangePairing(RuleVisitor):
    CODE = "PTT010"

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if len(node.slice) < 2:
            return
        first = node.slice[0].slice
        if (isinstance(first, cst.Index) and isinstance(first.value, cst.Call)
                and (self.qname(first.value) or "").endswith("arange")):
            self.flag(node)


class TensorFromNdarray(RuleVisitor):
    CODE = "PTT014"

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname(node) != "torch.tensor" or not node.args or node.args[0].keyword:
            return
        value = node.args[0].value
        if isinstance(value, cst.Call):
            name = self.qname(value) or ""
            if name.startswith("numpy.") or _method(value) == "numpy":
                self.flag(node)
        elif isinstance(value, cst.Name) and value.value in self.facts.numpy_names:
            self.flag(node)


class DataLoaderWithoutPinMemory(RuleVisitor):
    CODE = "PTT021"

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname(node) != "torch.utils.data.DataLoader" or _star_kwargs(node):
            return
        arg = self.get_specific_arg(node, "pin_memory", 7)
        if arg is None or _is_false(arg.value):
            self.flag(node)


class MemoryAllocated(RuleVisitor):
    CODE = "PTT027"

    def visit_Call(self, node: cst.Call) -> None:
        if (self.qname(node) in ("torch.cuda.memory_allocated", "torch.cuda.max_memory_allocated")
                and not self.where.under_cuda_check()):
            self.flag(node)


class OptimizerNotFused(RuleVisitor):
    CODE = "PTT031"

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname(node) not in OPTIMIZERS or _star_kwargs(node):
            return
        fused = self.get_specific_arg(node, "fused", -1)
        if fused is None or _is_false(fused.value):
            self.flag(node)


class AnomalyDetection(RuleVisitor):
    CODE = "PTT034"

    def visit_Call(self, node: cst.Call) -> None:
        name = self.qname(node)
        if name == "torch.autograd.detect_anomaly":
            self.flag(node)
        elif name == "torch.autograd.set_detect_anomaly":
            arg = self.get_specific_arg(node, "mode", 0)
            if arg is not None and _is_true(arg.value):
                self.flag(node)


OWN_VISITORS = [cls for cls in list(globals().values())
                if isinstance(cls, type) and issubclass(cls, RuleVisitor) and cls.CODE]
