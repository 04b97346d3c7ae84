"""The rules as libcst visitors, on TorchFix's machinery.

Every visitor here subclasses TorchFix's :class:`torchfix.common.TorchVisitor` (a libcst
``BatchableCSTVisitor``) and uses its helpers (``get_qualified_name_for_call``,
``get_specific_arg``, ``add_violation``), exactly as TorchFix's own visitors do. The rules TorchFix
already has are TorchFix's visitors themselves, narrowed where they would flag code that is
fine (:data:`TORCHFIX_RULES`); their error codes are reported under this project's codes.

The engine (:mod:`tipsite.checker.engine`) runs all visitors in one batched traversal of each
piece of source that can hold a finding, and gives them:

* ``self.facts``: what Python's ``ast`` saw in the whole file (imports, what a name was bound to);
* ``self.where``: a :class:`Tracker` of the enclosing loops, functions, classes and ``with``
  blocks of the node being visited;
* ``self.at_module_level``: whether the piece is top-level code of the file;
* ``self.torch`` and ``self.device``: the reader's torch release (a tuple, None when unknown) and
  device, for the rules whose advice depends on them (a default that changed, an argument that
  a release does not have).

Precision comes first: a rule follows the value (a sum of losses that is backpropagated later is
not a leak) and stays quiet where the static signal is weak. Each rule's ``scope`` in
:mod:`tipsite.checker.registry` says what it leaves alone.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import QualifiedNameProvider
from torchfix.common import LintViolation, TorchError, TorchVisitor
from torchfix.visitors import TorchSynchronizedDataLoaderVisitor, TorchUnsafeLoadVisitor

from tipsite.checker.registry import RULES

FACTORIES = {f"torch.{n}" for n in ("ones", "zeros", "empty", "full", "rand", "randn", "randint",
                                     "randperm", "arange", "eye", "linspace", "logspace", "tensor")}
GRAD_FREE = {"torch.no_grad", "torch.inference_mode", "torch.autograd.grad_mode.no_grad",
             "torch.autograd.grad_mode.inference_mode", "torch.autograd.no_grad"}
# The optimizers whose fused implementation the tip measures (Adam) or shares its kernels (AdamW),
# and the first release that accepts fused=True on each device.
FUSED_SINCE = {"torch.optim.Adam": {"cuda": (1, 13), "cpu": (2, 4)},
               "torch.optim.AdamW": {"cuda": (2, 0), "cpu": (2, 4)}}
OPTIMIZERS = set(FUSED_SINCE)
HOST_READS = {"item", "tolist", "numpy"}  # reads of a value: .cpu() alone also moves modules, for RPC
UNTRACKED = {"item", "detach", "tolist", "numpy"}  # calls that leave no graph behind
LOADER_WRAPPERS = {"enumerate", "tqdm", "iter", "zip", "tqdm.tqdm"}
IMAGE_DATASETS = ("ImageFolder", "DatasetFolder")  # datasets that decode an image file per sample
CONVS = {f"torch.nn.{k}{n}d" for k in ("Conv", "ConvTranspose") for n in (1, 2, 3)}
SAFE_GLOBALS = {"torch.serialization.safe_globals"}
# Classes whose forward is not a model's: losses, matchers, post-processing. Their no_grad,
# .cpu() and CPU tensors are part of what they compute for the model, not a model's choice.
NOT_A_MODEL = re.compile(r"loss|criterion|matcher|postprocess|metric|evaluat", re.IGNORECASE)
EVALUATION = re.compile(r"eval|valid|test|infer|predict", re.IGNORECASE)


# torch namespaces whose calls return numbers, devices or handles, not tensors
_NOT_TENSORS = re.compile(r"^torch\.(cuda|distributed|backends|utils|version|hub|jit|onnx|profiler|accelerator|mps"
                          r"|cpu|xpu|mtia|compiler|_dynamo|fx|export|nn|optim|amp|autograd|serialization|testing"
                          r"|get_|is_|set_|manual_seed|load|save|device|dtype|Size|Generator|__|numel|finfo|iinfo"
                          r"|typename|result_type|promote_types|can_cast|use_deterministic|compile)")


def returns_tensor(qualified: str | None) -> bool:
    """A call of torch's own that returns a tensor (``torch.zeros``, ``torch.cat``), not a
    number or a handle (``torch.cuda.memory_reserved()``, ``torch.distributed.get_rank()``)."""
    return bool(qualified) and qualified.startswith("torch.") and not _NOT_TENSORS.match(qualified)


# the roots of names that hold settings, not modules: args.model is a name or a path
_SETTINGS = {"args", "opt", "opts", "cfg", "config", "conf", "hparams", "hp", "params", "flags", "FLAGS", "options",
             "hyp", "settings"}


@dataclass
class Facts:
    """Whole-file facts from ``ast`` (gathered by :class:`tipsite.checker.engine._Scan`)."""

    aliases: dict[str, str] = field(default_factory=dict)  # local name -> qualified name
    function_names: set[str] = field(default_factory=set)  # every def of the file, at any depth
    path_folders: frozenset[str] = frozenset()  # PTT015: the folders above the file (its packages?)
    # PTT012/PTT013: functions of the file whose every return holds no graph: None for the whole
    # value, i for the i-th item of the tuple each returns (only those a loss's total or list
    # may be fed from)
    host_returns: dict[str, frozenset[int | None]] = field(default_factory=dict)
    numpy_names: set[str] = field(default_factory=set)
    loader_names: set[str] = field(default_factory=set)
    pinned_loaders: set[str] = field(default_factory=set)  # DataLoader(..., pin_memory=<not False>)
    decoding_datasets: set[str] = field(default_factory=set)  # bound to an image dataset / transform=
    load_names: set[str] = field(default_factory=set)  # bound to torch.load(...) without mmap=True
    param_list_names: set[str] = field(default_factory=set)
    module_names: set[str] = field(default_factory=set)  # bound to an nn.Module built in this file
    # PTT004: bound at the module's top level (outside functions and classes) to a dict container
    top_dicts: set[str] = field(default_factory=set)
    module_classes: set[str] = field(default_factory=set)  # classes of this file deriving from ...Module
    plain_classes: set[str] = field(default_factory=set)  # classes of this file with no base but object
    backward_receivers: set[str] = field(default_factory=set)
    module_backward: bool = False  # top-level code calls .backward()
    manual_grad: bool = False  # the file writes into .grad by hand (p.grad += g, p.grad.add_(g))
    uses_rpc: bool = False  # imports torch.distributed.rpc
    saves_from_cpu: bool = False  # torch.save of something moved to the CPU first (x.cpu(), model.cpu())
    mentions_cuda: bool = False  # the file says "cuda" or "accelerator" (torch.accelerator)
    # PTT021: it says so elsewhere than in an autocast(..., enabled=False), which turns mixed
    # precision off for a function and says nothing of where its tensors live
    cuda_beyond_autocast_off: bool = False
    cpu_path: bool = False  # the file names the CPU as a device ("cpu")
    grad_free_factories: set[str] = field(default_factory=set)  # functions here that return no_grad()...
    grad_free_functions: set[str] = field(default_factory=set)  # functions here run under a grad-free decorator
    grad_free_callees: set[str] = field(default_factory=set)  # functions here called only from those
    backward_engines: set[str] = field(default_factory=set)  # x in x.backward(loss): no loss itself
    tensor_datasets: set[str] = field(default_factory=set)  # bound to a TensorDataset(...)
    # PTT021: bound to what a call given a (non-CPU) device= builds, an OnDevice...(...), or a part of one
    device_datasets: set[str] = field(default_factory=set)
    # PTT020/PTT021: line of a DataLoader call -> the rules the engine keeps silent there (a
    # dataset built from values the code puts on a device; one the code changes after building
    # its loader; a collate_fn shown to return NumPy arrays): judged on the whole file's ast,
    # which a piece checked alone does not show
    quiet_loaders: dict[int, set[str]] = field(default_factory=dict)
    tensor_names: set[str] = field(default_factory=set)  # every binding in the file is a torch call
    state_names: set[str] = field(default_factory=set)  # bound to a .state_dict() (weights, not a module)
    namespace_names: set[str] = field(default_factory=set)  # bound to parse_args() / argparse.Namespace
    namespace_dicts: set[str] = field(default_factory=set)  # dicts here holding such a Namespace
    module_dicts: set[str] = field(default_factory=set)  # dicts here holding a whole module
    module_attrs: set[str] = field(default_factory=set)  # PTT041: self.x bound to a module in the file
    # PTT041: for each such dict, the keys holding the module (None: a key not a string literal)
    module_keys: dict[str, set[str | None]] = field(default_factory=dict)
    # PTT041: keys the file or its project reads back from a loaded checkpoint as a module
    modules_read_back: frozenset[str] = frozenset()
    # PTT004: the file or its project loads a whole module with weights_only=False and uses it as one
    reads_whole_modules: bool = False
    has_ddp: bool = False  # the file names DistributedDataParallel (a DDP path beside DataParallel)
    loads_unsafely: bool = False  # the file loads with weights_only=False (its own checkpoints)
    torch_floor: tuple[int, ...] | None = None  # the oldest torch the checked project declares
    torch_pin: tuple[int, ...] | None = None  # the newest torch release the project pins exactly
    # reads those two from the project's files (the engine's declared_torch and pinned_torch)
    # the first time a rule asks (project_torch): only a file with a candidate finding pays
    read_project: Callable[[], tuple[tuple[int, ...] | None, tuple[int, ...] | None]] | None = None
    # the release the project's own code already needs, by an advised API it uses unguarded
    # (the engine's proved_torch), read the first time a declared floor would silence a rule
    read_proved: Callable[[], tuple[int, ...] | None] | None = None
    torch_proved: tuple[int, ...] | None = None
    # PTT012: names of the project's functions whose every definition returns only values that
    # hold no graph (the engine's project_graph_free), read the first time a total is reported
    read_graph_free: Callable[[], frozenset[str]] | None = None
    # PTT037: the file's classes that its project only loads weights into (the engine's
    # evaluator_classes), read the first time a finding would be reported
    read_loaded_only: Callable[[], frozenset[str]] | None = None
    loaded_only_classes: frozenset[str] = frozenset()
    read_frozen_bn: Callable[[], bool] | None = None  # PTT037: the project keeps BatchNorm frozen
    frozen_bn_read: bool = False
    # PTT037: a file of the file's folder or one above it downloads released weights
    read_released: Callable[[], bool] | None = None
    released_read: bool = False
    # PTT019: the file or its folder's files turn gradients back on and differentiate
    read_reenables: Callable[[], bool] | None = None
    reenables_read: bool = False
    # PTT019: the functions of the file or its project that hand a parameter to an in-place
    # collective (dist.all_reduce): the engine's collective_functions, read on the first call
    read_collectives: Callable[[], frozenset[str]] | None = None
    collectives_read: frozenset[str] = frozenset()
    graph_free_calls: frozenset[str] = frozenset()
    # PTT012/PTT013: what every definition of a method of the project returns that holds no
    # graph (the engine's project_returns: None for the whole value, i for a tuple's i-th item)
    # (bare: a plain call of the name, which the file may import from a module of the project)
    read_returns: Callable[..., frozenset[int | None]] | None = None
    # PTT004: whether a function the file defines or imports from its project returns only dict
    # literals (read for a name a save would report)
    read_dict_returns: Callable[[str], bool] | None = None
    exports: bool = False  # the file exports a model (ONNX, TorchScript, torch.export, CoreML...)
    inference_only: bool = False  # grad-free or eval() code and no backward() or step(): no training
    evaluation_script: bool = False  # named for evaluation or inference (test.py), no backward() or step()
    pickles_objects: bool = False  # torch.save of a module, submodule or Namespace (not weights only)
    reads_namespaces: bool = False  # isinstance(x, Namespace): what the file reads holds Namespaces
    names_state_files: bool = False  # PTT001: the file may call DeepSpeed's per-rank file helpers
    state_key_names: set[str] = field(default_factory=set)  # lists naming numpy RNG state keys
    forces_unsafe_load: bool = False  # the file or its package sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD
    allow_lists: bool = False  # the file uses (add_)safe_globals or asks whether torch has it
    torch_version_names: set[str] = field(default_factory=set)  # bound to torch's version, or to a test of it
    exports_onnx: bool = False  # the file calls torch.onnx.export, or is named for ONNX (models_onnx.py)
    plain_names: set[str] = field(default_factory=set)  # also bound to a non-call (x = ckpt["x"])
    linear_inputs: set[int] = field(default_factory=set)  # literal in_features of the file's Linears
    linear_outputs: set[int] = field(default_factory=set)  # literal out_features of the file's Linears
    numpy_loaders: set[str] = field(default_factory=set)  # loaders whose batches go to NumPy, not moved
    # PTT021: loaders read only by loops that never use their batches (a loading benchmark)
    idle_loaders: set[str] = field(default_factory=set)
    # PTT021: loaders handed to accelerate's prepare() (accelerate copies their batches itself),
    # unless the file asks accelerate for non-blocking copies; loaders read once (next(iter(x)))
    accelerate_copies: bool = False
    prepared_loaders: set[str] = field(default_factory=set)
    peeked_loaders: set[str] = field(default_factory=set)
    # PTT021: functions of the file a DataLoader takes as collate_fn (named, in a lambda, in
    # functools.partial) that put tensors on CUDA themselves, or that return the batch as it is
    cuda_collates: set[str] = field(default_factory=set)
    identity_collates: set[str] = field(default_factory=set)
    # PTT011: loaders bound only to torch's DataLoader, over no TensorDataset, with no collate_fn
    # that may place on CUDA, never prepared by accelerate: their batches are on the host
    host_loaders: set[str] = field(default_factory=set)
    step_functions: set[str] = field(default_factory=set)  # training-step functions called in a loop here
    hook_methods: set[str] = field(default_factory=set)  # after_step... methods of hook classes here
    large_models: bool = False  # PTT003: the file shards or big-model-loads its models, or builds LLMs
    cpu_transforms: bool = False  # PTT016: a forward of the file reads its input with .numpy()
    # PTT001: functions the file assigns over one of torch's own (torch.storage._load_from_bytes = f)
    torch_replacements: frozenset[str] = frozenset()
    serves_checkpoints: bool = False  # PTT037: the file's folder loads state dicts and never trains
    # PTT004: the file names LAMMPS's ML-IAP interface (pair_style mliap unified), which loads
    # a whole pickled module: the artefact it saves is that module, for another program
    builds_mliap: bool = False
    source: str = ""  # the file's text (PTT030 counts the uses of a name beyond its piece)
    tree: ast.Module | None = None  # the file's ast, the engine's parse of ``source`` (whole-file reads)
    twin_classes: frozenset[str] = frozenset()  # PTT037: its classes another project file defines too
    # PTT032: the file or its project computes in fp16/bf16 or TF32 somewhere (Tensor Core math)
    reduced_precision: bool = True
    # PTT030: the file's classes shown to be nn.Modules (a torch.nn base, a LightningModule, a
    # class of the file or its project that derives from one); None: not worked out (excerpt)
    nn_modules: frozenset[str] | None = None
    converts_weights: bool = False  # PTT014: a script named for converting weights (convert_x.py)
    complex_params: bool = False  # PTT031: the file or its project creates complex parameters
    # PTT035: a file of the file's part of the project (or one importing it) runs a training step
    part_trains: bool = True
    # PTT035: the project's functions that call autograd.grad(..., create_graph=...) (MAML's adapt)
    second_order: frozenset[str] = frozenset()

    def _read_once(self, reader: str, value: str):
        """The fact ``value``, computed by the callable in ``reader`` on the first call (the
        reader is then dropped): a project fact costs a read of other files only where a rule
        asks for it."""
        read = getattr(self, reader)
        if read is not None:
            setattr(self, reader, None)
            setattr(self, value, read())
        return getattr(self, value)

    def project_torch(self) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
        """(torch_floor, torch_pin), read from the project's files on the first call."""
        if self.read_project is not None:
            read, self.read_project = self.read_project, None
            self.torch_floor, self.torch_pin = read()
        return self.torch_floor, self.torch_pin

    def proved_torch(self) -> tuple[int, ...] | None:
        """The release the project's own code needs already (read on the first call)."""
        return self._read_once("read_proved", "torch_proved")

    def loaded_only(self) -> frozenset[str]:
        """PTT037: the file's classes never trained, only loaded (read on the first call)."""
        return self._read_once("read_loaded_only", "loaded_only_classes")

    def frozen_bn(self) -> bool:
        """PTT037: the file or its project keeps BatchNorm layers frozen (read on the first call)."""
        return self._read_once("read_frozen_bn", "frozen_bn_read")

    def released(self) -> bool:
        """PTT037: the file's package downloads released weights (read on the first call)."""
        return self._read_once("read_released", "released_read")

    def reenables_grad(self) -> bool:
        """PTT019: the file or its package re-enables gradients and differentiates (read on the
        first call)."""
        return self._read_once("read_reenables", "reenables_read")

    def collectives(self) -> frozenset[str]:
        """PTT019: the project's functions that all-reduce a parameter in place (read on the
        first call)."""
        return self._read_once("read_collectives", "collectives_read")

    def project_returns(self, name: str, bare: bool = False) -> frozenset[int | None]:
        """What every definition of the project's method ``name`` returns that holds no graph
        (``bare``: a plain call ``name(...)``, read from the module the file imports it from
        where it does)."""
        if self.read_returns is None:
            return frozenset()
        return self.read_returns(name, bare) if bare else self.read_returns(name)

    def project_graph_free(self) -> frozenset[str]:
        """The project's functions that return no graph (read on the first call)."""
        return self._read_once("read_graph_free", "graph_free_calls")


def is_module_class(node: cst.ClassDef) -> bool:
    return any((get_full_name_for_node(b.value) or "").endswith("Module") for b in node.bases)


_FIELDS: dict[type, tuple[str, ...]] = {}
_SKIP = frozenset({"lpar", "rpar", "lbracket", "rbracket", "leading_lines", "lines_after_decorators",
                   "trailing_whitespace", "header", "footer", "indent", "comma", "semicolon", "equal",
                   "dot", "star", "asynchronous", "encoding", "default_indent", "default_newline",
                   "has_trailing_newline", "operator", "colon", "keyword", "newline", "whitespace"})


def children(node: cst.CSTNode):
    """The child nodes of ``node``, without libcst's costly ``children`` (a codegen pass)."""
    names = _FIELDS.get(type(node))
    if names is None:
        names = _FIELDS[type(node)] = tuple(f.name for f in dataclasses.fields(type(node))
                                            if f.name not in _SKIP and not f.name.startswith("whitespace"))
    for name in names:
        value = getattr(node, name)
        kind = type(value)
        if kind is tuple or kind is list:
            for item in value:
                if _is_node(type(item)):
                    yield item
        elif _is_node(kind):
            yield value


_NODE_TYPES: dict[type, bool] = {}


def _is_node(kind: type) -> bool:
    """``issubclass(kind, cst.CSTNode)``, cached: CSTNode is an ABC, whose checks are slow."""
    known = _NODE_TYPES.get(kind)
    if known is None:
        known = _NODE_TYPES[kind] = issubclass(kind, cst.CSTNode)
    return known


SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_STOPS = frozenset(SCOPES)  # walk() tests the exact type: these classes have no subclasses
_LOOPS = frozenset({cst.For, cst.While})


def walk(node: cst.CSTNode, *, into_loops: bool = True):
    """Every node under ``node`` (not ``node`` itself), not entering nested functions, lambdas and
    classes, or nested loops (when ``into_loops`` is false)."""
    stack = list(children(node))
    pop, extend = stack.pop, stack.extend
    while stack:
        n = pop()
        yield n
        kind = type(n)
        if kind in _STOPS or (not into_loops and kind in _LOOPS):
            continue
        extend(children(n))


class Tracker:
    """The enclosing nodes of the one being visited (the engine pushes and pops every node)."""

    KINDS = frozenset({cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.With, cst.If,
                       cst.ExceptHandler})

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

    def gated_in(self, loop: cst.CSTNode) -> bool:
        """Whether an ``if`` between ``loop`` and the node runs it on some iterations only (not a
        rank guard, which a single-process run takes on every step)."""
        for node in reversed(self.stack):
            if node is loop:
                return False
            if isinstance(node, cst.If) and not rank_guard(node.test):
                return True
        return False

    def module_class(self, name: str) -> cst.ClassDef | None:
        """The class deriving from a ``...Module`` whose method ``name`` holds the node (any depth)."""
        for i in range(len(self.stack) - 1, 0, -1):
            node, parent = self.stack[i], self.stack[i - 1]
            if isinstance(node, cst.FunctionDef) and isinstance(parent, cst.ClassDef):
                return parent if node.name.value == name and is_module_class(parent) else None
        return None

    def method_of_module(self, name: str) -> bool:
        return self.module_class(name) is not None

    def method_of_model(self, name: str) -> bool:
        """In method ``name`` of a module that is a model (not a loss, matcher or post-processor)."""
        cls = self.module_class(name)
        return cls is not None and not NOT_A_MODEL.search(cls.name.value)

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

    def grad_free(self, visitor: RuleVisitor) -> bool:
        """Inside a grad-free ``with`` or a function under a grad-free decorator (the innermost
        function, and the functions around it that define it)."""
        for node in reversed(self.stack):
            if isinstance(node, cst.ClassDef):
                return False
            if isinstance(node, cst.FunctionDef) and any(grad_free(d.decorator, visitor) for d in node.decorators):
                return True
            if isinstance(node, cst.With) and any(grad_free(i.item, visitor) for i in node.items):
                return True
        return False

    def under_cuda_check(self) -> bool:
        return any(isinstance(n, cst.If) and _mentions(n.test, "cuda") for n in self.stack)


# A decorator or context manager named for a grad-free mode (a project's own factory imported from
# another file: ``smart_inference_mode()``, ``no_grad_if(...)``).
GRAD_FREE_NAME = re.compile(r"inference_mode|no_grad", re.IGNORECASE)


def grad_free(expr: cst.BaseExpression, visitor: RuleVisitor) -> bool:
    """Whether ``expr`` (a decorator or a ``with`` item) turns autograd off: ``torch.no_grad()``,
    ``torch.inference_mode()``, ``torch.set_grad_enabled(False)``, a function of this file that
    returns one of them (followed to what it returns), or a name that says so."""
    call = expr if isinstance(expr, cst.Call) else None
    target = call.func if call is not None else expr
    if not isinstance(target, (cst.Name, cst.Attribute)):
        return False
    name = visitor.qualify(target) or ""
    if name in GRAD_FREE:
        return True
    if name in ("torch.set_grad_enabled", "torch.autograd.set_grad_enabled") and call is not None:
        # set_grad_enabled(phase == "train"): off on the evaluation path, where the rules would look
        return bool(call.args) and not _is_true(call.args[0].value)
    last = name.rsplit(".", 1)[-1]
    if call is not None and any(
            a.keyword is not None and GRAD_FREE_NAME.search(a.keyword.value) and _is_true(a.value)
            for a in call.args):
        return True  # a project's own context manager told to turn autograd off: eval_mode(m, no_grad=True)
    return last in visitor.facts.grad_free_factories or bool(GRAD_FREE_NAME.search(last))


def _decorated(func: cst.FunctionDef, names: set[str], visitor: TorchVisitor) -> bool:
    for d in func.decorators:
        dec = d.decorator
        name = visitor.get_qualified_name_for_call(dec) if isinstance(dec, cst.Call) else visitor.qualify(dec)
        if name in names:
            return True
    return False


def _mentions(node: cst.CSTNode, word: str) -> bool:
    for n in [node, *walk(node)]:
        if isinstance(n, cst.Name) and word in n.value:
            return True
        if isinstance(n, cst.SimpleString) and word in n.value:
            return True
    return False


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


# names_in() of the nodes of the piece being checked: id(node) -> (node, names). Both loss
# rules (PTT012, PTT013) ask for the same nodes; holding the node keeps its id from being reused.
# The engine empties it before each piece.
NAMES_IN: dict[int, tuple[cst.CSTNode, frozenset[str]]] = {}


def names_in(node: cst.CSTNode) -> frozenset[str]:
    """The names an expression reads: plain names and dotted ones (``self.total``), roots too."""
    hit = NAMES_IN.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    out: set[str] = set()
    for n in [node, *walk(node)]:
        kind = type(n)
        if kind is cst.Name:
            out.add(n.value)
        elif kind is cst.Attribute:
            full = get_full_name_for_node(n)
            if full:
                out.add(full)
    found = frozenset(out)
    NAMES_IN[id(node)] = (node, found)
    return found


def target_names(node: cst.CSTNode) -> set[str]:
    """The names an assignment target binds (``a``, ``a, b``, ``self.total``)."""
    if isinstance(node, (cst.Name, cst.Attribute)):
        full = get_full_name_for_node(node)
        return {full} if full else set()
    if isinstance(node, (cst.Tuple, cst.List)):
        return {n for e in node.elements for n in target_names(e.value)}
    if isinstance(node, cst.StarredElement):
        return target_names(node.value)
    return set()


class RuleVisitor(TorchVisitor):
    """A rule of this project: TorchFix's visitor base, with the engine's facts and tracker."""

    CODE = ""

    def __init__(self) -> None:
        super().__init__()
        if self.CODE:
            self.ERRORS = [TorchError(self.CODE, RULES[self.CODE].finding)]
        self.facts = Facts()
        self.where = Tracker()
        self.at_module_level = False
        self.torch: tuple[int, ...] | None = None
        self.device = "cpu"

    def flag(self, node: cst.CSTNode) -> None:
        self.add_violation(node, error_code=self.CODE, message=RULES[self.CODE].finding)

    def add_violation(self, node, error_code, message, replacement=None) -> None:
        # The one place that keeps every rule silent where its advice needs a torch the reader,
        # or the project (its exact pin, its declared floor), does not have.
        if self.lacks_advice(self.advice_needs(node)):
            return
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
        return self.metadata[QualifiedNameProvider].qname(call)

    def torch_before(self, release: tuple[int, ...]) -> bool:
        """The reader's torch is known to be older than ``release``."""
        return self.torch is not None and self.torch < release

    def pinned_before(self, release: tuple[int, ...]) -> bool:
        """The checked project pins torch exactly, to releases all older than ``release``."""
        pin = self.facts.project_torch()[1]
        return pin is not None and pin < release

    def supports_before(self, release: tuple[int, ...]) -> bool:
        """The checked project declares it runs on a torch older than ``release``: its floor
        (``torch>=1.8`` in the nearest requirement file, as PTT001 reads it) is older, so
        advice that needs ``release`` breaks on a torch the project supports."""
        floor = self.facts.project_torch()[0]
        if floor is None or floor >= release:
            return False
        # a stale floor: the project's own code already uses, unguarded, an advised API of
        # ``release`` or later (torch.load(..., weights_only=True) for 1.13), so it runs only
        # on a torch that has the advice
        proved = self.facts.proved_torch()
        return proved is None or proved < release

    def advice_needs(self, node: cst.CSTNode) -> tuple[int, ...] | None:
        """The first torch release that has what the rule's advice for ``node`` uses: the
        rule's ``needs_torch`` (registry.py); None where the advice works on every torch. A rule
        whose advised API differs per call (PTT005 per name, PTT031 per optimizer and device)
        overrides it."""
        code = self.CODE or next(iter(TORCHFIX_RULES.get(type(self), {}).values()), "")
        return RULES[code].needs_torch if code else None

    def lacks_advice(self, release: tuple[int, ...] | None) -> bool:
        """Advice that needs torch ``release`` breaks on a torch the code runs on: the
        reader's torch, the torch the project pins exactly, or the oldest it declares it
        supports (its floor) is older than ``release``."""
        return release is not None and (self.torch_before(release) or self.pinned_before(release)
                                        or self.supports_before(release))

    module: cst.Module | None = None  # the module (the file, or the piece of it) being walked

    def visit_Module(self, node: cst.Module) -> None:
        self.module = node
        self.reset()

    def reset(self) -> None:
        """Per-piece state; rules with memory override it."""


# --- TorchFix's visitors, narrowed ------------------------------------------------------------------

# A checkpoint key for NumPy's RNG state (np.random.get_state(): arrays the weights-only loader
# refuses), and the per-rank model-state files of Megatron and DeepSpeed, which hold that state
# and the run's argparse.Namespace beside the weights.
NUMPY_STATE = re.compile(r"(^|_)(np|numpy)_?(rng|random)|^rng_state", re.IGNORECASE)
_OBJECT_FILE = re.compile(r"mp_rank|model_optim_rng")
# DeepSpeed's helpers (deepspeed.utils.zero_to_fp32, Lightning's copy) that name those files in
# a checkpoint folder: the mp_rank_*_model_states file, the ZeRO ranks' *_optim_states files
_STATE_FILE_GETTERS = frozenset({"get_model_state_file", "get_model_state_files", "get_optim_files"})


def _names_state_file(node: cst.BaseExpression) -> bool:
    """The expression calls one of DeepSpeed's per-rank checkpoint-file helpers."""
    return any(type(n) is cst.Call and (get_full_name_for_node(n.func) or "").rsplit(".", 1)[-1]
               in _STATE_FILE_GETTERS for n in [node, *walk(node)])


def _strings(node: cst.CSTNode) -> list[str]:
    found = [node] if isinstance(node, (cst.SimpleString, cst.FormattedStringText)) else []
    found += [n for n in walk(node) if isinstance(n, (cst.SimpleString, cst.FormattedStringText))]
    return [n.value for n in found]


class _LoadFallback:
    """Knows the ``try`` statements around the node: a ``torch.load`` in the handler of a ``try``
    that already called ``torch.load`` is a deliberate fallback (an old torch without the
    argument, a payload the weights-only loader refused), not the call to change."""

    def visit_Try(self, node: cst.Try) -> None:
        self.tries.append(node)

    def leave_Try(self, node: cst.Try) -> None:
        if self.tries and self.tries[-1] is node:
            self.tries.pop()

    def custom_pickler(self, load: cst.Call) -> bool:
        """The load passes its own ``pickle_module`` (``torch.load(f, pickle_module=pickle)``, or
        third positional): torch raises "Can not safely load weights when explicit pickle_module
        is specified" with ``weights_only=True``, and from 2.6 such a load already defaults to
        False; the advice would break it."""
        return self.get_specific_arg(load, "pickle_module", 2) is not None

    def advice_needs(self, node: cst.CSTNode) -> tuple[int, ...] | None:
        """PTT001's release (weights_only: torch 1.13) for a load without the argument; a load
        that states it already runs only on a torch that has it, whatever floor is declared."""
        if isinstance(node, cst.Call) and self.get_specific_arg(node, "weights_only", -1) is not None:
            return None
        return RULES["PTT001"].needs_torch

    def per_release(self, load: cst.Call) -> bool:
        """The load sits in a branch of an ``if`` (or a conditional expression) that tests torch's
        version (``torch.__version__``, a name bound to an expression that reads it, or a flag
        named for torch 2.6 or for ``weights_only``), and the ``if`` states ``weights_only`` in
        one of its loads: the project chose per release how its files load (an explicit False
        from 2.6, the argument left out for a torch that lacks it), on both branches."""
        tests = [n for n in self.where.stack if isinstance(n, cst.If)]
        scope = self.where.function() or self.module
        if scope is not None:
            tests += [n for n in _walk_all(scope) if type(n) is cst.IfExp
                      and any(m is load for m in _walk_all(n))]
        return any(self._states_weights_only(n) and self._tests_torch_version(n.test) for n in tests)

    def _states(self, call: cst.Call) -> bool:
        """The call passes ``weights_only`` (True or False: the loader's mode is a choice)."""
        return self.get_specific_arg(call, "weights_only", -1) is not None

    def _states_weights_only(self, node: cst.CSTNode) -> bool:
        return any(type(n) is cst.Call and self.qname(n) == "torch.load" and self._states(n)
                   for n in _walk_all(node))

    def _tests_torch_version(self, test: cst.BaseExpression) -> bool:
        nodes = [test, *_walk_all(test)]
        if any(_reads_torch_version(n) for n in nodes):
            return True
        names = {n.value for n in nodes if type(n) is cst.Name}
        if any(_RELEASE_FLAG.search(n) for n in names) or any(
                type(n) is cst.Attribute and _RELEASE_FLAG.search(n.attr.value) for n in nodes):
            return True
        return bool(names & self.facts.torch_version_names)

    def project_needs_26(self) -> bool:
        """The checked project declares torch 2.6 or later, where ``weights_only`` defaults
        to True: a load without it is safe, and an explicit False was written on purpose."""
        floor = self.facts.project_torch()[0]
        return floor is not None and floor >= (2, 6)

    def project_decided(self, load: cst.Call) -> bool:
        """The project already chose how its files load, so the finding has nothing to add: it
        sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD (in the file or its package), or the file
        allow-lists classes with ``safe_globals``/``add_safe_globals`` or asks whether torch has
        them (its ``weights_only=False`` beside it is the choice it made, or the branch for a
        torch without them); or the load feeds torch2trt's ``TRTModule``, a TensorRT engine a
        local build wrote for this GPU (engines do not move between GPUs: not a download); or
        the load is one branch of a test of torch's version that states ``weights_only``."""
        return (self.facts.forces_unsafe_load or (self.facts.allow_lists and self._near_allow_list(load))
                or _feeds_engine(self, load) or self.per_release(load))

    def _near_allow_list(self, load: cst.Call) -> bool:
        """The load's function names ``safe_globals``/``add_safe_globals`` (calls it, or tests
        whether torch has it); at module level, the load sits in an ``if`` that does."""
        func = self.where.function()
        if func is not None:
            return any(_names_allow_list(n) for n in walk(func.body))
        return any(isinstance(node, cst.If) and any(_names_allow_list(n) for n in [node.test, *walk(node.test)])
                   and any(m is load for m in walk(node)) for node in self.where.stack)

    def reads_objects(self, load: cst.Call) -> bool:
        """The code shows the file loaded holds objects besides tensors, so weights_only=True
        alone would raise: the file reads Namespaces out of what it loads, or it pickles modules
        or Namespaces itself and the load reads back an in-memory buffer; the load's path names
        a per-rank model-state file (in the call, in a string bound to a name it uses, or in the
        ``if`` it sits under); or its function handles NumPy RNG state keys."""
        if self.facts.reads_namespaces:
            return True
        func = self.where.function()
        if func is None:
            return False
        names = {n.value for a in load.args for n in walk(a) if isinstance(n, cst.Name)}
        if self.facts.pickles_objects and self._reads_buffer(load, func):
            return True  # bytes this program serialized itself, objects and all
        helpers = self.facts.names_state_files
        for a in load.args:
            if any(_OBJECT_FILE.search(t) for t in _strings(a.value)) or (
                    helpers and _names_state_file(a.value)) or any(
                    _OBJECT_FILE.search(t) for t in _file_name_parts(a.value, func)):
                return True
        # names bound to DeepSpeed's per-rank file helpers (get_optim_files(d): each file a rank's)
        listed = {t.target.value for n in walk(func.body) if type(n) is cst.Assign and _names_state_file(n.value)
                  for t in n.targets if isinstance(t.target, cst.Name)} if helpers else set()
        for n in walk(func.body):
            kind = type(n)
            if kind is cst.Assign and any(isinstance(t.target, cst.Name) and t.target.value in names
                                          for t in n.targets):
                if any(_OBJECT_FILE.search(t) for t in _strings(n.value)) or (
                        helpers and _names_state_file(n.value)):
                    return True
            elif helpers and kind is cst.For and isinstance(n.target, cst.Name) and n.target.value in names and (
                    _names_state_file(n.iter) or (isinstance(n.iter, cst.Name) and n.iter.value in listed)):
                return True  # for f in get_optim_files(d): torch.load(f)
            elif kind is cst.Name and n.value in self.facts.state_key_names:
                return True
            elif kind is cst.SimpleString and NUMPY_STATE.search(n.value.strip("'\"bru")):
                return True
        for node in self.where.stack:
            if (isinstance(node, cst.If) and any(_OBJECT_FILE.search(t) for t in _strings(node.test))
                    and any(m is load for m in walk(node.body))):
                return True
        return self._used_as_object(load, func) or self._saved_with_objects(load, func)

    def _used_as_object(self, load: cst.Call, func: cst.FunctionDef) -> bool:
        """What the function does with the loaded value shows it is no tensor container: it is
        annotated as a Module, called, or asked for a module's methods (``.eval()``,
        ``.state_dict()``), or an item of it is called (a class stored in the file:
        ``klass = pkg["klass"]; klass(*args)``)."""
        names = _bound_to(load, func)
        if not names:
            return False
        items: set[str] = set()
        for n in walk(func.body):
            kind = type(n)
            if kind is cst.AnnAssign and n.value is not None and _unsubscript(n.value) is load:
                if "Module" in (get_full_name_for_node(n.annotation.annotation) or ""):
                    return True
            elif kind is cst.Assign and isinstance(n.value, cst.Subscript):
                root = _unsubscript(n.value)
                if isinstance(root, cst.Name) and root.value in names:
                    items |= {t.target.value for t in n.targets if isinstance(t.target, cst.Name)}
        for n in walk(func.body):
            if type(n) is not cst.Call:
                continue
            f = n.func
            if isinstance(f, cst.Name) and (f.value in names or f.value in items):
                return True
            if isinstance(f, cst.Subscript) and isinstance(_unsubscript(f), cst.Name) \
                    and _unsubscript(f).value in names:
                return True
            if (isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value in names
                    and f.attr.value in _MODULE_ONLY):
                return True
        return False

    def _saved_with_objects(self, load: cst.Call, func: cst.FunctionDef) -> bool:
        """The matching ``torch.save`` (in the same class, or the same outermost function, that
        writes a dict with a key this load reads) stores an object beside the tensors: a run's
        settings (``"args": self.args``), a ``.numpy()`` array, or what a ``get_...()`` method
        outside torch returns (a running normaliser, a statistics object)."""
        names = _bound_to(load, func)
        keys = _keys_read(load, names, func)
        if not keys:
            return False
        scope = next((n for n in self.where.stack if isinstance(n, cst.ClassDef)), None)
        if scope is None:
            scope = next((n for n in self.where.stack if isinstance(n, cst.FunctionDef)), None)
        if scope is None:
            return False
        saves = [n for n in _walk_all(scope) if type(n) is cst.Call and self.qname(n) == "torch.save"]
        for save in saves:
            args = _positional(save)
            if not args:
                continue
            entries = _dict_entries(args[0].value, scope)
            if keys & {k for k, _ in entries} and any(self._object_value(v, scope) for _, v in entries):
                return True
        return False

    def _object_value(self, value: cst.BaseExpression, scope: cst.CSTNode) -> bool:
        if isinstance(value, (cst.Name, cst.Attribute)):
            name = get_full_name_for_node(value) or ""
            if name.rsplit(".", 1)[-1] not in _SETTINGS:
                return False
            for n in _walk_all(scope):  # settings kept as a plain dict load fine
                if type(n) is cst.Assign and any(get_full_name_for_node(t.target) == name for t in n.targets
                                                 if isinstance(t.target, (cst.Name, cst.Attribute))):
                    v = n.value
                    if isinstance(v, (cst.Dict, cst.DictComp)) or (isinstance(v, cst.Call) and (
                            get_full_name_for_node(v.func) or "").rsplit(".", 1)[-1] in _PLAIN_MAKERS):
                        return False
            return True
        if isinstance(value, cst.Call):
            method = _method(value)
            if method == "numpy":
                return True
            q = self.qname(value) or ""
            last = (get_full_name_for_node(value.func) or "").rsplit(".", 1)[-1]
            return last.startswith("get_") and not q.startswith("torch.")
        return False

    def reads_own_output(self, load: cst.Call) -> bool:
        """The load reads back what this run just wrote, so nothing untrusted is unpickled: the
        stdout of a child process it started (``io.BytesIO(proc.stdout)``), or a path built from
        a name that the function's training loop (a loop calling ``backward()``), before the
        load, hands to ``torch.save`` or, with the module, to a checkpoint callback
        (``early_stopping(loss, model, path)`` in the loop, ``torch.load(path + "/ckpt.pth")``
        after it); bytes it pickled itself into a buffer (a function that calls ``torch.save`` into
        an ``io.BytesIO`` and loads from a buffer or a temporary file: objects passed between
        ranks); or a path with the same literal file name as one the function saved to before
        the load (``f"gather_{rank}.pkl"``). (A save in another branch of an ``if`` is not this
        run's file.)"""
        func = self.where.function()
        if func is None:
            return False
        args = _positional(load)
        if not args:
            return False
        value = args[0].value
        paths = _bare_names(value)
        if isinstance(value, cst.Name):
            name = value.value
            for n in _ordered(func.body):  # the last binding before the load
                if n is load:
                    break
                if type(n) is cst.Assign and any(isinstance(t.target, cst.Name)
                                                 and t.target.value == name for t in n.targets):
                    paths = paths | _bare_names(n.value)
                    value = n.value
        if _buffer_value(args[0].value, func, self) and any(
                _buffer_value(t, func, self) for t, _ in _saved_paths(func, self)):
            return True  # a payload this program pickled into a buffer (a collective's objects)
        own = _file_name_parts(args[0].value, func)
        if own and any(parts == own for _, parts in _saved_paths(func, self, before=load)):
            return True  # the file the function saved just before, under the same name pattern
        if isinstance(value, cst.Call) and (self.qname(value) or "").endswith("BytesIO") and value.args:
            inner = value.args[0].value
            if isinstance(inner, cst.Attribute) and inner.attr.value == "stdout":
                return True
            if isinstance(inner, cst.Call) and (self.qname(inner) or "") == "subprocess.check_output":
                return True
        if self._converted_to(load, func):
            return True  # convert_zero_checkpoint_to_fp32_state_dict(src, dst), then torch.load(dst)
        training = [n for n in walk(func.body) if type(n) in _LOOPS and _calls_backward(n)]
        for n in _ordered(func.body):
            if n is load:
                return False
            if type(n) is not cst.Call or not n.args:
                continue
            handed = {a.value.value for a in n.args if isinstance(a.value, cst.Name)}
            if not handed & paths or not any(any(m is n for m in walk(loop)) for loop in training):
                continue
            if self.qname(n) == "torch.save":
                return True
            if ("load" not in (get_full_name_for_node(n.func) or "").lower()
                    and any(self._module_arg(a.value) for a in n.args)):
                return True  # a checkpoint callback of the training loop
        return False

    def _converted_to(self, load: cst.Call, func: cst.FunctionDef) -> bool:
        """Before the load, the function hands the path it loads (the same name, or the same
        expression) as the output file to a converter that writes a checkpoint there
        (DeepSpeed's or Lightning's ``convert_zero_checkpoint_to_fp32_state_dict(src, dst)``),
        not in another branch of an ``if`` than the load's."""
        args = _positional(load)
        if not args:
            return False
        code = _EMPTY.code_for_node(args[0].value)
        for n in _ordered(func.body):
            if n is load:
                return False
            if type(n) is not cst.Call:
                continue
            at = _CONVERTERS.get((get_full_name_for_node(n.func) or "").rsplit(".", 1)[-1])
            if at is None:
                continue
            given = _positional(n)
            out = given[at[0]].value if len(given) > at[0] else next(
                (a.value for a in n.args if a.keyword is not None and a.keyword.value in at[1]), None)
            if out is not None and _EMPTY.code_for_node(out) == code and not _apart(func, n, load):
                return True
        return False

    def _module_arg(self, value: cst.BaseExpression) -> bool:
        name = get_full_name_for_node(value) if isinstance(value, (cst.Name, cst.Attribute)) else None
        return bool(name) and (name in self.facts.module_names
                               or bool(_MODULE_NAME.search(name.rsplit(".", 1)[-1])))

    def _reads_buffer(self, load: cst.Call, func: cst.FunctionDef) -> bool:
        """The load reads an in-memory buffer (``io.BytesIO(...)``, or a name bound to one here)."""
        args = _positional(load)
        if not args:
            return False
        value = args[0].value
        if isinstance(value, cst.Name):
            value = next((n.value for n in walk(func.body) if type(n) is cst.Assign and any(
                isinstance(t.target, cst.Name) and t.target.value == value.value for t in n.targets)), value)
        return isinstance(value, cst.Call) and (self.qname(value) or "").endswith("BytesIO")

    def reads_progress(self, load: cst.Call) -> bool:
        """The function reads only a training run's progress out of what it loads
        (``int(sd["global_step"])``, ``ckpt.get("epoch")``: to resume a schedule where the run
        stopped): its own training checkpoint, beside whose counters a run keeps its objects.
        The reads counted are those after the load, up to the next binding of its name."""
        func = self.where.function()
        if func is None:
            return False
        names = _bound_to(load, func)
        keys: set[str] = set()
        if not names:
            outer = [n for n in walk(func.body) if type(n) is cst.Subscript and n.value is load]
            keys = {_key(el.slice.value) or "" for n in outer for el in n.slice
                    if isinstance(el.slice, cst.Index)}
            return bool(outer) and all(_PROGRESS_KEY.match(k) for k in keys)
        after = False
        read: set[int] = set()
        uses: list[cst.Name] = []
        for n in _ordered(func.body):
            if n is load:
                after = True
                continue
            if not after:
                continue
            kind = type(n)
            if kind is cst.Assign and any(isinstance(t.target, cst.Name) and t.target.value in names
                                          for t in n.targets):
                break  # rebound: what follows reads another value
            if kind is cst.Subscript and isinstance(n.value, cst.Name) and n.value.value in names:
                read.add(id(n.value))
                keys |= {_key(el.slice.value) or "" if isinstance(el.slice, cst.Index) else ""
                         for el in n.slice}
            elif kind is cst.Call and _method(n) == "get" and isinstance(n.func.value, cst.Name) \
                    and n.func.value.value in names and n.args:
                read.add(id(n.func.value))
                keys.add(_key(n.args[0].value) or "")
            elif kind is cst.Name and n.value in names:
                uses.append(n)
        return bool(keys) and all(id(n) in read for n in uses) and all(_PROGRESS_KEY.match(k) for k in keys)

    def class_cache(self, load: cst.Call) -> bool:
        """The load reads back a file that another method of its class writes (a dataset's
        processed cache: ``process()`` saves ``self.processed_paths[0]``, ``__init__`` loads
        it), named by the same path expression or a literal file name of its own, and none of
        those saves shows it writes weights (``.state_dict()``, alone or in a dict: a training
        checkpoint, which weights_only=True loads as it is)."""
        func = self.where.function()
        if func is None:
            return False
        saves = self.class_saves(load, func, bare_suffix=False)
        return bool(saves) and not any(_saves_state_dicts(save, method) for method, save in saves)

    def class_writes(self, load: cst.Call, func: cst.FunctionDef) -> bool:
        return bool(self.class_saves(load, func))

    def class_saves(self, load: cst.Call, func: cst.FunctionDef,
                    bare_suffix: bool = True) -> list[tuple[cst.FunctionDef, cst.Call]]:
        """(method, ``torch.save`` call) of each file the class keeps that the load reads: a
        path held by the instance (``self.paths[0]``), or a path built from the instance the
        same way (``osp.join(self.processed_dir, f"{split}.pt")``), that another method of the
        same class hands to ``torch.save``; or a path with the same literal file name
        (``f"{name}_state.pt"``) as one such a method saves to (``save_checkpoint`` writes it,
        ``load_checkpoint`` reads it back), or a file-name pattern such a file fits
        (``f"{subset}_{kind}_split_dict.pt"`` read, ``f"{subset}_shuffle_split_dict.pt"``
        written). Without ``bare_suffix`` a literal name is one only with more than its
        extension (``f"{epoch}.pt"`` names no file of its own)."""
        args = _positional(load)
        if not args:
            return []
        cls = next((n for n in reversed(self.where.stack) if isinstance(n, cst.ClassDef)), None)
        if cls is None:
            return []
        saves = [(method, call, target, parts) for method in cls.body.body
                 if isinstance(method, cst.FunctionDef) and method is not func
                 for call, target, parts in _saves(method, self)]
        if not saves:
            return []
        value = args[0].value
        own = _file_name_parts(value, func)
        named = own and (bare_suffix or _names_a_file(own))
        pattern = _file_name_pattern(value, func)
        bound = _single_binding(value, func)
        code = _EMPTY.code_for_node(bound) if _reads_self(bound) else None
        return [(method, call) for method, call, target, parts in saves
                if (named and parts == own)  # save_checkpoint writes f"{name}_state.pt", load_checkpoint reads it
                or (pattern is not None and pattern.fullmatch(_file_name_template(target, method) or ""))
                or (code is not None and _EMPTY.code_for_node(_single_binding(target, method)) == code)]

    def in_load_fallback(self, load: cst.Call) -> bool:
        """The load is in the handler of a ``try`` that already loaded, and one of the two
        states ``weights_only`` (a retry with the same loader mode, for a reason of its own such
        as renamed keys, is as unsafe as the first load, and reported like it)."""
        handler = self.where._inner(cst.ExceptHandler)
        if handler is None:
            return False
        for t in reversed(self.tries):
            if any(h is handler for h in t.handlers):
                loads = [n for n in walk(t.body) if type(n) is cst.Call and self.qname(n) == "torch.load"]
                return bool(loads) and (self._states(load) or any(self._states(n) for n in loads))
        return False


# a checkpoint entry of a run's progress: a step or epoch counter, nothing a model needs
_PROGRESS_KEY = re.compile(r"^(global_|total_|last_|current_|cur_)?(steps?|epochs?|iters?|iterations?)$",
                           re.IGNORECASE)
# converters that write a checkpoint file: name -> (the output's position, its keywords)
_CONVERTERS = {"convert_zero_checkpoint_to_fp32_state_dict": (1, ("output_file", "output_dir"))}


def _apart(func: cst.FunctionDef, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """``a`` and ``b`` sit in different branches of one ``if`` of the function."""
    for n in walk(func.body):
        if type(n) is not cst.If or n.orelse is None:
            continue
        body = {id(m) for m in walk(n.body)}
        rest = {id(m) for m in walk(n.orelse)}
        if (id(a) in body and id(b) in rest) or (id(a) in rest and id(b) in body):
            return True
    return False


# calls that turn settings into a plain dict the weights-only loader reads
_PLAIN_MAKERS = frozenset({"dict", "vars", "asdict", "to_container", "to_dict"})
# methods only a module has: a loaded value asked for one is a pickled module, not weights
_MODULE_ONLY = frozenset({"eval", "train", "parameters", "named_parameters", "modules", "named_modules",
                          "children", "state_dict", "forward", "buffers", "requires_grad_", "zero_grad"})


_ALLOW_LIST_NAMES = frozenset({"safe_globals", "add_safe_globals"})
# a flag for the release that made weights_only the default (TORCH_2_6, _TORCH_GE_2_6), or for
# the argument itself (_WEIGHTS_ONLY_SUPPORTED)
_RELEASE_FLAG = re.compile(r"torch\w*2_?6|weights_only", re.IGNORECASE)


# the spellings of torch's version string
TORCH_VERSION_NAMES = ("torch.__version__", "torch.version.__version__")


def _reads_torch_version(node: cst.CSTNode) -> bool:
    return type(node) is cst.Attribute and get_full_name_for_node(node) in TORCH_VERSION_NAMES


def _names_allow_list(node: cst.CSTNode) -> bool:
    kind = type(node)
    if kind is cst.Name:
        return node.value in _ALLOW_LIST_NAMES
    if kind is cst.Attribute:
        return node.attr.value in _ALLOW_LIST_NAMES
    return kind is cst.SimpleString and node.value.strip("'\"") in _ALLOW_LIST_NAMES


def _engine_class(visitor: RuleVisitor, call: cst.BaseExpression) -> bool:
    """A call building torch2trt's ``TRTModule`` (a TensorRT engine, no Parameters)."""
    if not isinstance(call, cst.Call):
        return False
    name = visitor.qname(call) or get_full_name_for_node(call.func) or ""
    return name.startswith("torch2trt.") or name.rsplit(".", 1)[-1] == "TRTModule"


def _engine_names(visitor: RuleVisitor, func: cst.FunctionDef) -> set[str]:
    """The names (and ``self.x`` attributes) the function binds to a torch2trt ``TRTModule(...)``."""
    return {get_full_name_for_node(t.target) for n in walk(func.body)
            if type(n) is cst.Assign and _engine_class(visitor, n.value)
            for t in n.targets if isinstance(t.target, (cst.Name, cst.Attribute))}


def _feeds_engine(visitor: RuleVisitor, load: cst.Call) -> bool:
    """The load goes, whole, into ``x.load_state_dict`` of an ``x`` the function binds to a
    torch2trt ``TRTModule(...)``."""
    func = visitor.where.function()
    if func is None:
        return False
    names = _bound_to(load, func)
    engines = _engine_names(visitor, func)
    if not engines:
        return False
    for n in walk(func.body):
        if (type(n) is cst.Call and _method(n) == "load_state_dict" and n.args
                and isinstance(n.func.value, cst.Name) and n.func.value.value in engines):
            value = n.args[0].value
            if value is load or (isinstance(value, cst.Name) and value.value in names):
                return True
    return False


def _unsubscript(node: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(node, cst.Subscript):
        node = node.value
    return node


def _ordered(node: cst.CSTNode):
    """Like walk(), in source order."""
    stack = list(children(node))[::-1]
    while stack:
        n = stack.pop()
        yield n
        if type(n) not in _STOPS:
            stack.extend(list(children(n))[::-1])


def _walk_all(node: cst.CSTNode):
    """Every node under ``node``, nested functions and classes included."""
    stack = list(children(node))
    while stack:
        n = stack.pop()
        yield n
        stack.extend(children(n))


_NO_DEFS = (cst.SimpleStatementLine, cst.BaseExpression, cst.Decorator, cst.Parameters)


def _function_defs(node: cst.CSTNode):
    """Every function defined under ``node``, at any depth: ``_walk_all`` without entering
    simple statements or expressions, where no ``def`` can be (a tenth of the nodes)."""
    stack = list(children(node))
    while stack:
        n = stack.pop()
        if type(n) is cst.FunctionDef:
            yield n
        if not isinstance(n, _NO_DEFS):
            stack.extend(children(n))


def _bare_names(node: cst.BaseExpression) -> set[str]:
    """Plain names an expression reads, not the roots of dotted ones or settings (``args``)."""
    roots = {id(n.value) for n in [node, *walk(node)] if type(n) is cst.Attribute}
    return {n.value for n in [node, *walk(node)]
            if type(n) is cst.Name and id(n) not in roots and n.value not in _SETTINGS}


def _bound_to(load: cst.Call, func: cst.FunctionDef) -> set[str]:
    """The names the function binds to ``load`` (``pkg = torch.load(p)``)."""
    names: set[str] = set()
    for n in walk(func.body):
        if type(n) is cst.Assign and n.value is load:
            names |= {t.target.value for t in n.targets if isinstance(t.target, cst.Name)}
        elif type(n) is cst.AnnAssign and n.value is load and isinstance(n.target, cst.Name):
            names.add(n.target.value)
    return names


def _key(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        return node.value.strip("'\"bru")
    return None


def _keys_read(load: cst.Call, names: set[str], func: cst.FunctionDef) -> set[str]:
    """The string keys read out of the loaded dict (``pkg["state"]``, ``torch.load(p)["model"]``)."""
    keys: set[str] = set()
    for n in walk(func.body):
        if type(n) is cst.Subscript and (n.value is load or (isinstance(n.value, cst.Name)
                                                                 and n.value.value in names)):
            for el in n.slice:
                if isinstance(el.slice, cst.Index):
                    k = _key(el.slice.value)
                    if k:
                        keys.add(k)
    return keys


def _dict_entries(value: cst.BaseExpression, scope: cst.CSTNode) -> list[tuple[str, cst.BaseExpression]]:
    """(key, value) of the dict a ``torch.save`` writes: a dict literal, or a name bound in
    ``scope`` to one or filled item by item (``pkg["args"] = args``)."""
    def literal(d: cst.BaseExpression) -> list[tuple[str, cst.BaseExpression]]:
        if not isinstance(d, cst.Dict):
            return []
        return [(k, e.value) for e in d.elements if isinstance(e, cst.DictElement)
                for k in [_key(e.key)] if k]
    if isinstance(value, cst.Dict):
        return literal(value)
    if not isinstance(value, cst.Name):
        return []
    found: list[tuple[str, cst.BaseExpression]] = []
    for n in _walk_all(scope):
        if type(n) is not cst.Assign:
            continue
        for t in n.targets:
            if isinstance(t.target, cst.Name) and t.target.value == value.value:
                found += literal(n.value)
            elif (isinstance(t.target, cst.Subscript) and isinstance(t.target.value, cst.Name)
                  and t.target.value.value == value.value):
                el = t.target.slice[0].slice if t.target.slice else None
                k = _key(el.value) if isinstance(el, cst.Index) else None
                if k:
                    found.append((k, n.value))
    return found


class UnsafeLoad(_LoadFallback, TorchUnsafeLoadVisitor, RuleVisitor):
    """PTT001 through TorchFix's TOR102 (``torch.load`` without ``weights_only``): a risk only
    before torch 2.6, where ``weights_only`` defaults to False, and not where the code already
    loads under ``torch.serialization.safe_globals`` (written for the weights-only loader)."""

    def add_violation(self, node, error_code, message, replacement=None) -> None:
        if (self.torch is None or not self.torch_before((2, 6)) or self.project_needs_26()
                or self.where.under(SAFE_GLOBALS, self) or self.project_decided(node)
                or (isinstance(node, cst.Call) and self.custom_pickler(node))
                or self.in_load_fallback(node) or self.reads_objects(node) or self.reads_own_output(node)
                or self.class_cache(node) or self.reads_progress(node) or dead_branch(self.where.stack, node)):
            return
        RuleVisitor.add_violation(self, node, error_code, message, replacement)

    def reset(self) -> None:
        self.tries: list[cst.Try] = []


def _dataset_arg(call: cst.Call, visitor: RuleVisitor) -> cst.BaseExpression | None:
    arg = visitor.get_specific_arg(call, "dataset", 0)
    return arg.value if arg is not None else None


def decodes_per_sample(value: cst.BaseExpression | None, visitor: RuleVisitor) -> bool:
    """A dataset that decodes or transforms each sample when it is read: an image folder, a
    torchvision dataset, anything built with ``transform=``, or a name bound to one."""
    if value is None:
        return False
    if isinstance(value, cst.Name):
        return value.value in visitor.facts.decoding_datasets
    if isinstance(value, cst.Call):
        name = visitor.qname(value) or ""
        return (name.startswith("torchvision.datasets.") or name.endswith(IMAGE_DATASETS)
                or visitor.get_specific_arg(value, "transform", -1) is not None)
    return False


class SynchronizedDataLoader(TorchSynchronizedDataLoaderVisitor, RuleVisitor):
    """PTT020 through TorchFix's TOR401 (``DataLoader`` without ``num_workers``), only where the
    dataset decodes or transforms each sample: an in-memory or iterable dataset gains nothing
    from workers, or is read twice by them. Not over a dataset on a device (workers would touch
    CUDA in forked processes), nor one the code changes after building the loader (the advised
    persistent workers would keep stale copies of it)."""

    def add_violation(self, node, error_code, message, replacement=None) -> None:
        value = _dataset_arg(node, self)
        if decodes_per_sample(value, self) and not (isinstance(value, cst.Call) and _device_call(value)):
            RuleVisitor.add_violation(self, node, error_code, message, replacement)


# TorchFix visitor -> {TorchFix code: our code}
TORCHFIX_RULES = {
    UnsafeLoad: {"TOR102": "PTT001"},
    SynchronizedDataLoader: {"TOR401": "PTT020"},
}


# --- saving and loading ------------------------------------------------------------------------

class LoadWeightsOnlyFalse(_LoadFallback, RuleVisitor):
    """PTT001, the half TorchFix lacks: an explicit ``weights_only=False``."""

    CODE = "PTT001"

    def reset(self) -> None:
        self.tries = []
        self.statement: cst.CSTNode | None = None
        self.previous: dict[int, cst.CSTNode] = {}  # id(statement) -> the one right before it

    def _siblings(self, body) -> None:
        for before, after in zip(body, body[1:]):
            self.previous[id(after)] = before

    def visit_Module(self, node: cst.Module) -> None:
        super().visit_Module(node)
        self._siblings(node.body)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._siblings(node.body)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.statement = node

    def visit_Call(self, node: cst.Call) -> None:
        if self._unsafe_load(node):
            if (not self.in_load_fallback(node) and not self.custom_pickler(node)
                    and not self.project_decided(node)
                    and not self.reads_objects(node) and not self.reads_own_output(node)
                    and not self.deliberate() and not self.trusted_file(node)
                    and not self.replaces_torch_internal()
                    and not self.format_unknown(node) and not dead_branch(self.where.stack, node)):
                self.flag(node)

    def replaces_torch_internal(self) -> bool:
        """The load is in a function the code puts in place of one of torch's own
        (``torch.storage._load_from_bytes = _mine``): it keeps the mode torch's function uses."""
        func = self.where.function()
        return func is not None and func.name.value in self.facts.torch_replacements

    def format_unknown(self, load: cst.Call) -> bool:
        """The stated ``weights_only=False`` is the choice for a file whose content the code does
        not show to be tensors, and uses as more than weights: its function hands the whole load
        to another function (a project's loader, which knows its formats), probes it for format
        keys (``"state" in ckpt``: files of several formats, others' among them), or reads only
        entries that are not weights out of it (metrics, a config: the objects beside the
        tensors, which True may refuse), or reads a Lightning checkpoint's ``hyper_parameters``
        (the run's config objects, beside its weights). Only a comment is missing there."""
        func = self.where.function()
        if func is None:
            return False
        names = _bound_to(load, func)
        if not names:
            return False
        keys: set[str] = set()
        subscripted: set[int] = set()
        nodes = list(walk(func.body))
        for n in nodes:
            kind = type(n)
            if kind is cst.Comparison and any(
                    isinstance(c.operator, (cst.In, cst.NotIn)) and isinstance(c.comparator, cst.Name)
                    and c.comparator.value in names for c in n.comparisons) and isinstance(
                    n.left, (cst.SimpleString, cst.ConcatenatedString)):
                return True  # "state" in ckpt
            if kind is cst.Subscript and isinstance(n.value, cst.Name) and n.value.value in names:
                subscripted.add(id(n.value))
                for el in n.slice:
                    k = _key(el.slice.value) if isinstance(el.slice, cst.Index) else None
                    keys.add(k or "")
            elif kind is cst.Call and _method(n) == "get" and isinstance(n.func.value, cst.Name) \
                    and n.func.value.value in names and n.args and _key(n.args[0].value):
                subscripted.add(id(n.func.value))  # ckpt.get("config", {}): a keyed read too
                keys.add(_key(n.args[0].value))
            elif kind is cst.Call and _method(n) != "load_state_dict" and not (
                    self.qname(n) or "").startswith(("torch.", "builtins.")) and not (
                    isinstance(n.func, cst.Name) and n.func.value in _BUILTINS) and any(
                    isinstance(a.value, cst.Name) and a.value.value in names for a in n.args):
                return True  # load_start(args, model, ckpt): the project's loader reads it
        if keys & _HPARAMS_KEYS:
            return True  # a Lightning checkpoint's hyper_parameters: the run's config objects
        uses = [n for n in nodes if type(n) is cst.Name and n.value in names]
        targets = {id(t.target) for n in nodes if type(n) is cst.Assign for t in n.targets}
        reads = [n for n in uses if id(n) not in targets]
        return bool(reads) and all(id(n) in subscripted for n in reads) and bool(keys) and not any(
            not k or _WEIGHT_KEY.search(k) for k in keys)

    def trusted_file(self, load: cst.Call) -> bool:
        """The stated ``weights_only=False`` is the advice's own choice for a file this program
        writes itself, where the code shows nothing True could go on: a resume (the function
        restores an optimizer's, scheduler's or scaler's state from what it loaded: the run's own
        training checkpoint), or a cache (the function also passes the path it loads to
        ``torch.save``). (A loader returning the whole load is still reported: nothing shows
        what its file holds or who wrote it.)"""
        func = self.where.function()
        if func is None:
            return False
        names = _bound_to(load, func)
        args = _positional(load)
        path = get_full_name_for_node(args[0].value) if args and isinstance(
            args[0].value, (cst.Name, cst.Attribute)) else None
        for n in walk(func.body):
            if type(n) is not cst.Call:
                continue
            if _method(n) == "load_state_dict" and n.args and _RESUMED.search(
                    (_receiver_name(n) or "").rsplit(".", 1)[-1]):
                root = _unsubscript(n.args[0].value)
                if root is load or (isinstance(root, cst.Name) and root.value in names):
                    return True
            elif path and self.qname(n) == "torch.save":
                saved = _positional(n)
                target = saved[1].value if len(saved) > 1 else None
                if target is not None and get_full_name_for_node(target) == path:
                    return True
        return self.class_writes(load, func)

    def _unsafe_load(self, call: cst.Call) -> bool:
        """``torch.load`` with an explicit ``weights_only=False``."""
        if self.qname(call) != "torch.load":
            return False
        arg = self.get_specific_arg(call, "weights_only", -1)
        return arg is not None and _is_false(arg.value)

    def _loads_unsafely(self, stmt: cst.SimpleStatementLine) -> bool:
        """The statement calls ``torch.load`` with an explicit ``weights_only=False``."""
        return any(type(n) is cst.Call and self._unsafe_load(n) for n in walk(stmt))

    def deliberate(self) -> bool:
        """The explicit False is a choice the code shows was made knowingly: a comment on or
        above the statement speaks of weights_only or pickling and gives a reason; the project requires torch 2.6 or later, where
        True is the default and False had to be written to opt out; or the function restores
        Python's or NumPy's RNG state (a tuple and arrays the weights-only loader refuses)."""
        if self.project_needs_26():
            return True
        stmt = self.statement
        while stmt is not None:
            comments = [ln.comment.value for ln in stmt.leading_lines if ln.comment is not None]
            if stmt.trailing_whitespace.comment is not None:
                comments.append(stmt.trailing_whitespace.comment.value)
            if any(_EXPLAINS_LOAD.search(c) and _GIVES_REASON.search(c) for c in comments):
                return True
            # a run of such loads, line after line, under one comment: the comment is theirs
            before = self.previous.get(id(stmt))
            if stmt.leading_lines or not (isinstance(before, cst.SimpleStatementLine)
                                          and self._loads_unsafely(before)):
                break
            stmt = before
        func = self.where.function()
        return func is not None and any(
            type(n) is cst.Call and self.qname(n) in _RNG_RESTORERS for n in walk(func.body))


_EMPTY = cst.Module([])  # renders an expression's code
_BUILTINS = frozenset(dir(builtins))
# a checkpoint key that may name weights (a state dict, a model's entry)
# a Lightning checkpoint's entry of the run's hyperparameters (config objects, not weights)
_HPARAMS_KEYS = frozenset({"hyper_parameters", "hparams"})
_WEIGHT_KEY = re.compile(r"state|weight|model|param|net|ema|module|encoder|decoder|generator|backbone"
                         r"|dict|ckpt|checkpoint", re.IGNORECASE)


def dead_branch(stack: list[cst.CSTNode], node: cst.CSTNode) -> bool:
    """The node sits in a branch no run takes: the ``else`` of ``if 1:`` / ``if True:``, or the
    body of ``if 0:`` / ``if False:`` (code switched off by hand)."""
    for outer in stack:
        if not isinstance(outer, cst.If):
            continue
        if _is_true(outer.test):
            dead = outer.orelse
        elif _is_false(outer.test):
            dead = outer.body
        else:
            continue
        if dead is not None and any(m is node for m in walk(dead)):
            return True
    return False


def _instance_path(node: cst.BaseExpression) -> bool:
    """``self.path``, ``self.paths[0]``, ``self.files["cache"]``: a value the instance holds."""
    while True:
        if isinstance(node, cst.Attribute):
            node = node.value
        elif isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(
                node.slice[0].slice, cst.Index) and isinstance(
                node.slice[0].slice.value, (cst.Integer, cst.SimpleString)):
            node = node.value
        else:
            return isinstance(node, cst.Name) and node.value == "self"

def _file_name_parts(value: cst.BaseExpression, func: cst.FunctionDef, depth: int = 3) -> tuple[str, ...]:
    """The literal pieces of a path expression, each name it reads followed to its only binding
    in the function (``p = os.path.join(d, f"{name}_state.pt")`` gives ``("_state.pt",)``), or
    to its bindings where each gives the same pieces: the
    file-name pieces (with a letter or digit, and a dot, slash or underscore), quotes dropped.
    Empty when the path names no file of its own (``args.resume``)."""
    parts: list[str] = []
    for n in [value, *walk(value)]:
        if isinstance(n, cst.FormattedStringText):
            parts.append(n.value)
        elif isinstance(n, cst.SimpleString):
            parts.append(n.value.lstrip("bBrRuU").strip("'\""))
        elif isinstance(n, cst.Name) and depth:
            bound = [a.value for a in _ordered(func.body) if type(a) is cst.Assign and any(
                isinstance(t.target, cst.Name) and t.target.value == n.value for t in a.targets)]
            if len(bound) == 1 and bound[0] is not value:
                parts += _file_name_parts(bound[0], func, depth - 1)
            elif len(bound) > 1:  # rebound (the rank's file, then each rank's): one pattern
                each = {_file_name_parts(b, func, depth - 1) for b in bound if b is not value}
                if len(each) == 1:
                    parts += next(iter(each))
    return tuple(sorted({p for p in parts if any(c in p for c in "./_") and any(c.isalnum() for c in p)}))


def _single_binding(value: cst.BaseExpression, func: cst.FunctionDef) -> cst.BaseExpression:
    """``value``, or for a name the function binds once, what it binds it to."""
    if not isinstance(value, cst.Name):
        return value
    bound = [a.value for a in _ordered(func.body) if type(a) is cst.Assign and any(
        isinstance(t.target, cst.Name) and t.target.value == value.value for t in a.targets)]
    return bound[0] if len(bound) == 1 else value


def _reads_self(node: cst.BaseExpression) -> bool:
    return any(type(n) is cst.Name and n.value == "self" for n in [node, *walk(node)])


_EXTENSION = re.compile(r"\.\w+$")


def _names_a_file(parts: tuple[str, ...]) -> bool:
    """Literal file-name pieces with more than an extension (``_state.pt``, not ``.pt``)."""
    return any(any(c.isalnum() for c in _EXTENSION.sub("", p.rsplit("/", 1)[-1])) for p in parts)


def _file_name_template(value: cst.BaseExpression, func: cst.FunctionDef) -> str | None:
    """The file name a path expression ends with, each interpolated piece as ``\0``: the last
    argument of ``os.path.join(...)``, the right side of ``+`` or ``/``, a name bound once in
    the function followed (``f"{subset}_split_dict.pt"`` gives ``"\0_split_dict.pt"``)."""
    for _ in range(4):
        value = _single_binding(value, func)
        if isinstance(value, cst.Call) and _positional(value):
            value = _positional(value)[-1].value
        elif isinstance(value, cst.BinaryOperation):
            value = value.right
        else:
            break
    if isinstance(value, cst.SimpleString):
        return value.value.lstrip("bBrRuU").strip("'\"").rsplit("/", 1)[-1]
    if isinstance(value, cst.FormattedString):
        text = "".join(p.value if isinstance(p, cst.FormattedStringText) else "\0" for p in value.parts)
        return text.rsplit("/", 1)[-1]
    return None


def _file_name_pattern(value: cst.BaseExpression, func: cst.FunctionDef) -> re.Pattern | None:
    """A pattern for the file names a path expression can give, where its file name is an
    f-string with literal text beyond its extension (``f"{a}_{b}_split_dict.pt"``)."""
    template = _file_name_template(value, func)
    if template is None or "\0" not in template or not _names_a_file(tuple(template.split("\0"))):
        return None
    return re.compile(".*".join(re.escape(p) for p in template.split("\0")), re.DOTALL)


def _saved_paths(func: cst.FunctionDef, visitor: RuleVisitor, before: cst.CSTNode | None = None):
    """(the path expression, its file-name pieces) of each ``torch.save`` of the function (only
    those before ``before`` when given)."""
    for _, target, parts in _saves(func, visitor, before):
        yield target, parts


def _saves(func: cst.FunctionDef, visitor: RuleVisitor, before: cst.CSTNode | None = None):
    """(the call, its path expression, the path's file-name pieces) of each ``torch.save`` of
    the function (only those before ``before`` when given)."""
    for n in _ordered(func.body):
        if n is before:
            return
        if type(n) is cst.Call and visitor.qname(n) == "torch.save":
            saved = _positional(n)
            target = saved[1].value if len(saved) > 1 else visitor.get_specific_arg(n, "f", -1)
            if isinstance(target, cst.Arg):
                target = target.value
            if target is not None:
                yield n, target, _file_name_parts(target, func)


def _saves_state_dicts(save: cst.Call, func: cst.FunctionDef) -> bool:
    """The ``torch.save`` writes a ``.state_dict()``, alone or as an entry of the dict it saves
    (a literal, or a name the function fills: ``blob["weights"] = net.state_dict()``)."""
    args = _positional(save)
    if not args:
        return False
    obj = args[0].value
    values = [obj, *(v for _, v in _dict_entries(obj, func))]
    return any(type(n) is cst.Call and _method(n) == "state_dict" for v in values for n in [v, *walk(v)])


def _buffer_value(value: cst.BaseExpression, func: cst.FunctionDef, visitor: RuleVisitor) -> bool:
    """``io.BytesIO(...)``, a temporary file, or a name bound to one in the function (by an
    assignment or ``with ... as f``): bytes held by this process, not a file someone shipped."""
    def buffer(v: cst.BaseExpression) -> bool:
        q = (visitor.qname(v) or get_full_name_for_node(v.func) or "") if isinstance(v, cst.Call) else ""
        return q.endswith(("BytesIO", "TemporaryFile", "SpooledTemporaryFile"))
    if isinstance(value, cst.Name):
        for n in walk(func.body):
            if type(n) is cst.Assign and any(isinstance(t.target, cst.Name) and t.target.value == value.value
                                             for t in n.targets) and buffer(n.value):
                return True
            if type(n) is cst.WithItem and n.asname is not None and isinstance(n.asname.name, cst.Name) \
                    and n.asname.name.value == value.value and buffer(n.item):
                return True
        return False
    return buffer(value)


# the receiver of a load_state_dict that restores training state, not weights: a resume
_RESUMED = re.compile(r"optim|(^|_)opt(s|_|\d|$)|sched|scaler", re.IGNORECASE)


# a comment that says why a load is not weights-only: it names the loader's mode or pickling
# and gives a reason (a heading that only names the mode, "The anti-pattern: weights_only=False",
# is not one)
_EXPLAINS_LOAD = re.compile(r"weights_only|weights-only|unpickl|pickle|security|unsafe|\brisks?\b",
                            re.IGNORECASE)
_GIVES_REASON = re.compile(r"\b(because|cannot|can't|can ?not|need|needs|required?|requires|must|"
                           r"since|so that|legacy|trusted|allow|fails?|won't|refuses?|raises?|"
                           r"to (load|read|keep|restore))\b",
                           re.IGNORECASE)
# restorers of RNG state whose saved form the weights-only loader refuses
_RNG_RESTORERS = frozenset({"random.setstate", "numpy.random.set_state"})


def _plain_load(visitor: RuleVisitor, value: cst.BaseExpression) -> cst.Call | None:
    """``torch.load(...)`` (or one subscripted: ``torch.load(p)["model"]``), else None."""
    while isinstance(value, cst.Subscript):
        value = value.value
    if isinstance(value, cst.Call) and visitor.qname(value) == "torch.load":
        return value
    return None


# a name that says where a value goes (PTT002: a cache built with one is not from the CPU)
_DEVICE_WORD = re.compile(r"cuda|gpu|device", re.IGNORECASE)


_MOVER = re.compile(r"^(to_(device|cuda|gpu)|move_to(_device)?|send_to_device|recursive_to)$")


class LoadWithoutMapLocation(RuleVisitor):
    """A load without ``map_location`` whose result (or the module it is loaded into) is moved
    to a device afterwards, in the same function (``.to()``, ``.cuda()``, ``to_device(x, ...)``):
    the tip's case, where the tensors first land
    on the device they were saved from. Not in a file that saves its tensors from the CPU
    (``torch.save(x.cpu(), ...)``): what it loads lands on the CPU anyway."""

    CODE = "PTT002"

    def reset(self) -> None:
        self.pending: dict[int, list[tuple[int, cst.Call, set[str]]]] = {}  # scope -> (order, load, names)
        self.moved: dict[int, list[tuple[int, str]]] = {}  # scope -> (order, name .to()/.cuda() is called on)
        self.order = 0
        # scope -> (order, value bound) and (order, name saved, the path's code)
        self.built: dict[int, list[tuple[int, cst.BaseExpression]]] = {}
        self.saves: dict[int, list[tuple[int, str, str]]] = {}

    def _scope(self) -> int:
        func = self.where.function()
        return id(func) if func else 0

    def _cache(self, scope: int, call: cst.Call, names: set[str]) -> bool:
        """The load reads back a file the same scope writes with ``torch.save(x, path)`` (the
        same name, the same path: a cache, ``if exists: x = load(path) else: x = build();
        save(x, path)``), and nothing the scope binds before that save is put on a device (no
        ``.to()``, no ``.cuda()``, no name holding "cuda", "gpu" or "device"): the file was
        saved from the CPU, so the load lands there anyway."""
        path = self.get_specific_arg(call, "f", 0)
        if path is None:
            return False
        code = _EMPTY.code_for_node(path.value)
        saves = [when for when, n, p in self.saves.get(scope, []) if p == code and n in names]
        if not saves:
            return False
        return not any(
            order < max(saves) and any(
                (isinstance(n, cst.Name) and _DEVICE_WORD.search(n.value))
                or (isinstance(n, cst.Attribute) and n.attr.value in ("to", "cuda"))
                for n in [value, *walk(value)])
            for order, value in self.built.get(scope, []))

    def _load(self, value: cst.BaseExpression) -> cst.Call | None:
        call = _plain_load(self, value)
        if (call is None or _star_kwargs(call) or self.facts.saves_from_cpu
                or self.get_specific_arg(call, "map_location", 1) is not None
                or dead_branch(self.where.stack, call)):  # the else of ``if 1:`` never runs
            return None
        return call

    def visit_Assign(self, node: cst.Assign) -> None:
        names = {n for t in node.targets for n in target_names(t.target)}
        call = self._load(node.value)
        if call is not None:
            self.order += 1
            self.pending.setdefault(self._scope(), []).append((self.order, call, names))
        else:  # what else the scope binds before a save (a cache built on the CPU)
            self.built.setdefault(self._scope(), []).append((self.order, node.value))

    def visit_Call(self, node: cst.Call) -> None:
        method = _method(node)
        self.order += 1
        if method == "load_state_dict" and node.args:
            value = node.args[0].value
            call = self._load(value)
            receiver = get_full_name_for_node(node.func.value)
            if call is not None and receiver:
                self.pending.setdefault(self._scope(), []).append((self.order, call, {receiver}))
            elif receiver:  # sd = torch.load(p); model.load_state_dict(sd["model"])
                while isinstance(value, cst.Subscript):
                    value = value.value
                loaded = get_full_name_for_node(value) if isinstance(value, (cst.Name, cst.Attribute)) else None
                for _, _, names in self.pending.get(self._scope(), []):
                    if loaded in names:
                        names.add(receiver)
        elif (self.qname(node) == "torch.save" and len(node.args) > 1
              and isinstance(node.args[0].value, cst.Name)):
            path = self.get_specific_arg(node, "f", 1)
            if path is not None:
                self.saves.setdefault(self._scope(), []).append(
                    (self.order, node.args[0].value.value, _EMPTY.code_for_node(path.value)))
        elif method in ("to", "cuda"):
            receiver = node.func.value
            while isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute):
                receiver = receiver.func.value  # model.eval().cuda()
            name = get_full_name_for_node(receiver) if isinstance(receiver, (cst.Name, cst.Attribute)) else None
            if name:
                self.moved.setdefault(self._scope(), []).append((self.order, name))
        elif node.args and _MOVER.search((get_full_name_for_node(node.func) or "").rsplit(".", 1)[-1]):
            first = node.args[0].value  # to_device(checkpoint, device)
            name = get_full_name_for_node(first) if isinstance(first, (cst.Name, cst.Attribute)) else None
            if name:
                self.moved.setdefault(self._scope(), []).append((self.order, name))

    def _finish(self, scope: int) -> None:
        moved = self.moved.pop(scope, [])
        for order, call, names in self.pending.pop(scope, []):
            if any(when > order and name in names for when, name in moved) and not self._cache(
                    scope, call, names):
                self.flag(call)
        self.built.pop(scope, None)
        self.saves.pop(scope, None)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._finish(id(node))

    def leave_Module(self, node: cst.Module) -> None:
        self._finish(0)


_MODEL_WORD = re.compile(r"model|(^|[._])net|net(\d*|[A-Z])$|network|module|encoder|decoder|backbone|generator"
                         r"|discriminator", re.IGNORECASE)


# the last name of a receiver whose state is where the data stands, not weights
_DATA_STATE = re.compile(r"data|loader|sampler|batch|dataset|iterator", re.IGNORECASE)


# names in a file's code that show a model too large for a second copy to be harmless (PTT003)
LARGE_MODEL = re.compile(r"\b(FullyShardedDataParallel|FSDP|fully_shard|init_empty_weights"
                         r"|load_checkpoint_and_dispatch|low_cpu_mem_usage|device_map|\w*CausalLM"
                         r"|from_config)\b")


class LoadStateDictWithoutMmap(RuleVisitor):
    CODE = "PTT003"

    def reset(self) -> None:
        self.loaded: dict[str, bool] = {}  # name -> bound to torch.load(...) without mmap=True

    def _plain(self, value: cst.BaseExpression) -> bool:
        call = _plain_load(self, value)
        if call is None:
            return False
        mmap = self.get_specific_arg(call, "mmap", -1)
        return mmap is None or not _is_true(mmap.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            if isinstance(t.target, cst.Name):
                self.loaded[t.target.value] = self._plain(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        if _method(node) != "load_state_dict" or not node.args:
            return
        assign = self.get_specific_arg(node, "assign", -1)
        if assign is not None and _is_true(assign.value):
            return  # the meta-device recipe
        strict = self.get_specific_arg(node, "strict", 1)
        if strict is not None and not _is_true(strict.value):
            return  # a partial load: with assign=True the keys it lacks would stay on the meta device
        receiver = get_full_name_for_node(node.func.value) or ""
        if "module" in receiver.split(".")[1:]:
            return  # ``ddp.module``: a wrapper (DDP, DataParallel) already holds these parameters
        if not (_MODEL_WORD.search(receiver) or receiver in self.facts.module_names):
            return  # an optimizer, a scheduler, a scaler: no weights to build on the meta device
        if receiver not in self.facts.module_names and _DATA_STATE.search(receiver.rsplit(".", 1)[-1]):
            return  # a data loader, sampler or batch generator: its position, not weights
        value = node.args[0].value
        while isinstance(value, cst.Subscript):  # checkpoint["model"]
            value = value.value
        if isinstance(value, cst.Name):
            # a parameter holds whatever the caller passes: not this file's torch.load (a forwarding
            # method such as ``def load_state_dict(self, sd): return self.model.load_state_dict(sd)``)
            default = value.value in self.facts.load_names and not _is_param(self.where.function(), value.value)
            plain = self.loaded.get(value.value, default)
        else:
            plain = self._plain(node.args[0].value)
        if (plain and not self._params_taken(node, receiver) and not self._per_file(node)
                and not self._engine(receiver) and not dead_branch(self.where.stack, node)
                and self._large_model()):
            self.flag(node)

    def _large_model(self) -> bool:
        """The file shows its models' weights are a large share of memory, where the advice
        pays: it shards them (FSDP, fully_shard), loads them the big-model way elsewhere
        (accelerate's init_empty_weights, a device_map, low_cpu_mem_usage) or builds causal
        language models (``...ForCausalLM``, ``from_config``); the engine reads it from the
        file's code (``LARGE_MODEL``). A model of a few hundred MB loaded once holds its
        second copy only for a moment."""
        return self.facts.large_models

    def _per_file(self, call: cst.Call) -> bool:
        """The load_state_dict sits in a ``for`` loop that ``torch.load``s the file its loop
        variable names (``for f in shard_files: model.load_state_dict(torch.load(f), strict=False)``):
        one shard, or one tensor, is held beside the weights at a time, the memory-efficient
        path already."""
        for node in reversed(self.where.stack):
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                return False
            if isinstance(node, cst.For) and any(m is call for m in walk(node.body)):
                turn = set(target_names(node.target))
                if any(type(n) is cst.Call and self.qname(n) == "torch.load" and n.args
                       and turn & _bare_names(n.args[0].value) for n in walk(node.body)):
                    return True
        return False

    def _engine(self, receiver: str) -> bool:
        """The receiver is torch2trt's ``TRTModule``: a serialized TensorRT engine, no Parameters
        to build on the meta device."""
        func = self.where.function()
        return func is not None and receiver in _engine_names(self, func)

    def _params_taken(self, call: cst.Call, receiver: str) -> bool:
        """Something already holds the module's parameters, which ``assign=True`` would replace
        behind its back: earlier in the function (or anywhere in the class, for ``self.x``), the
        module was moved (``.to()``, ``.cuda()``), its ``.parameters()`` handed out (an
        optimizer), or it was wrapped (an EMA, DDP, FSDP, ``torch.compile``); or the object keeps
        an optimizer or EMA (``self.optimizer = ...``)."""
        func = self.where.function()
        nodes = []
        body = func.body if func is not None else (
            self.module
            if not any(isinstance(n, SCOPES) for n in self.where.stack) else None)  # top-level code
        if body is not None:
            for n in _ordered(body):
                if n is call:
                    break
                nodes.append(n)
        cls = next((n for n in reversed(self.where.stack) if isinstance(n, cst.ClassDef)), None)
        if cls is not None and receiver.startswith("self."):
            for n in _walk_all(cls):
                if type(n) is cst.Assign and any(
                        isinstance(t.target, cst.Attribute) and isinstance(t.target.value, cst.Name)
                        and t.target.value.value == "self" and _HOLDS_PARAMS.search(t.target.attr.value)
                        for t in n.targets):
                    return True
                nodes.append(n)
        if func is not None and any(  # a resume: an optimizer or EMA built on these parameters
                type(n) is cst.Call and _method(n) == "load_state_dict" and n is not call
                and _HOLDS_PARAMS.search((_receiver_name(n) or "").rsplit(".", 1)[-1])
                for n in walk(func.body)):
            return True
        for n in nodes:
            kind = type(n)
            if kind is cst.Call:
                method = _method(n)
                if method in _MOVES_PARAMS:
                    if _receiver_name(n) == receiver:
                        return True
                elif any(get_full_name_for_node(a.value) == receiver for a in n.args
                         if isinstance(a.value, (cst.Name, cst.Attribute))):
                    callee = (get_full_name_for_node(n.func) or "").rsplit(".", 1)[-1]
                    if _HOLDS_PARAMS.search(callee) or _HOLDS_PARAMS.search(
                            (self.qname(n) or "").rsplit(".", 1)[-1]):  # DDP imported under an alias
                        return True
            elif kind is cst.Assign and any(get_full_name_for_node(t.target) == receiver for t in n.targets
                                            if isinstance(t.target, (cst.Name, cst.Attribute))):
                if any(type(c) is cst.Call and _method(c) in _MOVES_PARAMS for c in [n.value, *walk(n.value)]):
                    return True
        return False


# methods after which something holds the module's parameters as they are (moved, cast, handed
# out): assign=True would swap in the loaded tensors, on the CPU and in the file's dtype
_MOVES_PARAMS = frozenset({"parameters", "named_parameters", "to", "cuda", "half", "float", "double",
                           "bfloat16"})
# a callee or attribute that keeps a module's parameters: an optimizer, an EMA, a wrapper
_HOLDS_PARAMS = re.compile(r"[Oo]ptim|EMA|Ema($|[A-Z_\d])|(^|_)emas?($|_|\d)|[Aa]veraged|SWA|(^|_)swa|[Pp]arallel"
                           r"|FSDP|fsdp|[Ss]hard|compile")


def _receiver_name(call: cst.Call) -> str | None:
    """``model`` for ``model.parameters()``, ``model.module.to(d)``, ``model.eval().cuda()``."""
    value = call.func.value
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        value = value.func.value
    while isinstance(value, cst.Attribute) and value.attr.value == "module":
        value = value.value
    return get_full_name_for_node(value) if isinstance(value, (cst.Name, cst.Attribute)) else None


_MODULE_NAME = re.compile(r"(^|_)(model|net|module|network)s?\d*$", re.IGNORECASE)


def _is_param(func: cst.FunctionDef | None, name: str) -> bool:
    if func is None:
        return False
    p = func.params
    params = [*p.posonly_params, *p.params, *p.kwonly_params]
    params += [x for x in (p.star_arg, p.star_kwarg) if isinstance(x, cst.Param)]
    return any(x.name.value == name for x in params)


# PTT004: the calls that build an empty or filled dict container (a state dict built by hand)
DICT_TYPES = frozenset({"dict", "collections.OrderedDict", "collections.defaultdict", "typing.OrderedDict",
                         "OrderedDict", "defaultdict"})


# PTT004: a docstring that says the saved file is a pickle of the whole model
_PICKLE_DOC = re.compile(r"pickl|torch\.load|\b(?:full|whole|entire|complete) (?:\w+ )?(?:model|module)", re.IGNORECASE)


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
        if (name in self.facts.module_names or _MODULE_NAME.search(last)) and not self._not_module(value) \
                and not self._pickled_format() and not self._chosen_branch(node) \
                and not self.facts.builds_mliap and not self._documented_pickle():
            self.flag(node)

    def _documented_pickle(self) -> bool:
        """The saving function's docstring documents the whole pickled module as its format: it
        names ``torch.save`` and says the file is a pickle, loads back with ``torch.load``, or
        holds the full model ("Save the trained model using torch.save ... a ``*.pkl``"). Its
        users load the file as a module: a state_dict there would break them."""
        func = self.where.function()
        doc = func.get_docstring() if func is not None else None
        return bool(doc) and "torch.save" in doc and _PICKLE_DOC.search(doc) is not None

    def _chosen_branch(self, node: cst.Call) -> bool:
        """The save is one branch of an ``if`` whose other branch saves a ``state_dict()``
        (``if self.save_weights_only: torch.save(m.state_dict(), f) else: torch.save(m, f)``):
        the user picks the whole module on purpose, and the weights-only form is there already."""
        child: cst.CSTNode = node
        for o in reversed(self.where.stack):
            if isinstance(o, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return False
            if isinstance(o, cst.If) and o.orelse is not None:
                in_body = any(x is child for x in walk(o.body))
                other = o.orelse if in_body else o.body
                if any(type(c) is cst.Call and self.qname(c) == "torch.save" and _positional(c)
                       and isinstance(_positional(c)[0].value, cst.Call)
                       and _method(_positional(c)[0].value) == "state_dict" for c in walk(other)):
                    return True
            child = o
        return False

    def _pickled_format(self) -> bool:
        """The project's model files are whole pickled modules, which its own loaders read back:
        it sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD (in the file or its package), or the function
        saving loads one itself (a ``torch.load`` whose value it asks for a module's methods,
        ``.state_dict()``, ``.eval()``): a state_dict here would break those readers."""
        if self.facts.forces_unsafe_load or self.facts.reads_whole_modules:
            return True
        func = self.where.function()
        if func is None:
            return False
        loaded = {t.target.value for n in walk(func.body) if type(n) is cst.Assign
                  and _plain_load(self, n.value) is not None and not isinstance(n.value, cst.Subscript)
                  for t in n.targets if isinstance(t.target, cst.Name)}
        return bool(loaded) and any(
            type(n) is cst.Call and isinstance(n.func, cst.Attribute) and isinstance(n.func.value, cst.Name)
            and n.func.value.value in loaded and n.func.attr.value in _MODULE_ONLY for n in walk(func.body))

    def _not_module(self, value: cst.BaseExpression) -> bool:
        """A name that says "model" without evidence it holds a module: a parameter (it holds
        whatever callers pass, a state dict as often as a module) not annotated as a Module, or
        a name the function (or, at a script's top level, the module, outside its functions and
        classes: dict containers only) binds anywhere to ``torch.load(...)``, a dict container (``{}``, a dict comprehension, ``dict()``,
        ``OrderedDict()``, ``defaultdict(...)``, filled with tensors by item) or a
        ``.state_dict()``, or hands to safetensors' ``save_file`` (tensors only)."""
        if not isinstance(value, cst.Name):
            return False
        func = self.where.function()
        name = value.value
        if func is None:  # a script's top level: read by the engine
            return name in self.facts.top_dicts and not any(
                isinstance(o, (cst.ClassDef, cst.Lambda)) for o in self.where.stack)
        p = func.params
        for param in [*p.posonly_params, *p.params, *p.kwonly_params]:
            if param.name.value == name:
                note = param.annotation
                return note is None or "Module" not in (get_full_name_for_node(note.annotation) or "")
        for n in walk(func.body):
            if (type(n) is cst.Assign and any(isinstance(t.target, cst.Name) and t.target.value == name
                                              for t in n.targets)) or (
                    type(n) is cst.AnnAssign and n.value is not None and isinstance(n.target, cst.Name)
                    and n.target.value == name):
                v = n.value
                if isinstance(v, (cst.Dict, cst.DictComp)) or _plain_load(self, v) is not None:
                    return True
                if isinstance(v, cst.Call) and (
                        _method(v) in ("state_dict", "dict")
                        or (self.qname(v) or get_full_name_for_node(v.func) or "") in DICT_TYPES):
                    return True
                if self._dict_value(v) or self._dict_item(func, v):
                    return True
            elif type(n) is cst.Call and (self.qname(n) or "").endswith("save_file") and any(
                    isinstance(a.value, cst.Name) and a.value.value == name for a in n.args):
                return True
        return False


    def _dict_value(self, v: cst.BaseExpression) -> bool:
        """A dict: a literal, a dict container's call, a ``.state_dict()``, or a plain call of a
        function the file defines or imports from its project that returns only dict literals
        (``serialize_model(model)``, which returns ``{"class": ..., "state": ...}``)."""
        if isinstance(v, (cst.Dict, cst.DictComp)):
            return True
        if not isinstance(v, cst.Call):
            return False
        if _method(v) == "state_dict" or (self.qname(v) or get_full_name_for_node(v.func) or "") in DICT_TYPES:
            return True
        return (isinstance(v.func, cst.Name) and self.facts.read_dict_returns is not None
                and self.facts.read_dict_returns(v.func.value))

    def _dict_item(self, func: cst.FunctionDef, v: cst.BaseExpression) -> bool:
        """An item of a dict the function builds (``package = {}``, every binding of it a dict
        literal or container), where every value the function puts under that key (in the
        literal, or by ``package["model"] = ...``) is itself a dict (:meth:`_dict_value`):
        ``model = package["model"]`` after ``package["model"] = serialize_model(net)``."""
        if not (isinstance(v, cst.Subscript) and isinstance(v.value, cst.Name) and len(v.slice) == 1
                and isinstance(v.slice[0].slice, cst.Index)
                and isinstance(v.slice[0].slice.value, cst.SimpleString)):
            return False
        owner, key = v.value.value, v.slice[0].slice.value.evaluated_value
        built = False
        values: list[cst.BaseExpression] = []
        for n in walk(func.body):
            if type(n) is cst.Assign:
                for t in n.targets:
                    target = t.target
                    if isinstance(target, cst.Name) and target.value == owner:
                        if isinstance(n.value, cst.Dict):
                            for e in n.value.elements:
                                if not isinstance(e, cst.DictElement):
                                    return False  # {**other}: its items unknown
                                if isinstance(e.key, cst.SimpleString) and e.key.evaluated_value == key:
                                    values.append(e.value)
                        elif not (isinstance(n.value, cst.Call) and not n.value.args
                                  and (self.qname(n.value) or "") in DICT_TYPES):
                            return False
                        built = True
                    elif isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) \
                            and target.value.value == owner:
                        index = target.slice[0].slice if len(target.slice) == 1 else None
                        if not (isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString)):
                            return False  # package[k] = ...: any key
                        if index.value.evaluated_value == key:
                            values.append(n.value)
                    elif owner in target_names(target):
                        return False
            elif type(n) is cst.Call and isinstance(n.func, cst.Attribute) and isinstance(n.func.value, cst.Name) \
                    and n.func.value.value == owner and n.func.attr.value not in ("keys", "items", "values", "get"):
                return False  # package.update(...), setdefault: items put otherwise
            elif isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.WithItem)) and owner in (
                    target_names(n.target) if not isinstance(n, cst.WithItem)
                    else (target_names(n.asname.name) if n.asname else set())):
                return False
        return built and bool(values) and all(self._dict_value(x) for x in values)


# --- APIs that changed -------------------------------------------------------------------------

class CudaAmp(RuleVisitor):
    """``torch.cuda.amp.*``: deprecated since torch 2.4 (not flagged for an older torch, nor in a
    project whose declared floor is older than the release with the advised spelling)."""

    CODE = "PTT005"

    def visit_Call(self, node: cst.Call) -> None:
        if self._deprecated(self.qname(node)):
            self.flag(node)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        """``@torch.cuda.amp.custom_fwd`` without a call (a call is seen by visit_Call)."""
        # a bare name or attribute, resolved alike
        if not isinstance(node.decorator, cst.Call) and self._deprecated(self.qname(node.decorator)):
            self.flag(node.decorator)

    def _deprecated(self, name: str | None) -> bool:
        return bool(name and name.startswith("torch.cuda.amp.") and not self.torch_before((2, 4))
                    and not self.pinned_before((2, 4)) and not self._fallback())

    def advice_needs(self, node: cst.CSTNode) -> tuple[int, ...] | None:
        """The release of the advised spelling of this name of torch.cuda.amp (_AMP_SINCE)."""
        return _AMP_SINCE.get((self.qname(node) or "").rsplit(".", 1)[-1], (2, 4))

    def _fallback(self) -> bool:
        """A deliberate old-torch path: in ``except (AttributeError, TypeError, ImportError)``
        after the new API was tried, or under an ``if`` that checks the version or ``hasattr``."""
        for n in self.where.stack:
            if isinstance(n, cst.ExceptHandler) and n.type is not None:
                types = [e.value for e in n.type.elements] if isinstance(n.type, cst.Tuple) else [n.type]
                if any((get_full_name_for_node(t) or "").rsplit(".", 1)[-1] in _FALLBACK_ERRORS for t in types):
                    return True
            if isinstance(n, cst.If) and (_mentions(n.test, "version") or _mentions(n.test, "hasattr")
                                          or _mentions(n.test, "TORCH_")):
                return True
        return False


_FALLBACK_ERRORS = {"AttributeError", "TypeError", "ImportError", "ModuleNotFoundError"}
# The first release with the spelling PTT005 advises for each torch.cuda.amp name:
# torch.amp.autocast (1.12), torch.amp.GradScaler("cuda") (2.3), torch.amp.custom_fwd/custom_bwd
# (2.4, with the deprecation); any other name of torch.cuda.amp: 2.4.
_AMP_SINCE = {"autocast": (1, 12), "GradScaler": (2, 3), "custom_fwd": (2, 4), "custom_bwd": (2, 4)}


class ZeroGradKeepsZeros(RuleVisitor):
    """Not where the file adds into ``.grad`` by hand (``p.grad += g``), which needs the zeros."""

    CODE = "PTT006"

    def visit_Call(self, node: cst.Call) -> None:
        if _method(node) == "zero_grad" and not self.facts.manual_grad:
            arg = self.get_specific_arg(node, "set_to_none", 0)
            if arg is not None and _is_false(arg.value):
                self.flag(node)


class VariableWrapping(RuleVisitor):
    """Not in an ``if __name__ == "__main__":`` block (a demo of the file, not code a user
    runs), nor a ``Variable(x, requires_grad=True)`` made as a leaf to differentiate against
    (a gradient penalty's input: the function calls ``autograd.grad`` or is named for a
    penalty), where only a cosmetic ``x.detach().requires_grad_()`` rewrite remains."""

    CODE = "PTT007"

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname(node) in ("torch.autograd.Variable", "torch.autograd.variable.Variable") \
                and not self._main_block() and not self._penalty_leaf(node):
            self.flag(node)

    def _main_block(self) -> bool:
        return any(isinstance(n, cst.If) and _tests_main(n.test) for n in self.where.stack)

    def _penalty_leaf(self, node: cst.Call) -> bool:
        arg = self.get_specific_arg(node, "requires_grad", 1)
        func = self.where.function()
        if arg is None or not _is_true(arg.value) or func is None:
            return False
        return "penalty" in func.name.value.lower() or any(
            isinstance(n, cst.Call) and self.qname(n) in ("torch.autograd.grad", "torch.autograd.functional.vjp")
            for n in walk(func.body))


def _tests_main(test: cst.BaseExpression) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Equal)):
        return False
    sides = (test.left, test.comparisons[0].comparator)
    return any(isinstance(x, cst.Name) and x.value == "__name__" for x in sides) and any(
        isinstance(x, cst.SimpleString) and x.evaluated_value == "__main__" for x in sides)


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
    """A list in a module's ``__init__`` built from classes of torch.nn (layers, Parameters);
    not one built by torch.nn's helper functions (``_pair(p)``: a tuple of ints)."""

    CODE = "PTT008"

    def visit_Assign(self, node: cst.Assign) -> None:
        if not isinstance(node.value, (cst.List, cst.ListComp)) or not _self_target(node):
            return
        if not self.where.method_of_module("__init__"):
            return
        for call in _calls_in(node.value):
            name = self.qname(call) or ""
            last = name.rsplit(".", 1)[-1]
            # a class of torch.nn (a layer, a Parameter), not a helper function of it (_pair,
            # init.*, functional.*), whose result is a tuple or a tensor, not a module
            if last[:1].isupper() and (name.startswith("torch.nn.") or last == "Parameter" or "nn." in name):
                attr = node.targets[0].target.attr.value
                if not self._registered_elsewhere(attr) and not self._wrapped_later(node, attr):
                    self.flag(node)
                return

    def _wrapped_later(self, node: cst.Assign, attr: str) -> bool:
        """A later statement of the same ``__init__`` rebinds ``self.<attr>`` to a call that
        takes the list (``self.stem = OpSequential(self.stem)``): the list was a builder, and
        what the module keeps is what the call makes of it (a container of the project's)."""
        func = self.where.function()
        body = func.body.body if func is not None and isinstance(func.body, cst.IndentedBlock) else ()
        own = f"self.{attr}"
        seen = False
        for stmt in body:
            if not seen:
                seen = any(n is node for n in walk(stmt))
                continue
            for n in walk(stmt):
                if (type(n) is cst.Assign and isinstance(n.value, cst.Call)
                        and any(get_full_name_for_node(t.target) == own for t in n.targets)
                        and any(get_full_name_for_node(a.value) == own for a in n.value.args)):
                    return True
        return False

    def _registered_elsewhere(self, attr: str) -> bool:
        """The class hands the list (``self.<attr>``) to a torch.nn container
        (``nn.Sequential(*self.layers)``, ``nn.ModuleList(self.layers)``) or registers its items
        one by one (``self.add_module(...)`` in a loop over it): its modules are registered
        already, and a ModuleList too would register them twice (new state_dict keys)."""
        cls = self.where.module_class("__init__")
        if cls is None:
            return False
        own = f"self.{attr}"
        for n in _walk_all(cls):
            if type(n) is cst.Call:
                name = self.qname(n) or ""
                if name.startswith("torch.nn.") and name.rsplit(".", 1)[-1][:1].isupper() and any(
                        get_full_name_for_node(a.value) == own for a in n.args):
                    return True
            elif type(n) is cst.For and get_full_name_for_node(_unwrap_iter(n.iter)) == own and any(
                    type(c) is cst.Call and _method(c) in ("add_module", "register_module")
                    for c in walk(n.body)):
                return True
        return False


def _unwrap_iter(node: cst.BaseExpression) -> cst.BaseExpression:
    """``self.layers`` for ``enumerate(self.layers)``, ``zip(names, self.layers)`` keeps its own."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "enumerate" \
            and node.args:
        return node.args[0].value
    return node


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


def _block_after(stack: list[cst.CSTNode], node: cst.CSTNode) -> list[cst.BaseStatement]:
    """The statements after the one holding ``node`` in the block that holds it (the body of
    the innermost compound statement, or its ``else``)."""
    if not stack:
        return []
    inner = stack[-1]
    blocks = [inner.body]
    orelse = getattr(inner, "orelse", None)
    while orelse is not None:  # an if's elif / else (and a loop's else)
        blocks.append(orelse.body)
        orelse = getattr(orelse, "orelse", None)
    for block in blocks:
        body = getattr(block, "body", None)
        if not isinstance(body, (list, tuple)):
            continue
        for i, stmt in enumerate(body):
            if isinstance(stmt, cst.SimpleStatementLine) and any(s is node for s in stmt.body):
                return list(body[i + 1:])
    return []


_PARAMETERS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})


_INT_ANNOTATIONS = {"int", "Optional[int]", "int | None", "None | int", "typing.Optional[int]"}


def _int_index(sub: cst.Subscript, outer: tuple[cst.CSTNode, ...]) -> bool:
    """``x[i]`` with one index that is evidently an int: a literal, a parameter of the enclosing
    function annotated ``int`` (or ``int | None``), the variable of an enclosing ``for`` over
    ``range(...)``."""
    if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index):
        return False
    index = sub.slice[0].slice.value
    if isinstance(index, cst.Integer):
        return True
    if not isinstance(index, cst.Name):
        return False
    for o in reversed(outer):
        if (isinstance(o, cst.For) and isinstance(o.target, cst.Name) and o.target.value == index.value
                and isinstance(o.iter, cst.Call) and get_full_name_for_node(o.iter.func) == "range"):
            return True
        if isinstance(o, cst.FunctionDef):
            params = [*o.params.posonly_params, *o.params.params, *o.params.kwonly_params]
            p = next((p for p in params if p.name.value == index.value), None)
            if p is None or p.annotation is None:
                return False
            code = cst.Module(body=[]).code_for_node(p.annotation.annotation)
            return " ".join(code.split()) in _INT_ANNOTATIONS
    return False


class TensorAttributeNotBuffer(RuleVisitor):
    """A factory's tensor set as a plain attribute in a module's ``__init__``; not one rebound as
    an ``nn.Parameter`` further down the same block (registered then), nor one that a method
    rebinds from itself to its input's device and dtype before use
    (``self.mean = self.mean.type_as(x)``), nor one read only at an int index (a 0-dim CPU
    tensor mixes with CUDA tensors)."""

    CODE = "PTT030"

    def visit_Assign(self, node: cst.Assign) -> None:
        if (_self_target(node) and isinstance(node.value, cst.Call)
                and self.qname(node.value) in FACTORIES and not self.facts.exports):
            name = node.targets[0].target.attr.value
            cls = self._module_class()
            if cls is None:
                return  # no evidence that the class is an nn.Module (a LightningDataModule has no buffers)
            if (not self._registered_below(node, name) and not self._follows_input(name)
                    and not self._used_in_init_only(name) and not self._placeholder(node, name)
                    and not self._int_indexed_only(name) and not _buffer_named(cls, name)
                    and not self._overwritten(node, cls, name) and not _state_rebound(self, cls, name)
                    and not _read_on_cpu_only(cls, name) and not self._device_pinned(node.value)
                    and not _replaced_elsewhere(cls, name) and not _written_only(self.module, name, self.facts.source)
                    and not self._combined_on_cpu(cls, name)):
                self.flag(node)

    def _combined_on_cpu(self, cls: cst.ClassDef, name: str) -> bool:
        """Every method of the class but ``__init__`` that reads ``self.<name>`` either reads it
        only at int literal indices (``self.m[0, 3]``: a 0-dim tensor) or combines it (itself, a
        local computed from it, or the parameter of a function of the file it is handed to) in
        a torch call or an arithmetic operation with a tensor the code makes on the CPU (a
        factory without ``device=``, or ``.cpu()``), and one method does: it is kept on the CPU
        on purpose, and a buffer would go to the GPU with ``.to()`` and break those operations."""
        helpers = _Helpers(self.facts.source, self.facts.tree)
        combines = 0
        for f in cls.body.body:
            if not isinstance(f, cst.FunctionDef) or f.name.value == "__init__":
                continue
            parents = {}
            for n in [f, *walk(f)]:
                for c in children(n):
                    parents[id(c)] = n
            refs = [m for m in walk(f) if type(m) is cst.Attribute and m.attr.value == name]
            if not refs:
                continue
            if any(get_full_name_for_node(r) != f"self.{name}" for r in refs):
                return False
            if all(_literal_indexed(parents.get(id(r)), r) for r in refs):
                continue
            if not self._cpu_combination(f, set(), refs, helpers, 2):
                return False
            combines += 1
        return combines > 0

    def _cpu_combination(self, func: cst.FunctionDef, names: set[str], refs: list[cst.CSTNode],
                         helpers: _Helpers, depth: int) -> bool:
        """In ``func``, a value that holds the tracked tensor (``refs``, ``names``, or a local
        bound to an expression of them) meets a CPU-made tensor in a torch call or an arithmetic
        operation, or is handed to a function of the file (``helpers``) that does so."""
        ids = {id(r) for r in refs}
        names = set(names)
        cpu: set[str] = set()

        def holds(e: cst.CSTNode) -> bool:
            return any(id(m) in ids or (type(m) is cst.Name and m.value in names) for m in [e, *walk(e)])

        def on_cpu(e: cst.CSTNode) -> bool:
            if type(e) is cst.Name:
                return e.value in cpu
            if type(e) is not cst.Call:
                return False
            if type(e.func) is cst.Attribute and e.func.attr.value == "cpu":
                return True
            return self.qualify(e.func) in FACTORIES and not any(
                a.keyword is not None and a.keyword.value == "device" for a in e.args)

        for n in _ordered(func):
            if type(n) is cst.Assign and len(n.targets) == 1 and type(n.targets[0].target) is cst.Name:
                target = n.targets[0].target.value
                if holds(n.value):  # (a name rebound keeps both: the uses are not ordered here)
                    names.add(target)
                elif on_cpu(n.value):
                    cpu.add(target)
        for n in walk(func):
            if type(n) is cst.BinaryOperation:
                operands = [n.left, n.right]
            elif type(n) is cst.Call:
                operands = [a.value for a in n.args]
                callee = helpers.get(n.func.value) if type(n.func) is cst.Name and depth > 0 else None
                if callee is not None and callee.name.value != func.name.value:
                    params = callee.params.params
                    passed = {params[i].name.value for i, a in enumerate(n.args)
                              if a.keyword is None and i < len(params) and holds(a.value)}
                    passed |= {a.keyword.value for a in n.args if a.keyword is not None and holds(a.value)}
                    if passed and self._cpu_combination(callee, passed, [], helpers, depth - 1):
                        return True
                    continue
                if not (self.qualify(n.func) or "").startswith("torch."):
                    continue
            else:
                continue
            if any(holds(a) and on_cpu(b) for a in operands for b in operands if a is not b):
                return True
        return False

    def _device_pinned(self, call: cst.Call) -> bool:
        """The factory's ``device=`` is a parameter of the ``__init__`` (``device=device``) or an
        attribute ``__init__`` sets from one (``self.device = device``): the class takes its
        device at construction and keeps it by design (its own code sends inputs there), so
        ``.to()`` is not its way of moving, and a buffer would only add a state_dict key."""
        arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == "device"), None)
        init = next((n for n in reversed(self.where.stack) if isinstance(n, cst.FunctionDef)), None)
        if arg is None or init is None or init.name.value != "__init__":
            return False
        p = init.params
        params = {x.name.value for x in [*p.posonly_params, *p.params, *p.kwonly_params]}
        value = arg.value
        if isinstance(value, cst.Name):
            return value.value in params
        name = get_full_name_for_node(value) if isinstance(value, cst.Attribute) else None
        if name is None or not name.startswith("self.") or name.count(".") != 1:
            return False
        return any(isinstance(n, cst.Assign) and _self_target(n)
                   and get_full_name_for_node(n.targets[0].target) == name
                   and isinstance(n.value, cst.Name) and n.value.value in params
                   for n in walk(init.body))

    def _module_class(self) -> cst.ClassDef | None:
        """The class whose ``__init__`` holds the node, where the file shows it is an nn.Module
        (a torch.nn base, a LightningModule, a class of the file or project deriving from one:
        ``Facts.nn_modules``); a base merely named ``...Module`` is no evidence."""
        stack = self.where.stack
        for i in range(len(stack) - 1, 0, -1):
            node, parent = stack[i], stack[i - 1]
            if isinstance(node, cst.FunctionDef) and isinstance(parent, cst.ClassDef):
                if node.name.value != "__init__":
                    return None
                mods = self.facts.nn_modules
                known = is_module_class(parent) if mods is None else parent.name.value in mods
                return parent if known else None
        return None

    def _overwritten(self, node: cst.Assign, cls: cst.ClassDef, name: str) -> bool:
        """An empty tensor (``torch.empty(0)``, ``torch.tensor([])``) that another method of the
        class replaces with a new value not made from it (a forward hook storing its output each
        call): a placeholder of an activation cache, not state to move or save."""
        call = node.value
        if not (isinstance(call, cst.Call) and len(call.args) == 1 and call.args[0].keyword is None
                and _empty_or_scalar(self.qname(call), call.args[0].value)
                and not (self.qname(call) == "torch.tensor" and _is_number(call.args[0].value))):
            return False
        return any(
            isinstance(n, cst.Assign) and _self_target(n) and n.targets[0].target.attr.value == name
            and not any(isinstance(m, cst.Attribute) and m.attr.value == name for m in walk(n.value))
            for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value != "__init__"
            for n in walk(f))

    def _int_indexed_only(self, name: str) -> bool:
        """Outside the assignments of ``__init__``, the file reads ``self.<name>`` only as
        ``self.<name>[i]`` with ``i`` an int (a literal, a parameter annotated ``int``, a loop
        variable over ``range``): a 0-dim CPU tensor, which mixes with CUDA tensors as a
        Python number does, so ``.to()`` leaving the table behind costs nothing (a schedule
        or a table of settings looked up per step). Not where a string names it (getattr; a
        docstring is no read)."""
        module, cls = self.module, self._module_class()
        if not isinstance(module, cst.Module) or cls is None:
            return False
        parents: dict[int, cst.CSTNode] = {}
        reads = 0
        todo: list[tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = [(module, ())]
        while todo:
            n, outer = todo.pop()
            if isinstance(n, cst.SimpleString) and name in n.value and not isinstance(parents.get(id(n)), cst.Expr):
                return False  # (a docstring that documents it is no read)
            if isinstance(n, cst.Attribute) and n.attr.value == name:
                up = parents.get(id(n))
                if isinstance(up, cst.AssignTarget) and any(
                        isinstance(f, cst.FunctionDef) and f.name.value == "__init__" for f in outer):
                    continue  # the binding itself (or another in __init__)
                sub = up if isinstance(up, cst.Subscript) and up.value is n else None
                if (sub is None or get_full_name_for_node(n) != f"self.{name}"
                        or not any(o is cls for o in outer) or not _int_index(sub, outer)):
                    return False
                reads += 1
            for c in children(n):
                parents[id(c)] = n
                todo.append((c, (*outer, n)))
        return reads > 0

    def _placeholder(self, node: cst.Assign, name: str) -> bool:
        """An empty or 0-dim tensor (``torch.tensor([])``, ``torch.tensor(0)``,
        ``torch.zeros(0)``) standing in for an attribute that ``__init__`` makes an
        ``nn.Parameter`` on another branch: the parameter is what the module uses, the
        placeholder only keeps the attribute defined (for TorchScript) where it is off."""
        call = node.value
        if not (isinstance(call, cst.Call) and call.args and len(call.args) == 1
                and call.args[0].keyword is None and _empty_or_scalar(self.qname(call), call.args[0].value)):
            return False
        init = next((n for n in reversed(self.where.stack) if isinstance(n, cst.FunctionDef)), None)
        if init is None or init.name.value != "__init__":
            return False
        return any(isinstance(n, cst.Assign) and n is not node and _self_target(n)
                   and n.targets[0].target.attr.value == name and isinstance(n.value, cst.Call)
                   and self.qname(n.value) in _PARAMETERS for n in walk(init))

    def _used_in_init_only(self, name: str) -> bool:
        """No code of the file but ``__init__`` names ``.<name>`` (nor a string does), and
        ``__init__`` reads it and only consumes it (a method or attribute of it, an index, arithmetic, a
        comparison, ``len``/``enumerate``, an argument of a method of ``self`` that does the
        same with it): it is never read after construction, so ``.to()`` leaving it behind is
        harmless. Not when it is aliased, stored or handed to anything else."""
        stack = self.where.stack
        cls = self._module_class()
        module = self.module
        if not isinstance(module, cst.Module) or cls is None:
            return False
        init = next((n for n in stack if isinstance(n, cst.FunctionDef)
                     and n.name.value == "__init__" and any(n is s for s in cls.body.body)), None)
        if init is None:
            return False
        parents: dict[int, cst.CSTNode] = {}
        inside: set[int] = set()
        todo = [(module, False)]
        while todo:
            n, in_init = todo.pop()
            if in_init:
                inside.add(id(n))
            elif isinstance(n, cst.Attribute) and n.attr.value == name:
                return False  # read (or set) outside __init__
            elif isinstance(n, cst.SimpleString) and name in n.value:
                return False  # getattr(self, "name"), a config key: cannot tell
            for c in children(n):
                parents[id(c)] = n
                todo.append((c, c is init or (in_init and type(c) not in _STOPS_INNER)))
        methods = {f.name.value: f for f in cls.body.body if isinstance(f, cst.FunctionDef)}
        refs = [n for n in walk(init) if isinstance(n, cst.Attribute) and n.attr.value == name
                and get_full_name_for_node(n) == f"self.{name}"]
        if len(refs) != sum(1 for n in walk(init) if isinstance(n, cst.Attribute)
                            and n.attr.value == name):
            return False  # another object's .<name>, or one in a nested function
        if all(isinstance(parents.get(id(r)), cst.AssignTarget) for r in refs):
            return False  # never read here: another file (a subclass, a caller) may read it
        return all(_consumed(r, parents, methods, name) for r in refs)

    def _rebinds(self, stmt: cst.CSTNode, name: str) -> list[cst.BaseExpression]:
        """The values ``stmt`` (one simple statement line) assigns to ``self.<name>``."""
        if not isinstance(stmt, cst.SimpleStatementLine):
            return []
        return [s.value for s in stmt.body if isinstance(s, cst.Assign) and _self_target(s)
                and s.targets[0].target.attr.value == name]

    def _registered_below(self, node: cst.Assign, name: str) -> bool:
        """``self.<name> = nn.Parameter(...)`` later in the same block: the attribute is a
        parameter from then on (Module.__setattr__ drops the plain one)."""
        return any(isinstance(v, cst.Call) and self.qname(v) in _PARAMETERS
                   for stmt in _block_after(self.where.stack, node) for v in self._rebinds(stmt, name))

    def _follows_input(self, name: str) -> bool:
        """A method of the class rebinds ``self.<name> = self.<name>.type_as(...)`` (or
        ``.to(...)``): it is moved to its input's device and dtype where it is used."""
        cls = self._module_class()
        if cls is None:
            return False
        for n in _class_nodes(cls):
            if not (isinstance(n, cst.Assign) and _self_target(n) and n.targets[0].target.attr.value == name):
                continue
            v = n.value
            if (isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute) and v.args
                    and get_full_name_for_node(v.func.value) == f"self.{name}"
                    and _input_like(v.func.attr.value, v.args[0].value)):
                return True
        return False


_GROWS = frozenset({"cat", "concat", "concatenate", "stack", "hstack", "vstack", "append"})


def _state_rebound(visitor: RuleVisitor, cls: cst.ClassDef, name: str) -> bool:
    """PTT030: a method of the class but ``__init__`` rebinds ``self.<name>`` to a value grown
    from itself (``torch.cat([self.seen, y]).unique()``: its shape changes, which a buffer's
    strict checkpoint load would reject) or to a new tensor from a torch factory (a reset
    per task, which decides the device itself): state the class manages, not a fixed buffer."""
    for f in cls.body.body:
        if not isinstance(f, cst.FunctionDef) or f.name.value == "__init__":
            continue
        for n in walk(f):
            if not (isinstance(n, cst.Assign) and _self_target(n) and n.targets[0].target.attr.value == name):
                continue
            calls = [c for c in [n.value, *walk(n.value)] if isinstance(c, cst.Call)]
            if isinstance(n.value, cst.Call) and visitor.qname(n.value) in FACTORIES:
                return True
            for c in calls:
                method = c.func.attr.value if isinstance(c.func, cst.Attribute) else None
                if method in _GROWS and any(
                        isinstance(m, cst.Attribute) and get_full_name_for_node(m) == f"self.{name}"
                        for a in c.args for m in [a.value, *walk(a.value)]):
                    return True
    return False


def _replaced_elsewhere(cls: cst.ClassDef, name: str) -> bool:
    """PTT030: a method of the class but ``__init__`` rebinds ``self.<name>`` (or its ``.data``)
    to a value computed from something else (``self.aux = loss * alpha``, ``self.m.data =
    deepcopy(self.running_mean.data)``; not a literal): the ``__init__`` tensor is only a
    starting value that per-step code replaces, not state to move or save."""
    for f in cls.body.body:
        if not isinstance(f, cst.FunctionDef) or f.name.value == "__init__":
            continue
        for n in walk(f):
            if not (isinstance(n, cst.Assign) and len(n.targets) == 1):
                continue
            target = get_full_name_for_node(n.targets[0].target) if isinstance(
                n.targets[0].target, cst.Attribute) else None
            if target not in (f"self.{name}", f"self.{name}.data"):
                continue
            v = n.value
            if isinstance(v, (cst.Integer, cst.Float, cst.Name, cst.SimpleString)) or (
                    isinstance(v, cst.UnaryOperation) and _is_number(v.expression)):
                continue
            if not any(isinstance(m, cst.Attribute) and m.attr.value == name for m in [v, *walk(v)]):
                return True
    return False


def _written_only(module: cst.CSTNode | None, name: str, source: str) -> bool:
    """PTT030: the file never reads ``self.<name>`` but to update it: every ``.<name>`` is an
    assignment's target (``self.count[i] = ...``, ``self.count += ...``, its binding) or inside
    the value assigned to that same target (``self.count[i] = self.count[i] + n``), and no string
    names it: a host-side counter or log nothing reads, which ``.to()`` may leave behind. The
    piece checked (the class) must hold every ``.<name>`` of the file's text (``source``)."""
    if not isinstance(module, cst.Module) or not source:
        return False
    parents: dict[int, cst.CSTNode] = {}
    refs: list[cst.Attribute] = []
    todo: list[cst.CSTNode] = [module]
    while todo:  # every node, nested functions and classes too
        n = todo.pop()
        for c in children(n):
            parents[id(c)] = n
            todo.append(c)
        if isinstance(n, cst.Attribute) and n.attr.value == name:
            refs.append(n)
        elif isinstance(n, cst.SimpleString) and name in n.value:
            return False  # getattr(self, "name"), a config key: cannot tell
    if len(re.findall(rf"\.{re.escape(name)}\b", source)) != len(refs):
        return False  # named outside the piece (another function, a comment): cannot tell
    own = f"self.{name}"

    def base(e: cst.CSTNode) -> str | None:
        while isinstance(e, cst.Subscript) or (isinstance(e, cst.Attribute) and e.attr.value == "data"):
            e = e.value
        return get_full_name_for_node(e) if isinstance(e, cst.Attribute) else None

    updated = False
    for n in refs:
        if get_full_name_for_node(n) != own:
            return False
        top = n
        up = parents.get(id(top))
        while (isinstance(up, cst.Subscript) and up.value is top) or (
                isinstance(up, cst.Attribute) and up.value is top and up.attr.value == "data"):
            if isinstance(up, cst.Subscript) and not _host_index(up, parents):
                return False  # a tensor index may live on the GPU: the CPU tensor then fails
            top, up = up, parents.get(id(up))
        fn = parents.get(id(n))
        while fn is not None and not isinstance(fn, cst.FunctionDef):
            fn = parents.get(id(fn))
        updated = updated or (fn is not None and fn.name.value != "__init__")
        if isinstance(up, cst.AssignTarget) or (isinstance(up, cst.AugAssign) and up.target is top):
            continue  # written
        stmt = up
        while stmt is not None and not isinstance(stmt, (cst.Assign, cst.AugAssign, cst.BaseCompoundStatement)):
            stmt = parents.get(id(stmt))
        if isinstance(stmt, cst.Assign) and any(base(t.target) == own for t in stmt.targets):
            continue  # read only to update itself
        if isinstance(stmt, cst.AugAssign) and base(stmt.target) == own:
            continue
        return False
    return updated


_HOST_ITERS = (".tolist()", ".items()", "range(")


def _host_index(sub: cst.Subscript, parents: dict[int, cst.CSTNode]) -> bool:
    """PTT030: every index of ``sub`` is a Python int: a literal, or a name an enclosing ``for``
    binds from host values (``.tolist()``, a dict's ``.items()``, ``range``)."""
    for el in sub.slice:
        idx = el.slice.value if isinstance(el.slice, cst.Index) else None
        if isinstance(idx, cst.Integer):
            continue
        if not isinstance(idx, cst.Name):
            return False
        up = parents.get(id(sub))
        while up is not None and not (isinstance(up, cst.For) and idx.value in target_names(up.target)):
            up = parents.get(id(up))
        if up is None or not any(h in _EMPTY.code_for_node(up.iter) for h in _HOST_ITERS):
            return False
    return True


class _Helpers:
    """PTT030: the file's top-level functions, each parsed by libcst on demand from the file's
    text (a piece being checked may not hold them)."""

    def __init__(self, source: str, tree: ast.Module | None) -> None:
        self.source, self.tree, self.parsed = source, tree, {}

    def get(self, name: str) -> cst.FunctionDef | None:
        if name not in self.parsed:
            tree = self.tree if ("def " + name) in self.source else None
            found = next((f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == name), None) \
                if tree is not None else None
            func = None
            if found is not None and not found.decorator_list:
                lines = self.source.splitlines(keepends=True)[found.lineno - 1:found.end_lineno]
                try:
                    func = cst.parse_module("".join(lines)).body[0]
                except cst.ParserSyntaxError:
                    func = None
            self.parsed[name] = func if isinstance(func, cst.FunctionDef) else None
        return self.parsed[name]


def _literal_indexed(parent: cst.CSTNode | None, ref: cst.CSTNode) -> bool:
    """PTT030: ``ref`` is read as ``self.x[0, 3]``: every index an int literal (a 0-dim tensor)."""
    return (type(parent) is cst.Subscript and parent.value is ref and all(
        type(e.slice) is cst.Index and type(e.slice.value) is cst.Integer for e in parent.slice))


def _read_on_cpu_only(cls: cst.ClassDef, name: str) -> bool:
    """PTT030: every read of ``self.<name>`` outside ``__init__`` is in a method that first
    brings its input to the CPU (``x = self.prep(x.cpu())``, ``_cpu_input_rebind``), after that
    statement: the tensor is kept on the CPU on purpose, beside CPU data."""
    reads = 0
    for f in cls.body.body:
        if not isinstance(f, cst.FunctionDef) or f.name.value == "__init__":
            continue
        refs = [m for m in walk(f) if isinstance(m, cst.Attribute) and m.attr.value == name]
        if not refs:
            continue
        start = _cpu_input_rebind(f)
        if start is None:
            return False
        after = {id(m) for stmt in f.body.body[start + 1:] for m in walk(stmt)}
        if any(id(m) not in after for m in refs):
            return False
        reads += len(refs)
    return reads > 0


def _is_number(arg: cst.BaseExpression) -> bool:
    if isinstance(arg, cst.UnaryOperation):
        arg = arg.expression
    return isinstance(arg, (cst.Integer, cst.Float))


def _buffer_named(cls: cst.ClassDef, name: str) -> bool:
    """PTT030: the class registers a buffer ``name`` (``self.register_buffer("name", ...)``):
    a tensor assigned to that name later is stored as the buffer (Module.__setattr__)."""
    for n in _class_nodes(cls):
        if (isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
                and n.func.attr.value == "register_buffer" and n.args
                and isinstance(n.args[0].value, cst.SimpleString)
                and n.args[0].value.evaluated_value == name):
            return True
    return False


def _empty_or_scalar(factory: str | None, arg: cst.BaseExpression) -> bool:
    """``torch.tensor([])`` / ``torch.tensor(0)`` (a number), or ``torch.empty/zeros/ones(0)``:
    a tensor that holds nothing to move."""
    if isinstance(arg, cst.UnaryOperation):
        arg = arg.expression
    if factory == "torch.tensor":
        return (isinstance(arg, (cst.List, cst.Tuple)) and not arg.elements) or isinstance(
            arg, (cst.Integer, cst.Float))
    if factory in ("torch.empty", "torch.zeros", "torch.ones"):
        if isinstance(arg, (cst.List, cst.Tuple)) and len(arg.elements) == 1:
            arg = arg.elements[0].value
        return isinstance(arg, cst.Integer) and arg.evaluated_value == 0
    return False


_STOPS_INNER = frozenset({cst.FunctionDef, cst.Lambda, cst.ClassDef})
_CONSUMERS = frozenset({"len", "enumerate", "float", "int", "bool"})


def _consumed(ref: cst.CSTNode, parents: dict[int, cst.CSTNode],
              methods: dict[str, cst.FunctionDef], name: str, depth: int = 0) -> bool:
    """``ref`` is used up where it stands: the receiver of a method or attribute, an index's
    base, an operand of arithmetic or a comparison, an argument of ``len``/``enumerate``, or
    (once) an argument of a method of ``self`` whose parameter is used up the same way; or the
    target of its own assignment."""
    parent = parents.get(id(ref))
    if isinstance(parent, cst.AssignTarget):
        return True
    if isinstance(parent, cst.Attribute) and parent.value is ref:
        return True
    if isinstance(parent, cst.Subscript) and parent.value is ref:
        return True
    if isinstance(parent, (cst.BinaryOperation, cst.Comparison, cst.ComparisonTarget,
                           cst.UnaryOperation)):
        return True
    if not isinstance(parent, cst.Arg) or parent.keyword is not None or parent.star:
        return False
    call = parents.get(id(parent))
    if not isinstance(call, cst.Call):
        return False
    if isinstance(call.func, cst.Name) and call.func.value in _CONSUMERS:
        return True
    callee = get_full_name_for_node(call.func) or ""
    method = methods.get(callee[5:]) if callee.startswith("self.") and depth == 0 else None
    if method is None:
        return False
    params = [p for p in method.params.params if p.name.value != "self"]
    index = [i for i, a in enumerate(call.args) if a is parent][0]
    if index >= len(params) or isinstance(method.params.star_arg, cst.Param):
        return False
    param = params[index].name.value
    inner: dict[int, cst.CSTNode] = {}
    uses = []
    todo = [method]
    while todo:
        n = todo.pop()
        for c in children(n):
            inner[id(c)] = n
            if type(c) in _STOPS_INNER:
                if any(isinstance(x, cst.Name) and x.value == param for x in walk(c)):
                    return False  # a nested function or lambda closes over it
                continue
            if (isinstance(c, cst.Name) and c.value == param
                    and not (isinstance(n, cst.Attribute) and n.attr is c)
                    and not (isinstance(n, cst.Arg) and n.keyword is c)):
                uses.append(c)  # the parameter, not ``self.<param>`` nor ``f(<param>=...)``
            todo.append(c)
    return all(isinstance(inner.get(id(u)), cst.Param) or _consumed(u, inner, methods, name, 1)
               for u in uses)


def _input_like(method: str, arg: cst.BaseExpression) -> bool:
    """``.type_as(x)``, ``.to(x)``, ``.to(x.device)``: a device taken from another tensor (not
    ``.to(torch.float16)``, a dtype alone)."""
    if method == "type_as":
        return True
    if method != "to":
        return False
    return isinstance(arg, cst.Name) or (isinstance(arg, cst.Attribute) and arg.attr.value == "device")


def _class_nodes(cls: cst.ClassDef):
    """Every node in the methods of ``cls`` (its functions' bodies, not nested classes)."""
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef):
            yield from walk(stmt)


# torch's own APIs that take a CPU tensor argument (pack_padded_sequence's lengths)
_CPU_ARGUMENTS = frozenset({"torch.nn.utils.rnn.pack_padded_sequence"})
_CASTS = frozenset({"to", "long", "int", "short", "type", "contiguous"})


def _cpu_chain(value: cst.BaseExpression) -> cst.Call | None:
    """The ``.cpu()`` call of ``x.cpu()``, ``x.cpu().to(torch.long)``, ``x.cpu().int()``."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        method = value.func.attr.value
        if method == "cpu":
            return value
        if method not in _CASTS:
            return None
        value = value.func.value
    return None


# PTT015: conversions whose input must be a host tensor (a PIL image of it)
_HOST_SINKS = frozenset({"ToPILImage", "to_pil_image", "fromarray"})

# devices that lack some of torch's operators: a branch taken only for one of them is a fallback
_FALLBACK_DEVICES = frozenset({"mps", "xla", "npu", "xpu", "hpu", "mlu", "tpu", "directml", "dml"})


def _names_fallback_device(test: cst.CSTNode) -> bool:
    """``x_is_mps``, ``x.device.type == "mps"``, ``torch.backends.mps.is_available()``: the test
    names a device that lacks operators (a word of a name or string, not a part of one)."""
    for n in [test, *walk(test)]:
        text = n.value if isinstance(n, (cst.Name, cst.SimpleString)) else None
        if text and _FALLBACK_DEVICES & set(re.split(r"[^a-z0-9]+", text.lower())):
            return True
    return False


def _offload_test(test: cst.CSTNode) -> bool:
    """``if self.cpu_cache:``, ``if offload:``, ``if emb_cache is not None:``: a branch that parks
    tensors on the host on purpose (a CPU offload or a cache kept off the GPU), which a word of a
    name in the test says."""
    return any(isinstance(n, cst.Name) and {"cpu", "offload", "cache"} & set(re.split(r"[^a-z0-9]+", n.value.lower()))
               for n in [test, *walk(test)])


def _training_test(test: cst.BaseExpression) -> bool | None:
    """``self.training`` -> True, ``not self.training`` -> False; None for any other test."""
    negated = False
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negated = test.expression, not negated
    if isinstance(test, cst.Attribute) and get_full_name_for_node(test) == "self.training":
        return not negated
    return None


class DeviceInForward(RuleVisitor):
    """``.cuda()`` (or ``.to("cuda")``) in a model's forward; ``.cpu()`` too, unless its result is
    turned into numbers or NumPy at once, or the file uses RPC (which sends CPU tensors), or it
    is taken only on a path where the CPU is meant: a fallback (an ``except`` handler, a branch
    for a device that lacks the operator, such as MPS) or the evaluation-only branch of the
    forward (``if not self.training:``), whose outputs go to a host-side evaluator."""

    CODE = "PTT015"

    def visit_Call(self, node: cst.Call) -> None:
        method = _method(node)
        if method not in ("cuda", "cpu", "to") or not self.where.method_of_model("forward"):
            return
        if method == "cuda" and _input_device_arg(node):
            return  # the input's own device (.cuda(x.get_device()), .cuda(x.device))
        if method == "to":
            args = _positional(node)
            if args and isinstance(args[0].value, cst.SimpleString) and "cuda" in args[0].value.value:
                self.flag(node)
        elif method == "cuda":
            if not self._data_parallel():
                self.flag(node)
        elif id(node) not in self.leaving and not self.facts.uses_rpc and not self._cpu_meant(node):
            self.flag(node)

    def _fallback(self) -> bool:
        """In an ``except`` handler or a branch for a device that lacks operators: a fallback to
        the CPU when the operator fails or is missing on the input's device."""
        for n in reversed(self.where.stack):
            if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return False
            if isinstance(n, cst.ExceptHandler) or (isinstance(n, cst.If) and (
                    self._fallback_test(n.test) or _offload_test(n.test))):
                return True
        return False

    def _cpu_meant(self, node: cst.Call) -> bool:
        """A fallback (above), or a path taken only on the CPU (the else of
        ``torch.cuda.is_available()``), where the CPU is the input's device."""
        return self._fallback() or _off_cuda(self, node, cpu=True)

    def _data_parallel(self) -> bool:
        """The class wraps its network in ``nn.DataParallel``, which runs on CUDA only: moving
        the input (NumPy, from an environment) to the GPU is the wrapper's whole job."""
        cls = self.where.module_class("forward")
        return cls is not None and any(
            type(n) is cst.Call and self.qname(n) == "torch.nn.DataParallel" for n in _walk_all(cls))

    def _fallback_test(self, test: cst.BaseExpression) -> bool:
        """The test names such a device, itself or through a name bound to one (``on_mps``)."""
        return _names_fallback_device(test) or bool(names_in(test) & self.device_flags)

    def reset(self) -> None:
        self.leaving: set[int] = set()  # .cpu() calls whose result leaves tensor land
        self.device_flags: set[str] = set()  # names bound to a test of such a device (is_mps = ...)

    def visit_If(self, node: cst.If) -> None:
        # the evaluation-only branch (if not self.training: / the else of if self.training:);
        # an If is on the tracker's stack for its body and orelse alike: its calls are noted here
        training = _training_test(node.test)
        branch = node.body if training is False else node.orelse if training else None
        if branch is not None:
            self._cpu_meant_in(branch)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        # x.cpu() if x_is_mps else x: the CPU taken only for a device that lacks the operator
        if self._fallback_test(node.test):
            self._cpu_meant_in(node)

    def _cpu_meant_in(self, node: cst.CSTNode) -> None:
        self.leaving.update(id(n) for n in walk(node) if isinstance(n, cst.Call) and _method(n) == "cpu")

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        # a .cpu() handed (at once or through a local name) to a function that is not torch's
        # (a kernel's batch sizes, scipy) or to one of torch's APIs that need a CPU tensor: the
        # callee's contract, which the rule cannot see, may require the CPU
        if node.name.value != "forward" or not self.where.method_of_model("forward"):
            return
        if _returns_to_input_device(node.body):
            self._cpu_meant_in(node.body)
            return
        foreign = self._foreign_objects()
        bound: dict[str, list[int]] = {}
        for n in walk(node.body):
            if (type(n) is cst.Assign and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name)):
                if _names_fallback_device(n.value):
                    self.device_flags.add(n.targets[0].target.value)
                cpu = _cpu_chain(n.value)
                if cpu is not None:
                    bound.setdefault(n.targets[0].target.value, []).append(id(cpu))
        # a name bound to a .cpu() value, or to what a call makes of one (x = denorm(x.cpu())),
        # whose value is then turned into a PIL image or NumPy (ToPILImage()(x[i]),
        # Image.fromarray(x), x[i].numpy()): a host-side consumer needs the host copy
        hosted: dict[str, list[int]] = {}
        for n in walk(node.body):
            if type(n) is cst.Assign and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name):
                value = n.value
                cpus = [own] if (own := _cpu_chain(value)) is not None else [
                    c for a in (value.args if isinstance(value, cst.Call) else ()) if (c := _cpu_chain(a.value))]
                for cpu in cpus:
                    hosted.setdefault(n.targets[0].target.value, []).append(id(cpu))
        if hosted:
            for n in walk(node.body):
                if type(n) is not cst.Call:
                    continue
                if _method(n) == "numpy" and isinstance(n.func, cst.Attribute):
                    values = [n.func.value]
                elif self._host_sink(n):
                    values = [a.value for a in n.args]
                else:
                    continue
                for v in values:
                    while isinstance(v, (cst.Subscript, cst.Attribute)):
                        v = v.value
                    if isinstance(v, cst.Name):
                        self.leaving.update(hosted.get(v.value, ()))
        for n in walk(node.body):
            if type(n) is not cst.Call or not (self._needs_cpu(n) or _method_of(n, foreign)):
                continue
            for arg in n.args:
                cpu = _cpu_chain(arg.value)
                if cpu is not None:
                    self.leaving.add(id(cpu))
                elif isinstance(arg.value, cst.Name):
                    self.leaving.update(bound.get(arg.value.value, ()))

    def _host_sink(self, call: cst.Call) -> bool:
        """A conversion that takes a host tensor: a PIL image (``ToPILImage()(x)``,
        ``to_pil_image(x)``, ``Image.fromarray(a)``) or NumPy's (``np.asarray(x)``)."""
        func = call.func.func if isinstance(call.func, cst.Call) else call.func
        if not isinstance(func, (cst.Name, cst.Attribute)):
            return False
        last = (get_full_name_for_node(func) or "").rsplit(".", 1)[-1]
        return last in _HOST_SINKS or (self.qualify(func) or "").startswith("numpy.")

    def _foreign_objects(self) -> set[str]:
        """``self.decoder = CTCBeamDecoder(...)`` in the forward's class: the attributes bound
        to an object another package builds (imported by name, not torch's, not a package named
        like a folder above the file, not a class of this file), whose methods are that
        package's code (a CPU-only C++ beam search, a tokenizer)."""
        cls = self.where.module_class("forward")
        found: set[str] = set()
        if cls is None:
            return found
        for n in _walk_all(cls):
            if type(n) is not cst.Assign or not isinstance(n.value, cst.Call):
                continue
            name = get_full_name_for_node(n.value.func) or ""
            root = name.split(".", 1)[0]
            qualified = self.qualify(n.value.func) or ""
            if (root not in self.facts.aliases or qualified.split(".", 1)[0] in ("torch", "torchaudio",
                                                                                 "torchvision")
                    or qualified.split(".", 1)[0] in self.facts.path_folders
                    or name.rsplit(".", 1)[-1] in self.facts.module_classes | self.facts.plain_classes):
                continue
            for t in n.targets:
                target = get_full_name_for_node(t.target) or ""
                if target.startswith("self.") and target.count(".") == 1:
                    found.add(target[5:])
        return found

    def _needs_cpu(self, call: cst.Call) -> bool:
        name = self.qname(call) or ""
        if name in _CPU_ARGUMENTS:
            return True
        if name.startswith("torch.") or not isinstance(call.func, (cst.Name, cst.Attribute)):
            return False
        root = (get_full_name_for_node(call.func) or "").split(".", 1)[0]
        # a function or module imported from another package, or a plain function of this file
        return root in self.facts.aliases or (isinstance(call.func, cst.Name) and root != "super")

    def visit_Attribute(self, node: cst.Attribute) -> None:
        # x.cpu().numpy(), x.cpu().tolist(), x.cpu().item(): the result leaves the model, also
        # through methods and items on the way (x.cpu().detach().numpy(), x.cpu()[0].tolist())
        # and through torch's functions of it (torch.zeros_like(x.cpu()).numpy(): NumPy work)
        if node.attr.value in ("numpy", "tolist", "item"):
            value = node.value
            while isinstance(value, (cst.Call, cst.Subscript)):
                if isinstance(value, cst.Subscript):
                    value = value.value
                elif _method(value) == "cpu":
                    self.leaving.add(id(value))
                    return
                elif (_plain_dotted(value.func) and (self.qname(value) or "").startswith("torch.")
                      and not (self.qname(value) or "").startswith("torch.nn.")):
                    self.leaving.update(id(c) for a in value.args if (c := _cpu_chain(a.value)) is not None)
                    return
                elif isinstance(value.func, cst.Attribute):
                    value = value.func.value
                else:
                    return


def _plain_dotted(node: cst.BaseExpression) -> bool:
    """``torch.zeros_like``: names and attributes only (not a method of a call's result)."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _input_device_arg(call: cst.Call) -> bool:
    """``.cuda(x.get_device())`` / ``.cuda(x.device)`` / ``.cuda(device=x.device)``: the move
    targets another tensor's own device, not a hard-coded one."""
    for a in call.args:
        if a.keyword is not None and a.keyword.value != "device":
            continue
        v = a.value
        if isinstance(v, cst.Attribute) and v.attr.value == "device" and not (
                isinstance(v.value, cst.Name) and v.value.value in ("torch", "self", "args", "cfg", "config", "opt")):
            return True
        if isinstance(v, cst.Call) and _method(v) == "get_device":
            return True
        return False
    return False


def _method_of(call: cst.Call, objects: set[str]) -> bool:
    """``self.decoder.decode(...)``: a method (not the object called itself, which may be a
    module's forward) of one of the ``objects`` bound to self."""
    func = call.func
    return (bool(objects) and isinstance(func, cst.Attribute) and isinstance(func.value, cst.Attribute)
            and isinstance(func.value.value, cst.Name) and func.value.value.value == "self"
            and func.value.attr.value in objects)


def _returns_to_input_device(body: cst.CSTNode) -> bool:
    """The forward keeps a tensor's device in a name (``device = x.device``) and moves a result
    back to it (``out.to(device)``, ``.to(device=device)``): it offloads to the CPU on purpose
    (chunked inference gathering its outputs on the host) and returns to the input's device."""
    kept = {t.target.value for n in walk(body) if type(n) is cst.Assign
            and isinstance(n.value, cst.Attribute) and n.value.attr.value == "device"
            for t in n.targets if isinstance(t.target, cst.Name)}
    if not kept:
        return False
    for n in walk(body):
        if type(n) is cst.Call and _method(n) == "to":
            for arg in n.args:
                if ((arg.keyword is None or arg.keyword.value == "device")
                        and isinstance(arg.value, cst.Name) and arg.value.value in kept):
                    return True
    return False


class FactoryWithoutDevice(RuleVisitor):
    """Not a factory moved at once (``torch.zeros(n).to(x.device)``), nor ``torch.tensor`` of
    shapes or lengths (CPU metadata, used for indexing), nor one random number read on the host
    (``if torch.rand(1) < p``, ``int(...)``, a name bound to it used as a slice bound or in a test)."""

    CODE = "PTT016"

    def reset(self) -> None:
        self.moved: set[int] = set()
        self.host: set[int] = set()  # calls whose value is read on the host at once
        self.bound: dict[int, str] = {}  # id(draw) -> the name it is bound to
        self.held: list[tuple[cst.Call, str]] = []  # one-number draws bound to a name
        self.host_names: set[str] = set()  # names read on the host (a slice bound, a test, int())
        self.read_at_once: set[int] = set()  # factories whose chain ends in .item()/.tolist()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value in ("to", "type_as", "cuda"):
            # moved at once (a hard-coded .cuda() is PTT015's), itself or what is computed from
            # it on the way: torch.empty(n).uniform_().cuda(), (torch.arange(n) % k).to(device)
            self.moved |= {id(n) for n in _moved_sources(node.value)}
        if node.attr.value in ("item", "tolist") and isinstance(node.value, cst.Call):
            self.host.add(id(node.value))
            # torch.empty(1).uniform_(a, b).item(): a draw filled in place and read at once,
            # through methods that take no tensor (random fills, methods without arguments)
            value = node.value
            self.read_at_once.add(id(value))
            while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                   and (value.func.attr.value in _FILLS or not value.args)):
                value = value.func.value
                if isinstance(value, cst.Call):
                    self.read_at_once.add(id(value))

    def _moved_by_type(self, node: cst.Call) -> None:
        """``torch.eye(n).type(x.type())``: the type string of another tensor names its device
        too (``torch.cuda.FloatTensor``), so the factory is moved at once."""
        args = _positional(node)
        if _method(node) == "type" and len(args) == 1 and isinstance(args[0].value, cst.Call) \
                and _method(args[0].value) == "type" and not args[0].value.args:
            self.moved |= {id(n) for n in _moved_sources(node.func.value)}

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if not any(isinstance(n, (cst.FunctionDef, cst.Lambda)) for n in self.where.stack[:-1]):
            # a method's default values and decorators run once, when the class is defined:
            # no per-call work, and no input whose device they could take (a default
            # ``cache: Tensor = torch.zeros((0, 0, 0))`` is a placeholder)
            self.moved |= {id(n) for part in (node.params, *node.decorators)
                           for n in [part, *walk(part)] if isinstance(n, cst.Call)}
        # a factory handed (at once or through a local name) to a function that is not torch's
        # (an extension kernel's output buffer): the callee's contract may need the CPU
        if node.name.value != "forward" or not self.where.method_of_model("forward"):
            return
        bound: dict[str, list[int]] = {}
        for n in walk(node.body):
            if type(n) is cst.Assign and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name) \
                    and isinstance(n.value, cst.Call):
                bound.setdefault(n.targets[0].target.value, []).append(id(n.value))
        for n in walk(node.body):
            if type(n) is not cst.Call or not _foreign_call(self, n):
                continue
            for arg in n.args:
                if isinstance(arg.value, cst.Call):
                    self.moved.add(id(arg.value))
                elif isinstance(arg.value, cst.Name):
                    self.moved.update(bound.get(arg.value.value, ()))
        self.moved |= _moved_through_names(self, node)
        self.moved |= _cpu_lengths(self, node)
        self.moved |= _moved_next(self, node)
        start = _cpu_input_rebind(node)
        if start is not None:
            # the input itself was brought to the CPU (x = self.transform(x.cpu())): the CPU is
            # the input's device from there on, and a factory after it is made where x is
            self.moved |= {id(n) for stmt in node.body.body[start + 1:] for n in walk(stmt)
                           if type(n) is cst.Call}

    def _read_on_host(self, node: cst.CSTNode) -> None:
        self.host |= {id(n) for n in [node, *walk(node)] if isinstance(n, cst.Call)}
        self.host_names |= {n.value for n in [node, *walk(node)] if isinstance(n, cst.Name)}

    def visit_Comparison(self, node: cst.Comparison) -> None:
        self._read_on_host(node)

    def visit_If(self, node: cst.If) -> None:
        self._read_on_host(node.test)
        # a placeholder for a name the other branch computes on the CPU (from .cpu() inputs):
        # it mirrors that branch's device, which the input's device would no longer match
        if isinstance(node.orelse, cst.Else):
            for branch, other in ((node.body, node.orelse.body), (node.orelse.body, node.body)):
                on_cpu = _bound_on_cpu(other)
                if not on_cpu:
                    continue
                for n in walk(branch):
                    if type(n) is cst.Assign and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name) \
                            and n.targets[0].target.value in on_cpu:
                        self.moved |= {id(c) for c in _moved_sources(n.value)}

    def visit_Slice(self, node: cst.Slice) -> None:
        for part in (node.lower, node.upper, node.step):
            if part is not None:
                self._read_on_host(part)

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            self.bound[id(node.value)] = node.targets[0].target.value

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        held, self.held = self.held, []
        for call, name in held:
            if name not in self.host_names:
                self.flag(call)

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value in ("int", "float", "bool"):
            self._read_on_host(node)
        self._moved_by_type(node)
        name = self.qname(node)
        if (name not in FACTORIES or self.get_specific_arg(node, "device", -1) is not None
                or _star_kwargs(node) or id(node) in self.moved or not self.where.method_of_model("forward")):
            return
        if name == "torch.tensor" and node.args and names_in(node.args[0].value) & {"shape", "size", "len"}:
            return  # (names_in holds an attribute's own name: x.shape gives "shape")
        if _empty_shape(node, name):
            return  # torch.empty(0, 0, 0): an empty placeholder ("no cache"), no data to copy
        if self.facts.exports_onnx and not self.facts.mentions_cuda:
            return  # a script that exports to ONNX and never names a GPU: it runs on the CPU
        if id(node) in self.read_at_once:
            return  # torch.empty(1).uniform_(a, b).item(): a host number, the device only a sync
        if self.facts.cpu_transforms:
            # a forward of the file converts its input with .numpy() (no .cpu() on the way, which
            # only a CPU tensor allows): data transforms, run on the CPU, the factory's default
            return
        if name == "torch.tensor" and node.args and _scalar(node.args[0].value):
            return  # a 0-d tensor (x * torch.tensor(d ** 0.5)): used as a scalar, nothing is copied
        if name == "torch.tensor" and node.args and not isinstance(
                node.args[0].value, (cst.List, cst.Tuple, cst.ListComp, cst.GeneratorExp)):
            # torch.tensor(self.size), torch.tensor(finfo.min): a number (a 0-d tensor, used as a
            # scalar) or sizes kept on the CPU as metadata, which the rule cannot tell apart
            return
        if _cache_refill(self.where.stack, node):
            return  # built on a cache miss and kept on the module: once, not per call
        if _off_cuda(self, node, cpu=True):
            return  # a branch taken only on the CPU (else of torch.cuda.is_available()): the input's device
        if name in RANDOM_DRAWS and _one_number(node, name):
            if id(node) in self.host:
                return  # one random number read on the host at once (torch.rand(1) < p, int(...))
            if id(node) in self.bound:  # judged by how its name is used (a slice bound, a test)
                self.held.append((node, self.bound[id(node)]))
                return
        self.flag(node)


_CACHE = re.compile(r"cache", re.IGNORECASE)


def _cache_refill(stack: list[cst.CSTNode], node: cst.CSTNode) -> bool:
    """The node is in a branch of an ``if`` that tests a cache (``if self.cached_len >= n:``),
    and that branch stores a local into an attribute of ``self`` named for a cache
    (``self.cached_matrix = a``): it runs on a cache miss, not on every call."""
    for outer in stack:
        if not isinstance(outer, cst.If) or any(n is node for n in walk(outer.test)):
            continue
        if not any(isinstance(n, (cst.Name, cst.Attribute)) and _CACHE.search(
                n.value if isinstance(n, cst.Name) else n.attr.value) for n in [outer.test, *walk(outer.test)]):
            continue
        branch = next((b for b in (outer.body, outer.orelse) if b is not None
                       and any(n is node for n in walk(b))), None)
        if branch is None:
            continue
        for n in walk(branch):
            if isinstance(n, cst.Assign) and isinstance(n.value, cst.Name) and any(
                    isinstance(t.target, cst.Attribute) and get_full_name_for_node(t.target.value) == "self"
                    and _CACHE.search(t.target.attr.value) for t in n.targets):
                return True
    return False


def _cpu_lengths(visitor: RuleVisitor, func: cst.FunctionDef) -> set[int]:
    """Factories whose value serves only for the lengths of ``pack_padded_sequence`` (``mask =
    torch.ones(b, t); lengths = mask.sum(1); pack_padded_sequence(x, lengths, ...)``): lengths
    must be on the CPU there, so the factory's CPU default is the right device. Only when the
    name bound to it is read nowhere else (but in an ``is None`` test)."""
    packs = [n for n in walk(func.body) if type(n) is cst.Call
             and (visitor.qname(n) or "").endswith("pack_padded_sequence")]
    lengths = [a.value for p in packs for i, a in enumerate(p.args)
               if (a.keyword is None and i == 1) or (a.keyword is not None and a.keyword.value == "lengths")]
    if not lengths:
        return set()
    assigns = [n for n in walk(func.body) if type(n) is cst.Assign and len(n.targets) == 1
               and isinstance(n.targets[0].target, cst.Name)]
    chain: set[str] = set()
    for v in lengths:
        chain |= names_in(v)
    for _ in range(4):  # lengths = mask.sum(1); mask = torch.ones(...)
        chain |= {name for a in assigns if a.targets[0].target.value in chain for name in names_in(a.value)}
    allowed: set[int] = set()
    for part in [*lengths, *(a.value for a in assigns if a.targets[0].target.value in chain),
                 *(a.targets[0].target for a in assigns),
                 *(n for n in walk(func.body) if type(n) is cst.Comparison and any(
                     isinstance(c.comparator, cst.Name) and c.comparator.value == "None"
                     for c in n.comparisons))]:
        allowed |= {id(part)} | {id(n) for n in walk(part)}
    out: set[int] = set()
    for a in assigns:
        name = a.targets[0].target.value
        if name in chain and isinstance(a.value, cst.Call) and visitor.qname(a.value) in FACTORIES and not any(
                type(n) is cst.Name and n.value == name and id(n) not in allowed for n in walk(func.body)):
            out.add(id(a.value))
    return out


RANDOM_DRAWS = {"torch.rand", "torch.randn", "torch.randint"}
# the in-place random fills of a tensor (torch.empty(1).uniform_(a, b))
_FILLS = frozenset({"uniform_", "normal_", "random_", "exponential_", "bernoulli_", "geometric_",
                    "log_normal_", "cauchy_"})



def _empty_shape(call: cst.Call, name: str) -> bool:
    """A factory whose shape has a literal 0 (``torch.zeros(0, 0, 0)``, ``torch.ones((0, n))``,
    ``torch.tensor([])``): an empty tensor, which holds no data to copy."""
    args = _positional(call)
    size = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "size"), None)
    if name == "torch.tensor":
        return bool(args) and isinstance(args[0].value, (cst.List, cst.Tuple)) and not args[0].value.elements
    if name in ("torch.zeros", "torch.ones", "torch.empty", "torch.rand", "torch.randn"):
        dims = [a.value for a in args]
    elif name in ("torch.full", "torch.randint"):
        dims = [a.value for a in args if isinstance(a.value, (cst.Tuple, cst.List))][:1]
    else:
        return False
    if size is not None:
        dims.append(size)
    if len(dims) == 1 and isinstance(dims[0], (cst.Tuple, cst.List)):
        dims = [e.value for e in dims[0].elements]
    elif any(isinstance(d, (cst.Tuple, cst.List)) for d in dims):
        dims = [e.value for d in dims if isinstance(d, (cst.Tuple, cst.List)) for e in d.elements]
    return any(_int(d) == 0 for d in dims)


def _operands(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """What an operator or a tuple/list literal computes its value from (nothing for others)."""
    if isinstance(node, cst.BinaryOperation):
        return [node.left, node.right]
    if isinstance(node, cst.Comparison):
        return [node.left, *(c.comparator for c in node.comparisons)]
    if isinstance(node, cst.UnaryOperation):
        return [node.expression]
    if isinstance(node, (cst.Tuple, cst.List)):
        return [e.value for e in node.elements]
    return []


def _moved_sources(value: cst.BaseExpression) -> list[cst.Call]:
    """The calls whose result reaches ``value`` through method chains, operators, torch's
    functions, indexing and attributes (``torch.empty(n).uniform_()``, ``torch.arange(n) % k ==
    j``, ``torch.cat(...)``, ``torch.linspace(0, 1, h)[None, :].expand(b, h)``, ``torch.eye(n).T``):
    moved together with ``value``, they never meet a device tensor on the CPU."""
    found: list[cst.Call] = []
    todo = [value]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.Call):
            found.append(node)
            if isinstance(node.func, cst.Attribute):
                todo.append(node.func.value)
            name = get_full_name_for_node(node.func) or ""
            if name.startswith("torch."):
                todo += [a.value for a in node.args]
        elif isinstance(node, (cst.Subscript, cst.Attribute)):
            todo.append(node.value)  # the tensor indexed (not its index), or read (.T, .real)
        else:
            todo += _operands(node)
    return found


_DTYPE_WORDS = frozenset({"float", "float16", "float32", "float64", "half", "double", "bfloat16", "int", "int8",
                          "int16", "int32", "int64", "long", "short", "uint8", "bool", "complex64", "complex128"})


def _moves(call: cst.Call) -> bool:
    """``.type_as(x)``, ``.to(x.device)``, ``.to(device=dev)``: a move to a device the code
    takes from elsewhere, not a cast alone (``.to(torch.bool)``, ``.to(dtype=...)``), nor a
    hard-coded one (``.cuda()``, ``.to("cuda")``: PTT015's, and the factory stays PTT016's)."""
    method = _method(call)
    if method == "type_as":
        return True
    if method != "to":
        return False
    device = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "device"), None)
    if device is None:
        args = _positional(call)
        if not args:
            return False
        device = args[0].value
        last = (get_full_name_for_node(device) or "").rsplit(".", 1)[-1]
        if last in _DTYPE_WORDS or "dtype" in last.lower():
            return False
    return not isinstance(device, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString,
                                   cst.Integer, cst.Float))


def _flow(visitor: RuleVisitor, value: cst.BaseExpression) -> tuple[list[cst.Call], list[cst.Name]]:
    """The calls and names whose value reaches ``value`` through method chains, items, operators
    and torch's functions (``F.pad(mask, ...)``, ``torch.cat([a, b])[None]``)."""
    calls: list[cst.Call] = []
    names: list[cst.Name] = []
    todo = [value]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.Name):
            names.append(node)
        elif isinstance(node, cst.Call):
            calls.append(node)
            if isinstance(node.func, cst.Attribute):
                todo.append(node.func.value)
            if (visitor.qname(node) or get_full_name_for_node(node.func) or "").startswith("torch."):
                todo += [a.value for a in node.args]
        elif isinstance(node, cst.Subscript):
            todo.append(node.value)
        else:
            todo += _operands(node)
    return calls, names


def _moved_through_names(visitor: RuleVisitor, func: cst.FunctionDef) -> set[int]:
    """The calls bound to a local name, once, whose every use is moved to a device (at once, or
    through other such names) before anything else reads it: ``mask = torch.zeros(n, n)``,
    ``padded = F.pad(mask, (0, k))``, ``full = torch.cat([padded, other]).to(x.device)``."""
    params = {p.name.value for p in [*func.params.posonly_params, *func.params.params,
                                     *func.params.kwonly_params]}
    values: dict[str, list[cst.BaseExpression]] = {}
    others: set[str] = set(params)  # names bound some other way, or read in a nested scope
    not_uses: set[int] = set()  # ids of Name nodes that are no reads (targets, attributes, keywords)
    moved_uses: set[int] = set()
    feeds: dict[int, str] = {}  # id(a Name read) -> the name its value is bound to
    nodes = list(walk(func.body))
    for n in nodes:
        kind = type(n)
        if kind is cst.Assign:
            for t in n.targets:
                if len(n.targets) == 1 and isinstance(t.target, cst.Name):
                    values.setdefault(t.target.value, []).append(n.value)
                    not_uses.add(id(t.target))
                    for read in _flow(visitor, n.value)[1]:
                        feeds[id(read)] = t.target.value
                else:
                    others |= target_names(t.target)
        elif kind in (cst.AugAssign, cst.AnnAssign):
            others |= target_names(n.target)
        elif kind in (cst.For, cst.CompFor):
            others |= target_names(n.target)
        elif kind is cst.AsName or kind is cst.NamedExpr:
            others |= target_names(n.name if kind is cst.AsName else n.target)
        elif kind in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
            others |= names_in(n)
        elif kind is cst.Attribute:
            not_uses.add(id(n.attr))
        elif kind is cst.Arg and n.keyword is not None:
            not_uses.add(id(n.keyword))
        elif kind is cst.Call and _moves(n):
            moved_uses.update(id(read) for read in _flow(visitor, n.func.value)[1])
    uses: dict[str, list[int]] = {}
    for n in nodes:
        if type(n) is cst.Name and id(n) not in not_uses:
            uses.setdefault(n.value, []).append(id(n))
    candidates = {k for k, v in values.items() if len(v) == 1 and k not in others and uses.get(k)}
    moved: set[str] = set()
    grown = True
    while grown:
        grown = False
        for name in candidates - moved:
            if all(u in moved_uses or feeds.get(u) in moved for u in uses[name]) \
                    and all(feeds.get(u) != name for u in uses[name]):
                moved.add(name)
                grown = True
    return {id(c) for name in moved for c in _flow(visitor, values[name][0])[0]}


def _cpu_input_rebind(func: cst.FunctionDef) -> int | None:
    """The index in ``func``'s body of a top-level statement that rebinds every required
    parameter (but ``self``) from its own ``.cpu()`` copy (``x = self.denorm(x.cpu())``,
    ``x = x.cpu()``), with no move back after: from there on the function works on the CPU."""
    if not isinstance(func.body, cst.IndentedBlock):
        return None
    params = {p.name.value for p in [*func.params.posonly_params, *func.params.params]
              if p.default is None and p.name.value not in ("self", "cls")}
    if not params:
        return None
    left = set(params)
    for i, stmt in enumerate(func.body.body):
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if not (isinstance(small, cst.Assign) and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)
                    and small.targets[0].target.value in left):
                continue
            name = small.targets[0].target.value
            value = small.value
            if any(isinstance(c, cst.Call) and _method(c) in ("to", "cuda", "type_as")
                   for c in [value, *walk(value)]):
                continue
            if any(isinstance(c, cst.Call) and _method(c) == "cpu" and isinstance(c.func, cst.Attribute)
                   and isinstance(c.func.value, cst.Name) and c.func.value.value == name
                   for c in [value, *walk(value)]):
                left.discard(name)
        if not left:
            return i
    return None


def _moved_next(visitor: RuleVisitor, func: cst.FunctionDef) -> set[int]:
    """Factories bound to names (``a, b = torch.meshgrid(torch.arange(h), torch.arange(w))``)
    that the statements right after rebind, each from itself moved to a device taken from
    elsewhere (``a = a.float().to(x.device) / h``): nothing reads them on the CPU."""
    found: set[int] = set()
    for block in [n for n in [func.body, *walk(func.body)] if isinstance(n, cst.IndentedBlock)]:
        stmts = list(block.body)
        for i, stmt in enumerate(stmts):
            if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
                    and isinstance(stmt.body[0], cst.Assign) and len(stmt.body[0].targets) == 1):
                continue
            target = stmt.body[0].targets[0].target
            if isinstance(target, cst.Name):
                names = {target.value}
            elif isinstance(target, (cst.Tuple, cst.List)) and all(
                    isinstance(e.value, cst.Name) for e in target.elements):
                names = {e.value.value for e in target.elements}
            else:
                continue
            left = set(names)
            for nxt in stmts[i + 1:i + 1 + len(names)]:
                if not (isinstance(nxt, cst.SimpleStatementLine) and len(nxt.body) == 1
                        and isinstance(nxt.body[0], cst.Assign) and len(nxt.body[0].targets) == 1
                        and isinstance(nxt.body[0].targets[0].target, cst.Name)
                        and nxt.body[0].targets[0].target.value in left):
                    break
                name = nxt.body[0].targets[0].target.value
                value = nxt.body[0].value
                if not any(type(c) is cst.Call and _moves(c) and any(
                        r.value == name for r in _flow(visitor, c.func.value)[1])
                        for c in [value, *walk(value)]):
                    break
                left.discard(name)
            if not left:
                found |= {id(c) for c in _moved_sources(stmt.body[0].value)}
    return found


def _bound_on_cpu(block: cst.CSTNode) -> set[str]:
    """The names a block binds to a value computed from ``.cpu()`` inputs and not moved after
    (``idx, offsets = cluster(pred.cpu(), nbr.cpu())``, ``keep = mask.nonzero().cpu()``)."""
    found: set[str] = set()
    for n in walk(block):
        if type(n) is not cst.Assign or not isinstance(n.value, cst.Call):
            continue
        chain: cst.BaseExpression = n.value
        while isinstance(chain, cst.Call) and isinstance(chain.func, cst.Attribute) and _method(chain) != "cpu":
            if _method(chain) in ("to", "cuda", "type_as"):
                break
            chain = chain.func.value
        else:
            if any(isinstance(c, cst.Call) and _method(c) == "cpu" for c in [n.value, *walk(n.value)]):
                for t in n.targets:
                    found |= target_names(t.target)
    return found


def _foreign_call(visitor: RuleVisitor, call: cst.Call) -> bool:
    """A call of a function imported from another package (not torch's) or of a plain function
    of this file: what it needs of its arguments' devices is its own contract."""
    name = visitor.qname(call) or ""
    if name.startswith("torch.") or not isinstance(call.func, (cst.Name, cst.Attribute)):
        return False
    root = (get_full_name_for_node(call.func) or "").split(".", 1)[0]
    if isinstance(call.func, cst.Name):
        return root not in ("super", "int", "float", "bool", "len", "list", "tuple", "range",
                            "isinstance", "print", "min", "max", "sum", "abs", "getattr")
    return root in visitor.facts.aliases


def _one_number(call: cst.Call, name: str) -> bool:
    """A draw of one number (``torch.rand(1)``, ``torch.rand([])``, ``torch.randint(0, n, ())``):
    when it decides something on the host (a branch, an int, a slice bound), drawn on the GPU
    each read would wait for the device."""
    if any(a.star for a in call.args):
        return False
    size = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "size"), None)
    args = [a.value for a in _positional(call)]
    if not args and size is None:
        return False
    if size is None:
        if name == "torch.randint":
            size = args[2] if len(args) >= 3 else args[1] if len(args) == 2 and isinstance(
                args[1], (cst.Tuple, cst.List)) else None
            if size is None:
                return False
            sizes = [size]
        else:
            sizes = args
    else:
        sizes = [size]
    if len(sizes) == 1 and isinstance(sizes[0], (cst.Tuple, cst.List)):
        sizes = [e.value for e in sizes[0].elements]
    return all(isinstance(v, cst.Integer) and v.value == "1" for v in sizes)


def _scalar(value: cst.BaseExpression) -> bool:
    """A number, or arithmetic with a number and no list, tuple or comprehension in it."""
    if isinstance(value, (cst.Integer, cst.Float)):
        return True
    if isinstance(value, cst.UnaryOperation):
        return _scalar(value.expression)
    if isinstance(value, cst.BinaryOperation):
        sequences = (cst.List, cst.Tuple, cst.ListComp, cst.GeneratorExp, cst.Dict, cst.Set)
        parts = [value.left, value.right]
        return any(_scalar(p) for p in parts) and not any(
            isinstance(n, sequences) for p in parts for n in [p, *walk(p)])
    return False


def _self_attr_calls(node: cst.CSTNode) -> list[tuple[cst.Call, str]]:
    """``self.encoder(x)`` and ``self.vae.encode(x)``: the calls through an attribute of
    ``self``, with that attribute's name."""
    out = []
    for n in walk(node):
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute):
            target = n.func
            while isinstance(target.value, cst.Attribute):
                target = target.value
            if isinstance(target.value, cst.Name) and target.value.value == "self":
                out.append((n, target.attr.value))
    return out


_CONVS = frozenset(f"torch.nn.{k}" for k in ("Conv1d", "Conv2d", "Conv3d"))


def _owner(node: cst.BaseExpression) -> str:
    """``self.f`` of ``self.f.weight.data`` or ``self.f.weight``; a local's name likewise; the
    name itself otherwise ("" where it is no name)."""
    full = get_full_name_for_node(node) or ""
    parts = full.split(".")
    while len(parts) > 1 and parts[-1] in ("data", "weight", "bias"):
        parts.pop()
    return ".".join(parts)


_EMA = re.compile(r"momentum|(^|_)ema(_|$)|teacher", re.IGNORECASE)
# a submodule named for corrupting or augmenting the input (swap noise, masking augmentation):
# data preparation with no parameters to freeze
_CORRUPTS = re.compile(r"noise|corrupt|augment|perturb", re.IGNORECASE)


class NoGradInForward(RuleVisitor):
    """Only a ``with torch.no_grad():`` in a model's forward that runs a submodule of the model
    (an attribute of ``self`` that is no method of the class) and only computes: a block that
    writes in place (a weight renormalised with ``copy_``, a buffer of counts, activations scaled
    with ``mul_``) needs no_grad; one that computes with functions or the class's own methods
    (hard alignments, sampled indices, routing bins) is deliberate and cannot be told from an
    accident; a submodule the same forward also calls with gradients still trains (a
    self-conditioning pass); and a file that exports a model wraps it for tracing."""

    CODE = "PTT017"

    def visit_With(self, node: cst.With) -> None:
        for item in node.items:
            if (isinstance(item.item, cst.Call) and self.qname(item.item) == "torch.no_grad"
                    and self.where.method_of_model("forward") and self._freezes_submodule(node)):
                self.flag(item.item)

    def _freezes_submodule(self, block: cst.With) -> bool:
        if self.facts.exports or _writes_state(block.body):
            return False
        cls, func = self.where.module_class("forward"), self.where.function()
        if cls is None or func is None:
            return False
        methods = {s.name.value for s in cls.body.body if isinstance(s, cst.FunctionDef)}
        inside = _self_attr_calls(block.body)
        plain = self._plain_objects(cls)
        frozen = {name for _, name in inside if name not in methods and name not in plain
                  and not _CORRUPTS.search(name)}
        if not frozen or self._moving_average(frozen, func):
            return False
        if frozen <= self._fixed_by_class(cls):
            return False  # the class fixes their weights itself: nothing to fine-tune
        seen = {id(c) for c, _ in inside}
        return not any(name in frozen and id(c) not in seen for c, name in _self_attr_calls(func.body))


    @staticmethod
    def _moving_average(frozen: set[str], func: cst.FunctionDef) -> bool:
        """A momentum (EMA) encoder, MoCo's or BYOL's, or a teacher: the block runs a submodule
        named for one (``self.momentum_backbone``, ``self.ema_model``, ``self.teacher``), or the
        forward calls an update named for one (``self._momentum_update_key_encoder()``). Its
        parameters follow an exponential moving average, never gradients: no_grad is the
        algorithm, not a freezing choice to leave to the caller."""
        if any(_EMA.search(name) for name in frozen):
            return True
        return any(isinstance(n, cst.Call) and _EMA.search(
            (get_full_name_for_node(n.func) or "").rsplit(".", 1)[-1]) for n in walk(func.body))

    def _fixed_by_class(self, cls: cst.ClassDef) -> set[str]:
        """Attributes of ``self`` whose weights the class itself fixes: it turns their gradients
        off (``self.vgg.requires_grad_(False)``, ``for p in self.vgg.parameters(): p.requires_grad
        = False``, ``self.f.weight.requires_grad = False``, or the same on a local it builds the
        attribute from: ``vgg = vgg19(...)``, its parameters frozen, ``self.features =
        nn.Sequential(*layers)`` over vgg's modules), or the attribute is a convolution whose
        kernel the class writes by hand (``self.blur.weight.data.copy_(gauss)``, ``.fill_(1)``):
        a fixed filter, as a Gaussian blur or a dilation, not a layer to train."""
        convs: set[str] = set()
        frozen: set[str] = set()  # self.x (dotted) or local names with parameters frozen
        written: set[str] = set()  # self attributes whose kernel is written through .data
        deps: dict[str, set[str]] = {}  # name -> names its value is built from
        for n in _class_nodes(cls):
            kind = type(n)
            if kind is cst.Assign:
                for t in n.targets:
                    target = get_full_name_for_node(t.target)
                    if target is None:
                        continue
                    deps.setdefault(target, set()).update(names_in(n.value))
                    if isinstance(n.value, cst.Call) and target.startswith("self.") and (
                            self.qname(n.value) or "") in _CONVS:
                        convs.add(target)
                    if (isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad"
                            and _is_false(n.value)):
                        frozen.add(_owner(t.target.value))
                    if isinstance(t.target, cst.Attribute) and t.target.attr.value == "data":
                        written.add(_owner(t.target.value))
            elif kind is cst.For:
                bound = {m.value for m in [n.target, *walk(n.target)] if type(m) is cst.Name}
                for target in bound:
                    deps.setdefault(target, set()).update(names_in(n.iter))
                # for p in vgg.parameters(): p.requires_grad = False
                if (isinstance(n.iter, cst.Call) and _method(n.iter) in ("parameters", "named_parameters")
                        and any(type(m) is cst.Assign and _is_false(m.value) and any(
                            isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad"
                            and get_full_name_for_node(t.target.value) in bound for t in m.targets)
                            for m in walk(n.body))):
                    frozen.add(get_full_name_for_node(n.iter.func.value) or "")
            elif kind is cst.Call and isinstance(n.func, cst.Attribute):
                method = n.func.attr.value
                owner = get_full_name_for_node(n.func.value)
                if owner is None:
                    continue
                if method == "requires_grad_" and n.args and _is_false(n.args[0].value):
                    frozen.add(_owner(n.func.value))
                elif method in ("append", "extend", "insert"):
                    deps.setdefault(owner, set()).update(x for a in n.args for x in names_in(a.value))
                elif method in ("copy_", "fill_") and owner.endswith(".data"):
                    written.add(_owner(n.func.value))
        fixed = {name for name in frozen | (written & convs) if name.startswith("self.")}
        for name in [d for d in deps if d.startswith("self.")]:
            seen, todo = set(), [name]
            while todo:  # what the attribute is built from, through the class's bindings
                cur = todo.pop()
                if cur in seen:
                    continue
                seen.add(cur)
                if cur != name and cur in frozen:
                    fixed.add(name)
                    break
                todo += deps.get(cur, ())
        return {name.split(".")[1] for name in fixed if name.count(".") == 1}

    def _plain_objects(self, cls: cst.ClassDef) -> set[str]:
        """Attributes of ``self`` that every binding in the class makes an instance of a class
        of this file that is no module (a preprocessing object: resize, normalise), or a
        lambda: no parameters, nothing the no_grad could freeze."""
        plain_classes = self.facts.plain_classes
        kinds: dict[str, set[bool]] = {}
        for n in _class_nodes(cls):
            if isinstance(n, cst.Assign) and _self_target(n):
                v = n.value
                is_plain = isinstance(v, cst.Lambda) or (
                    isinstance(v, cst.Call) and isinstance(v.func, cst.Name) and v.func.value in plain_classes)
                kinds.setdefault(n.targets[0].target.attr.value, set()).add(is_plain)
        return {name for name, k in kinds.items() if k == {True}}


class ModeSwitchInForward(RuleVisitor):
    CODE = "PTT018"

    def visit_Call(self, node: cst.Call) -> None:
        if (_method(node) in ("eval", "train") and isinstance(node.func.value, cst.Name)
                and node.func.value.value == "self" and self.where.method_of_model("forward")):
            self.flag(node)


class LinearNotMultipleOf8(RuleVisitor):
    """Only a hidden width: a literal size that one Linear of the file gives out and another
    takes in, a free choice of the model's author. A size only taken in (the data's features) or
    only given out (classes, a vocabulary, the buckets of a value head) is fixed by the data or
    by another tensor, and padding it breaks shapes elsewhere. Only where the file or its
    project computes in fp16/bf16 or TF32 somewhere: Tensor Cores do not run fp32 matmuls."""

    CODE = "PTT032"

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname(node) != "torch.nn.Linear":
            return
        sizes = [_int(a.value) for a in node.args[:2] if a.keyword is None
                 or a.keyword.value in ("in_features", "out_features")]
        hidden = self.facts.linear_inputs & self.facts.linear_outputs
        if not self.facts.reduced_precision:
            return  # an fp32-only project: no Tensor Core kernel to miss
        if any(s is not None and s >= 64 and s % 8 and s in hidden for s in sizes):
            self.flag(node)


# --- autograd and evaluation ------------------------------------------------------------------------

def _writes_state(node: cst.CSTNode) -> bool:
    """Updates that outlive the block: ``p -= ...``, ``p.add_(...)``, ``w[i] = ...``,
    ``self.x = ...`` (a buffer or cache later used with autograd)."""
    for n in [node, *walk(node)]:
        if isinstance(n, cst.AugAssign):
            return True
        if isinstance(n, cst.Assign) and any(isinstance(t.target, (cst.Subscript, cst.Attribute))
                                             for t in n.targets):
            return True
        if isinstance(n, cst.Call):
            m = _method(n)
            if m and m.endswith("_") and not m.startswith("_"):
                return True
    return False


# A call that builds or loads a model or its weights (``torch.load``, ``load_state_dict``,
# ``checkpointer.load``, ``from_pretrained``, ``Trainer(config)``, a predictor's
# ``initialize_from_trained_model_folder(...)``): not a DataLoader.
_BUILDS = re.compile(r"load(?!er)|from_pretrained|^build_model|^create_model|Trainer$|^initiali[sz]e_from",
                     re.IGNORECASE)


def _builds_state(node: cst.CSTNode) -> bool:
    """The block builds or loads a model: its parameters would be inference tensors."""
    return any(isinstance(n, cst.Call) and _BUILDS.search((get_full_name_for_node(n.func) or "").rsplit(".", 1)[-1])
               for n in walk(node))


def _single_pass(node: cst.CSTNode) -> bool:
    """Every loop in the block ends with an unconditional ``break``: one batch, looked at once
    (a sample for a log), where the saving cannot show."""
    loops = [n for n in walk(node) if isinstance(n, (cst.For, cst.While))]
    return bool(loops) and all(
        isinstance(loop.body, cst.IndentedBlock) and loop.body.body
        and isinstance(loop.body.body[-1], cst.SimpleStatementLine)
        and any(isinstance(x, cst.Break) for x in loop.body.body[-1].body) for loop in loops)


def _method_def(func: cst.FunctionDef, stack: list[cst.CSTNode]) -> bool:
    """A class's method: a class around it, or (in a piece checked without its class) a first
    parameter named ``self`` or ``cls``."""
    if any(isinstance(n, cst.ClassDef) for n in stack):
        return True
    params = func.params.params or func.params.posonly_params
    return bool(params) and params[0].name.value in ("self", "cls")


# PTT019: the collectives that update their tensor argument in place (torch.distributed's
# all_reduce, reduce, broadcast): an inference tensor handed to one outside inference_mode raises
COLLECTIVES = frozenset({"all_reduce", "reduce", "broadcast"})
# the methods that return a view of their tensor (an inference tensor's view is one too)
_VIEWS = frozenset({"view", "view_as", "reshape", "unsqueeze", "squeeze", "flatten", "t", "transpose",
                    "permute", "expand", "expand_as", "detach", "narrow", "select", "contiguous"})


def _view_of(node: cst.BaseExpression, names: set[str]) -> bool:
    """``node`` is one of ``names``, or a view of it (``x[0]``, ``x.unsqueeze(0)``)."""
    while True:
        if isinstance(node, cst.Name):
            return node.value in names
        if isinstance(node, cst.Subscript):
            node = node.value
        elif isinstance(node, cst.Call) and _method(node) in _VIEWS:
            node = node.func.value
        else:
            return False


class NoGradForInference(RuleVisitor):
    """Only in evaluation functions (named eval/valid/test/infer/predict), not in a class's
    methods (a method named predict_... may run during training too, its outputs feeding the
    losses), not around updates that outlive the block (an inference tensor stored in a buffer
    or a cache breaks autograd later), nor around code that builds or loads the model (its
    parameters would be inference tensors), nor around a loop that breaks after its first
    batch (a sample for a log: nothing to gain). Nor in a function handed a training framework's
    handle (a parameter ``fabric`` or ``accelerator``, or a block under its ``autocast()``):
    it evaluates, or samples from, the model being trained, wrapped for training (FSDP,
    DeepSpeed, compiled), where inference tensors can leak into state the next step uses; nor
    in a file that exports its model (a demo run beside the export: nothing to gain)."""

    CODE = "PTT019"

    def _evaluation(self) -> bool:
        func = self.where.function()
        if func is None or not EVALUATION.search(func.name.value) or func.name.value.startswith("test_"):
            return False
        return not _method_def(func, self.where.stack) and not self.facts.exports and not any(
            isinstance(n, cst.FunctionDef) and _training_handle(n) for n in self.where.stack)

    @staticmethod
    def _left_alone(body: cst.CSTNode) -> bool:
        return _writes_state(body) or _builds_state(body) or _single_pass(body)

    def visit_With(self, node: cst.With) -> None:
        if any(isinstance(i.item, cst.Call) and _handle_call(i.item) for i in node.items):
            return  # with accelerator.autocast(), torch.no_grad(): the model being trained
        for item in node.items:
            if (isinstance(item.item, cst.Call) and self.qname(item.item) == "torch.no_grad"
                    and self._evaluation() and not self._left_alone(node.body)
                    and not self._made_trainable(node) and not self._warms_up(node)
                    and not self.facts.reenables_grad() and not self._reduced_later(node)):
                self.flag(item.item)

    def _reduced_later(self, block: cst.With) -> bool:
        """A value the block computes (or a view of it: ``x.unsqueeze(0)``, ``x[0]``) is handed,
        outside the block, to an in-place collective (``dist.all_reduce(loss)``, ``reduce``,
        ``broadcast``) or to a function of the file or its project that hands a parameter to
        one (``loss = ddp_reduce(loss)``): an inference tensor rejects that in-place update
        outside inference_mode, so the swap breaks distributed validation."""
        func = self.where.function()
        source = self.facts.source
        if func is None or not ("reduce" in source or "broadcast" in source or self.facts.read_collectives):
            return False
        made = {x for n in walk(block.body) if isinstance(n, (cst.Assign, cst.AugAssign, cst.AnnAssign))
                for t in (n.targets if isinstance(n, cst.Assign) else [n]) for x in target_names(t.target)}
        if not made:
            return False
        inside = {id(n) for n in walk(block.body)}
        outside = [n for n in walk(func.body) if id(n) not in inside]
        for _ in range(2):  # a view of it (``t = loss.unsqueeze(0)``, ``t = out[0]``)
            for n in outside:
                if isinstance(n, cst.Assign) and _view_of(n.value, made):
                    made |= {x for t in n.targets for x in target_names(t.target)}
        helpers: frozenset[str] | None = None
        for n in outside:
            if not isinstance(n, cst.Call):
                continue
            args = _positional(n)
            name = (get_full_name_for_node(n.func) or "").rsplit(".", 1)[-1]
            if (name in COLLECTIVES and (type(n.func) is cst.Attribute or name != "reduce")
                    and args and _view_of(args[0].value, made)):
                return True
            if not any(_view_of(a.value, made) for a in args):
                continue
            if helpers is None:
                helpers = self.facts.collectives()
            if name in helpers:
                return True
        return False

    def _warms_up(self, block: cst.With) -> bool:
        """A warm-up: the function's name or a comment on the block says so (``def
        _warmup_kernel``, ``# warm up``), or the block calls ``torch.compile`` or what the file
        binds to it (``self.fn = torch.compile(f)``): it primes compiled code for the grad mode
        it will run under, which inference_mode would change."""
        func = self.where.function()
        if func is not None and _WARM_UP.search(func.name.value):
            return True
        comments = [line.comment.value for line in block.leading_lines if line.comment is not None]
        if isinstance(block.body, cst.IndentedBlock):
            comments += [line.comment.value for st in block.body.body for line in st.leading_lines
                         if line.comment is not None]
        if any(_WARM_UP.search(c) for c in comments):
            return True
        if "compile" not in self.facts.source:
            return False
        compiled = set(_COMPILED.findall(self.facts.source))
        return any(isinstance(n, cst.Call) and (self.qname(n) == "torch.compile" or (
            get_full_name_for_node(n.func) or "").rsplit(".", 1)[-1] in compiled) for n in walk(block.body))

    def _made_trainable(self, block: cst.With) -> bool:
        """What the block computes is later made a leaf to optimise, in the same function
        (``z = z.detach(); z.requires_grad = True``, ``z.requires_grad_()``, ``Adam([z])``):
        under ``inference_mode`` it would be an inference tensor, and that raises."""
        func = self.where.function()
        if func is None or "requires_grad" not in self.facts.source and "optim" not in self.facts.source:
            return False
        made = {x for n in walk(block.body) if isinstance(n, (cst.Assign, cst.AugAssign, cst.AnnAssign))
                for t in (n.targets if isinstance(n, cst.Assign) else [n]) for x in target_names(t.target)}
        if not made:
            return False
        after = [n for n in walk(func.body) if isinstance(n, (cst.Assign, cst.Call))]
        for _ in range(2):  # what is computed from it (``z2 = z.detach().to(dev)``)
            for n in after:
                if isinstance(n, cst.Assign) and names_in(n.value) & made:
                    made |= {x for t in n.targets for x in target_names(t.target)}
        for n in after:
            if isinstance(n, cst.Assign):
                if any(isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad"
                       and isinstance(t.target.value, cst.Name) and t.target.value.value in made
                       for t in n.targets) or any(
                        isinstance(t.target, cst.Tuple) and any(
                            isinstance(e.value, cst.Attribute) and e.value.attr.value == "requires_grad"
                            and isinstance(e.value.value, cst.Name) and e.value.value.value in made
                            for e in t.target.elements) for t in n.targets):
                    return True
            elif _method(n) == "requires_grad_" and isinstance(n.func.value, cst.Name) and n.func.value.value in made:
                return True
            elif (self.qname(n) or "").startswith("torch.optim.") and n.args and names_in(n.args[0].value) & made:
                return True
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if not EVALUATION.search(node.name.value) or _method_def(node, self.where.stack[:-1]):
            return
        if self.facts.exports or any(isinstance(n, cst.FunctionDef) and _training_handle(n) for n in self.where.stack):
            return
        for d in node.decorators:
            dec = d.decorator
            name = self.qname(dec) if isinstance(dec, cst.Call) else self.qualify(dec)
            if (name == "torch.no_grad" and not self._left_alone(node.body)
                    and not _WARM_UP.search(node.name.value) and not self.facts.reenables_grad()):
                self.flag(dec)


_WARM_UP = re.compile(r"warm_?up|warm[ -]up", re.IGNORECASE)
# a name (or attribute) the file binds to torch.compile(...): ``fast = torch.compile(f)``
_COMPILED = re.compile(r"(\w+)[ \t]*=[ \t]*torch\.compile\(")


# the handle of a training framework (Lightning's Fabric, Accelerate's Accelerator), which wraps the
# model being trained (FSDP, DeepSpeed, torch.compile) and runs its mixed precision
_HANDLE = re.compile(r"^(fabric|accelerator)$|(^|\.)(Fabric|Accelerator)$")


def _training_handle(func: cst.FunctionDef) -> bool:
    """A parameter named ``fabric`` or ``accelerator``, or annotated with such a class."""
    for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params):
        annotation = get_full_name_for_node(p.annotation.annotation) if p.annotation else None
        if _HANDLE.search(p.name.value) or (annotation and _HANDLE.search(annotation)):
            return True
    return False


def _handle_call(call: cst.Call) -> bool:
    """``accelerator.autocast()``, ``fabric.autocast()``: a method of such a handle."""
    return isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) and bool(
        _HANDLE.search(call.func.value.value))


# torch's calls that trace or export a model (PTT023: a call of it before is a one-shot check)
EXPORTERS = frozenset({"torch.jit.trace", "torch.jit.trace_module", "torch.onnx.export",
                       "torch.onnx.dynamo_export", "torch.export.export", "torch.export"})


class EvalWithoutNoGrad(RuleVisitor):
    """A forward call of a module after its ``.eval()``, in the same function, outside any
    grad-free block; not in unit tests (``test_*``), where the graph of a test input costs nothing,
    nor a call outside loops in a function that traces or exports a model (a one-shot check)."""

    CODE = "PTT023"

    def reset(self) -> None:
        self.evaluated: dict[int, set[str]] = {}  # id(function) -> receivers of .eval()
        self.done: set[tuple[int, str]] = set()
        self.discarded: set[int] = set()  # calls whose value is dropped (a statement alone)
        self.exporting: dict[int, bool] = {}  # id(function) -> it traces or exports a model

    def visit_Expr(self, node: cst.Expr) -> None:
        if isinstance(node.value, cst.Call):
            self.discarded.add(id(node.value))

    def _warm_up(self, node: cst.Call, func: cst.FunctionDef) -> bool:
        """One call, outside loops, on a dummy input made by a factory (``x = torch.ones(...)``),
        whose output is dropped at once: a warm-up, whose graph is freed as soon as it is made."""
        if id(node) not in self.discarded or self.where.loop() is not None or not node.args:
            return False
        made: dict[str, list[cst.BaseExpression]] = {}
        for n in walk(func.body):
            if isinstance(n, cst.Assign):
                for t in n.targets:
                    for name in target_names(t.target):
                        made.setdefault(name, []).append(n.value if isinstance(t.target, cst.Name) else t.target)
        for a in node.args:
            values = made.get(a.value.value, []) if isinstance(a.value, cst.Name) else [a.value]
            if not values or not all(self._made_by_factory(v) for v in values):
                return False
        return True

    def _made_by_factory(self, value: cst.BaseExpression) -> bool:
        while isinstance(value, cst.Call) and _method(value) in ("to", "cuda", "half", "float", "type"):
            value = value.func.value
        return isinstance(value, cst.Call) and self.qname(value) in FACTORIES

    def visit_Call(self, node: cst.Call) -> None:
        func = self.where.function()
        if func is None or func.name.value.startswith("test_"):
            return
        if func.name.value in self.facts.grad_free_callees:
            return  # called only from grad-free functions of the file: no graph is recorded
        seen = self.evaluated.setdefault(id(func), set())
        if _method(node) == "eval" and not node.args:
            target = node.func.value
            receiver = get_full_name_for_node(target) if isinstance(target, (cst.Name, cst.Attribute)) else None
            if receiver and receiver != "self":
                seen.add(receiver)
            return
        if not isinstance(node.func, (cst.Name, cst.Attribute)):
            return
        callee = get_full_name_for_node(node.func)
        if callee in seen and (id(func), callee) not in self.done and not self.where.grad_free(self) \
                and not self._conditionally_grad_free() and not _may_train_through(func) and not self._warm_up(node, func) \
                and not (self.where.loop() is None and self._exports(func)):
            self.done.add((id(func), callee))
            self.flag(node)

    def _conditionally_grad_free(self) -> bool:
        """Inside ``with torch.no_grad() if not requires_grad else nullcontext():`` (an ``A if
        cond else B`` one of whose branches is grad-free), in the same function: the graph is
        recorded only where the caller asks for gradients through the model."""
        for n in reversed(self.where.stack):
            if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return False
            if isinstance(n, cst.With) and any(
                    isinstance(i.item, cst.IfExp) and (grad_free(i.item.body, self) or grad_free(i.item.orelse, self))
                    for i in n.items):
                return True
        return False

    def _exports(self, func: cst.FunctionDef) -> bool:
        """The function traces or exports a model (torch.jit.trace, torch.onnx.export,
        torch.export.export): a call outside its loops is a one-shot check before the export."""
        known = self.exporting.get(id(func))
        if known is None:
            known = self.exporting[id(func)] = any(
                isinstance(n, cst.Call) and self.qname(n) in EXPORTERS for n in walk(func.body))
        return known


def _may_train_through(func: cst.FunctionDef) -> bool:
    """Gradients may flow back through a frozen module's forward to what is trained before it
    (a ControlNet, LoRA weights, a learned embedding): the function backpropagates
    (``loss.backward()``, ``accelerator.backward(loss)``, ``torch.autograd.grad``), or it
    returns a value and its name does not say it evaluates (its caller may backpropagate it)."""
    for n in walk(func.body):
        if isinstance(n, cst.Call) and (_method(n) == "backward" or (get_full_name_for_node(
                n.func) or "").endswith(("autograd.grad", "autograd.backward"))):
            return True
        if isinstance(n, (cst.FunctionDef, cst.Lambda)) and any(
                isinstance(c, cst.Call) and _method(c) == "backward" for c in walk(n)):
            return True
    if EVALUATION.search(func.name.value):
        return False
    return any(isinstance(n, cst.Return) and n.value is not None
               and not (isinstance(n.value, cst.Name) and n.value.value == "None") for n in walk(func.body))


def _loss_like(node: cst.BaseExpression, names: set[str], clean: frozenset[str] | set[str] = frozenset(),
               numbers: tuple[str, ...] = ("float", "int", "len", "str")) -> bool:
    """Whether the expression carries a loss tensor (with its graph) into its value.

    ``names`` hold a loss; a name that says "loss" does too unless ``clean`` knows it was bound
    to something else (``loss = criterion(...).item()``).
    """
    if isinstance(node, cst.Name):
        return node.value in names or ("loss" in node.value.lower() and node.value not in clean)
    if isinstance(node, cst.Call):
        if _method(node) in UNTRACKED:
            return False
        if isinstance(node.func, cst.Name) and node.func.value in numbers:
            return False
        callee = (get_full_name_for_node(node.func) or "").lower()
        if "loss" in callee or "criterion" in callee:
            return True
        return any(_loss_like(a.value, names, clean, numbers) for a in node.args) or (
            isinstance(node.func, cst.Attribute) and _loss_like(node.func.value, names, clean, numbers))
    if isinstance(node, cst.Attribute):
        return _loss_like(node.value, names, clean, numbers)
    if isinstance(node, (cst.BinaryOperation, cst.IfExp, cst.UnaryOperation, cst.Subscript)):
        parts = {cst.BinaryOperation: ("left", "right"), cst.IfExp: ("body", "orelse"),
                 cst.UnaryOperation: ("expression",), cst.Subscript: ("value",)}[type(node)]
        return any(_loss_like(getattr(node, p), names, clean, numbers) for p in parts)
    return False


def _detached(node: cst.BaseExpression, detached: set[str], calls: frozenset[str] = frozenset()) -> bool:
    """Whether the expression holds no graph: a ``.detach()`` / ``.item()`` anywhere in its
    method chain (``loss.detach().float()``), a gradient or ``.data`` (``p.grad``), a number, a
    name bound to such a value (or under no_grad), torch's functions of such values
    (``torch.exp(loss.detach())``), a call of a function named in ``calls`` (the project's
    functions that return no graph), or arithmetic of these."""
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.Name):
        return node.value in detached
    if isinstance(node, cst.Attribute):
        return node.attr.value in ("grad", "data") or _detached(node.value, detached, calls)
    if isinstance(node, cst.Subscript):
        return _detached(node.value, detached, calls)
    if isinstance(node, cst.Call):
        if _method(node) in UNTRACKED:
            return True
        if isinstance(node.func, cst.Name) and node.func.value in ("float", "int", "len"):
            return True
        if _method(node) in ("size", "numel", "dim"):
            return True  # a size: Python ints
        full = get_full_name_for_node(node.func) or ""
        if calls and full.rsplit(".", 1)[-1] in calls:
            return True  # the project's function that returns only values holding no graph
        if full in _NEW_TENSORS and not any(a.keyword is not None and a.keyword.value == "requires_grad"
                                            for a in node.args):
            return True  # a new tensor made from data (torch.from_numpy(preds), torch.ones(n))
        callee = full.lower()
        args = _positional(node)
        if ("loss" in callee or "criterion" in callee) and args and _detached(args[0].value, detached, calls) \
                and all(_no_graph_in(a.value, detached, calls) for a in node.args):
            return True  # a loss of predictions that hold no graph (computed under no_grad)
        if ("metric" in callee or "score" in callee) and args and all(
                _detached(a.value, detached, calls) or _none(a.value) for a in node.args):
            return True  # a metric of values that all hold no graph (a NumPy array's tensors)
        if (full.startswith("torch.") and not full.startswith("torch.nn.") and args
                and any(_detached(a.value, detached, calls) for a in args)
                and all(_no_graph_in(a.value, detached, calls) for a in node.args)):
            return True  # torch's function of values that hold no graph: torch.exp(loss.detach())
        # a method of a detached value, with no loss in its arguments (.float(), .to(device))
        return isinstance(node.func, cst.Attribute) and _detached(node.func.value, detached, calls) and all(
            _no_graph_in(a.value, detached, calls) for a in node.args)
    if isinstance(node, cst.BinaryOperation):
        sides = (node.left, node.right)
        # both hold no graph, or one does and the other is a plain value (loss * args.scale)
        return any(_detached(p, detached, calls) for p in sides) and all(
            _no_graph_in(p, detached, calls) if isinstance(p, (cst.Name, cst.Attribute))
            else _detached(p, detached, calls) for p in sides)
    if isinstance(node, cst.UnaryOperation):
        return _detached(node.expression, detached, calls)
    if isinstance(node, cst.IfExp):  # torch.from_numpy(m) if m is not None else None
        return all(_detached(b, detached, calls) or _none(b) for b in (node.body, node.orelse)) and not (
            _none(node.body) and _none(node.orelse))
    return False


def _none(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


# torch's functions that make a new tensor from data or a shape, with no graph unless given
# requires_grad= (torch.tensor copies even a tensor, without its graph; not torch.as_tensor,
# which returns a tensor it is given as it is)
_NEW_TENSORS = frozenset({*FACTORIES, "torch.from_numpy", "torch.zeros_like", "torch.ones_like",
                          "torch.empty_like", "torch.full_like", "torch.rand_like", "torch.randn_like",
                          "torch.randint_like"})


def _no_graph_in(node: cst.BaseExpression, detached: set[str], calls: frozenset[str] = frozenset()) -> bool:
    """Detached, or naming no loss: a value that adds no graph to what it is combined with."""
    return _detached(node, detached, calls) or not any("loss" in n.lower() for n in names_in(node))


def _backward_receiver(call: cst.Call, visitor: RuleVisitor) -> cst.BaseExpression | None:
    """What ``.backward()`` / ``torch.autograd.backward(x)`` / ``torch.autograd.grad(x, ...)``
    differentiates."""
    if _method(call) == "backward" and isinstance(call.func, cst.Attribute):
        return call.func.value
    name = visitor.qname(call) if isinstance(call.func, (cst.Name, cst.Attribute)) else None
    if name in ("torch.autograd.backward", "torch.autograd.grad") and call.args:
        return call.args[0].value
    return None


class _Flow:
    """Where values go within one function (or a file's top level): which names an assignment
    reads, which names reach ``backward()`` and which are returned."""

    def __init__(self) -> None:
        self.edges: dict[str, set[str]] = {}  # name -> names its assignments read
        self.seeds: set[str] = set()  # names in what is differentiated
        self.returned: set[str] = set()

    def reaching(self, returns: bool) -> set[str]:
        """The names whose value flows into ``backward()`` (and into ``return`` when ``returns``)."""
        todo = list(self.seeds | (self.returned if returns else set()))
        seen = set(todo)
        while todo:
            name = todo.pop()
            for other in self.edges.get(name, ()):
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
            root = name.split(".", 1)[0]
            if root not in seen and root != "self":
                seen.add(root)
                todo.append(root)
        return seen


def _reached(name: str, reach: set[str]) -> bool:
    return name in reach or name.split(".", 1)[0] in reach - {"self"}


_BATCHES = re.compile(r"loader|batches|dataset|^data$|iterator", re.IGNORECASE)


def _over_batches(node: cst.BaseExpression, facts: Facts) -> bool:
    """A loop over a DataLoader or batches (through enumerate/tqdm/zip): one step each."""
    while isinstance(node, cst.Call) and get_full_name_for_node(node.func) in LOADER_WRAPPERS and node.args:
        node = node.args[0].value
    if isinstance(node, cst.Call):
        node = node.func
    name = get_full_name_for_node(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
    return bool(name) and (name in facts.loader_names or bool(_BATCHES.search(name.rsplit(".", 1)[-1])))


def _subscript_root(node: cst.CSTNode) -> set[str]:
    """``out["loss"] = total``: the dict (or list) ``out`` now holds ``total``."""
    while isinstance(node, cst.Subscript):
        node = node.value
    if node is None or not isinstance(node, (cst.Name, cst.Attribute)):
        return set()
    full = get_full_name_for_node(node)
    return {full} if full else set()


class _LossTracking(RuleVisitor):
    """Names that hold a loss tensor, and where each function's values flow.

    A running total or a list of losses is the tip's leak only when nothing differentiates it
    later: ``style_loss += mse_loss(...)`` then ``(content + style_loss).backward()`` builds the
    loss, and a loss module's ``forward`` (or a function whose name says loss) returns it.
    """

    def reset(self) -> None:
        self.loss_names = set(self.facts.backward_receivers)
        self.clean: set[str] = set()
        self.detached: set[str] = set()  # names bound (last) to a value that holds no graph
        self.outer_detached: list[set[str]] = []  # those of the functions around a nested def
        self.flows: dict[int, _Flow] = {}
        self.candidates: dict[int, list[tuple[cst.CSTNode, str]]] = {}
        # (id(function or 0), name) -> (the method whose call's value it holds, the tuple item or
        # None, whether the call is a plain one: name(...), not x.name(...))
        self.from_call: dict[tuple[int, str], tuple[str, int | None, bool]] = {}
        # id(function or 0) -> _number_names of it, read when a candidate needs it
        self.number_names: dict[int, tuple[frozenset[str], frozenset[str]]] = {}

    def _host_items(self, call: cst.BaseExpression) -> frozenset[int | None]:
        """What a call of a function defined in this file (at any depth; ``f(x)``, or a method
        through ``self.f(x)`` / ``cls.f(x)``) returns that holds no graph, for every definition
        of that name (``_host_returns``): ``None`` for the whole value, ``i`` for a tuple's
        ``i``-th item."""
        if not isinstance(call, cst.Call):
            return frozenset()
        func = call.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in ("self", "cls"):
            name = func.attr.value
        elif isinstance(func, cst.Name):
            name = func.value
        else:
            return frozenset()
        return self.facts.host_returns.get(name, frozenset())

    def _key(self) -> tuple[int, cst.FunctionDef | None]:
        func = self.where.function()
        return (id(func) if func else 0), func

    def _numbers_only(self, value: cst.BaseExpression) -> bool:
        """The value holds no graph as far as its function shows (``_number_value``): a mean of
        a list filled only with ``loss.item()``, ``x.item() if cond else x`` where ``x`` is
        also bound to ``0.0``."""
        key, func = self._key()
        known = self.number_names.get(key)
        if known is None:
            scope = func if func is not None else self.module
            known = self.number_names[key] = _number_names(scope) if scope is not None else (
                frozenset(), frozenset())
        return _number_value(value, known[0] | self.detached, known[1])

    def flow(self) -> _Flow:
        return self.flows.setdefault(self._key()[0], _Flow())

    def carries_loss(self, node: cst.BaseExpression) -> bool:
        return _loss_like(node, self.loss_names, self.clean)

    def _returned_free(self, term: cst.BaseExpression) -> bool:
        """A name bound (last, in this function) to what a call of a method of the project
        returns, where every definition of that method gives a value that holds no graph there
        (``loss, meta = self.model.update(b)`` after ``return loss.item(), meta``; a definition
        that passes on a call of the same name, or returns nothing, leaves it to the others)."""
        if not isinstance(term, cst.Name):
            return False
        bound = self.from_call.get((self._key()[0], term.value))
        if bound is None:
            return False
        items = self.facts.project_returns(bound[0], bound[2]) if bound[2] else self.facts.project_returns(bound[0])
        return None in items or bound[1] in items

    def candidate(self, node: cst.CSTNode, name: str | None, term: cst.BaseExpression) -> None:
        if self._returned_free(term):
            return
        if name and not self.where.grad_free(self):  # no graph is recorded there
            loop = self.where.loop()
            per_step = isinstance(loop, cst.For) and _over_batches(loop.iter, self.facts)
            self.candidates.setdefault(self._key()[0], []).append((node, name, names_in(term), per_step))

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        # computed under no_grad, or from values that hold no graph (loss.detach().float()):
        # the names it binds hold none either, until bound again to something that may
        detached = self.where.grad_free(self) or _detached(value, self.detached) or (
            isinstance(value, cst.Call) and _numpy_chain(value.func))  # np.mean(losses): NumPy's
        host = self._host_items(value)  # loss, acc = self.eval_step(b), which returns (loss.detach(), acc)
        for t in node.targets:
            for name in target_names(t.target):
                (self.detached.add if detached or None in host else self.detached.discard)(name)
            if host and type(t.target) in (cst.Tuple, cst.List) and not any(
                    isinstance(e, cst.StarredElement) for e in t.target.elements):
                for i, e in enumerate(t.target.elements):
                    if i in host and isinstance(e.value, cst.Name):
                        self.detached.add(e.value.value)
        key = self._key()[0]
        method = (get_full_name_for_node(value.func) or "").rsplit(".", 1)[-1] if isinstance(value, cst.Call) else ""
        bare = isinstance(value, cst.Call) and isinstance(value.func, cst.Name)
        for t in node.targets:
            for name in target_names(t.target):
                self.from_call.pop((key, name), None)
            if not method:
                continue
            if isinstance(t.target, cst.Name):
                self.from_call[(key, t.target.value)] = (method, None, bare)
            elif type(t.target) in (cst.Tuple, cst.List) and not any(
                    isinstance(e, cst.StarredElement) for e in t.target.elements):
                for i, e in enumerate(t.target.elements):
                    if isinstance(e.value, cst.Name):
                        self.from_call[(key, e.value.value)] = (method, i, bare)
        lossy = self.carries_loss(value)
        untracked = isinstance(value, cst.Call) and (
            _method(value) in UNTRACKED
            or (isinstance(value.func, cst.Name) and value.func.value in ("float", "int")))
        read = names_in(value)
        flow = self.flow()
        for t in node.targets:
            for name in target_names(t.target) | _subscript_root(t.target):
                flow.edges.setdefault(name, set()).update(read)
            if isinstance(t.target, cst.Name):
                if lossy:
                    self.loss_names.add(t.target.value)
                    self.clean.discard(t.target.value)
                elif untracked:  # known to hold no graph: loss = criterion(...).item()
                    self.clean.add(t.target.value)
                    self.loss_names.discard(t.target.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        for name in target_names(node.target) | _subscript_root(node.target):
            self.flow().edges.setdefault(name, set()).update(names_in(node.value))
        for name in target_names(node.target):
            self.from_call.pop((self._key()[0], name), None)
        if not (self.where.grad_free(self) or _detached(node.value, self.detached) or (
                # a number added to a number: ``total = 0`` then ``total += batch_loss``, where
                # batch_loss is what a method of the project returns as a number (.item())
                isinstance(node.target, cst.Name) and node.target.value in self.detached
                and self._returned_free(node.value))):
            self.detached -= target_names(node.target)

    def visit_For(self, node: cst.For) -> None:
        self.detached -= target_names(node.target)
        for name in target_names(node.target):
            self.from_call.pop((self._key()[0], name), None)
        self.detached |= _key_targets(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        # what a name held is known within one function only: a nested def (a wrapper defined
        # inside the loop) starts afresh, and the function around it gets its own names back
        self.outer_detached.append(self.detached)
        self.detached = set()

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            for name in target_names(node.target):
                self.flow().edges.setdefault(name, set()).update(names_in(node.value))

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self.flow().returned |= names_in(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        receiver = _backward_receiver(node, self)
        if receiver is not None:
            self.flow().seeds |= names_in(receiver)
            if isinstance(receiver, cst.Call):  # scaler.scale(loss).backward()
                for a in receiver.args:
                    self.flow().seeds |= names_in(a.value)

    def _finish(self, key: int, func: cst.FunctionDef | None) -> None:
        flow = self.flows.pop(key, _Flow())
        # What a function returns may be the loss its caller backpropagates (loss = a + b + c):
        # a .detach() on one of its terms would stop that branch training, so it is not advised,
        # unless the term was backpropagated already or the loop runs over batches (one step
        # each: a total over steps is a log); a forward() or a loss function builds the loss.
        builds = func is not None and (func.name.value == "forward" or "loss" in func.name.value.lower())
        backward = flow.reaching(returns=False)
        returned = flow.reaching(returns=True) if func is not None else backward
        for node, name, term, per_step in self.candidates.pop(key, []):
            if _reached(name, backward):
                continue
            if _reached(name, returned) and (builds or not (per_step or term & backward)):
                continue
            self.flag(node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._finish(id(node), node)
        self.detached = self.outer_detached.pop() if self.outer_detached else set()

    def leave_Module(self, node: cst.Module) -> None:
        self._finish(0, None)


_STRINGS = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def _key_targets(loop: cst.For) -> set[str]:
    """The loop's targets that hold a dict's key (``for k in d.keys()``, the first of ``for k,
    v in d.items()``) or a string of a literal list (``for name in ["a", "b"]``): names, class
    names, settings, never a tensor with a graph (a tensor key hashes by identity: no one
    writes that)."""
    it, target = loop.iter, loop.target
    if isinstance(it, (cst.List, cst.Tuple, cst.Set)) and it.elements and all(
            isinstance(e, cst.Element) and isinstance(e.value, _STRINGS) for e in it.elements):
        return target_names(target)
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and not it.args):
        return set()
    if it.func.attr.value == "keys" and isinstance(target, cst.Name):
        return {target.value}
    if (it.func.attr.value == "items" and isinstance(target, (cst.Tuple, cst.List))
            and len(target.elements) == 2 and isinstance(target.elements[0].value, cst.Name)
            and not isinstance(target.elements[0], cst.StarredElement)):
        return {target.elements[0].value.value}
    return set()


def _text(node: cst.BaseExpression) -> bool:
    """A string built from values (``"{}: {:.4f}".format(k, v)``, ``"%g" % v``, an f-string):
    a str, whatever it formats."""
    if isinstance(node, _STRINGS):
        return True
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return node.func.attr.value in ("format", "join") and isinstance(node.func.value, _STRINGS)
    if isinstance(node, cst.BinaryOperation):
        if isinstance(node.operator, cst.Modulo):
            return isinstance(node.left, _STRINGS)
        return isinstance(node.operator, cst.Add) and (_text(node.left) or _text(node.right))
    return False


# a collective's helper (all_reduce_mean(x.detach())): of a value that holds no graph, it
# returns one (torch.distributed's collectives record nothing for autograd)
_COLLECTIVE = re.compile(r"reduce|gather", re.IGNORECASE)


def _graph_free(node: cst.BaseExpression, detached: set[str]) -> bool:
    """``_detached``, or a collective's helper applied to values that hold no graph."""
    if _detached(node, detached):
        return True
    return (isinstance(node, cst.Call) and bool(node.args)
            and bool(_COLLECTIVE.search(get_full_name_for_node(node.func) or ""))
            and all(_detached(a.value, detached) for a in node.args))


_UNKNOWN = cst.Name("_unknown_")  # a value the function does not show


# Python's and NumPy's functions that, given only numbers, give numbers: builtin reductions
# (sum(losses) / len(losses)), NumPy's, the statistics and math modules' (np.mean(losses))
_NUMBER_FUNCS = frozenset({"sum", "min", "max", "abs", "round", "sorted", "list", "tuple"})
_NUMBER_MODULES = ("np.", "numpy.", "statistics.", "math.")
# a test of a value's type: ``x.item() if torch.is_tensor(x) else x``
_TYPE_TESTS = frozenset({"isinstance", "hasattr", "torch.is_tensor", "is_tensor"})


def _root_name(node: cst.BaseExpression) -> str | None:
    """``loss.detach().cpu().item()`` -> ``"loss"``; ``float(loss)`` -> ``"loss"``."""
    while True:
        if isinstance(node, cst.Call):
            if isinstance(node.func, cst.Name) and node.func.value in ("float", "int") and len(node.args) == 1:
                node = node.args[0].value
            else:
                node = node.func
        elif isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        else:
            return node.value if isinstance(node, cst.Name) else None


def _tests_type(test: cst.BaseExpression, name: str) -> bool:
    """The condition asks what ``name`` is (``isinstance(x, torch.Tensor)``, ``torch.is_tensor(x)``,
    ``hasattr(x, "item")``, negated or not)."""
    while isinstance(test, cst.UnaryOperation):
        test = test.expression
    return (isinstance(test, cst.Call) and (get_full_name_for_node(test.func) or "") in _TYPE_TESTS
            and bool(test.args) and isinstance(test.args[0].value, cst.Name) and test.args[0].value.value == name)


def _number_value(node: cst.BaseExpression, free: set[str], numbers: set[str] | frozenset[str]) -> bool:
    """The value holds no graph, as far as the function shows: ``_graph_free`` (``loss.item()``,
    ``float(x)``, a name in ``free``), a list or tuple of such values (or a comprehension of
    them), Python's or NumPy's functions of them (``np.mean(losses)``, ``sum(losses) /
    len(losses)`` for a list ``losses`` filled only with ``loss.item()``), arithmetic of them,
    an item of them, and a conditional whose branches both are, or that converts a name in one
    branch and gives it bare in the other (``x.item() if cond else x``) where the function binds
    that name to a number (``numbers``) or the condition tests its type: the author tells the
    tensor case from the number case."""
    if _graph_free(node, free):
        return True
    kind = type(node)
    if kind in (cst.List, cst.Tuple):
        return all(isinstance(e, cst.Element) and _number_value(e.value, free, numbers) for e in node.elements)
    if kind in (cst.ListComp, cst.GeneratorExp, cst.SetComp):
        inner, own = node.for_in, set()
        while inner is not None:
            own |= target_names(inner.target)
            inner = inner.inner_for_in
        return _number_value(node.elt, free - own, numbers)
    if kind is cst.Call:
        if _numpy_chain(node.func):
            return True  # NumPy's value: NumPy cannot take a tensor that requires grad
        full = get_full_name_for_node(node.func) or ""
        return ((full in _NUMBER_FUNCS or full.startswith(_NUMBER_MODULES))
                and all(_number_value(a.value, free, numbers) for a in node.args))
    if kind is cst.Subscript:
        return _number_value(node.value, free, numbers)
    if kind is cst.UnaryOperation:
        return _number_value(node.expression, free, numbers)
    if kind is cst.BinaryOperation:
        sides = (node.left, node.right)
        # as _detached: a side may be a plain value whose name says no loss (x / args.steps)
        return any(_number_value(p, free, numbers) for p in sides) and all(
            _number_value(p, free, numbers) or (isinstance(p, (cst.Name, cst.Attribute))
                                               and not any("loss" in n.lower() for n in names_in(p)))
            for p in sides)
    if kind is cst.IfExp:
        if _number_value(node.body, free, numbers) and _number_value(node.orelse, free, numbers):
            return True
        for conv, bare in ((node.body, node.orelse), (node.orelse, node.body)):
            if (isinstance(bare, cst.Name) and _root_name(conv) == bare.value and _graph_free(conv, set())
                    and (bare.value in numbers or _tests_type(node.test, bare.value))):
                return True
    return False


def _number_names(scope: cst.CSTNode) -> tuple[frozenset[str], frozenset[str]]:
    """What the function (or a module's top level) shows of its plain names: those whose every
    binding and every ``.append``/``.insert``/``.extend``/item assignment gives a value that
    holds no graph (``losses = []`` then only ``losses.append(loss.item())``; ``m =
    np.mean(losses)``), and those bound to a number at least once (``x = 0.0``). A parameter, a
    loop or ``with`` target, a name declared global or nonlocal is not known."""
    bound: dict[str, list[cst.BaseExpression]] = {}
    added: dict[str, list[cst.BaseExpression]] = {}  # items put into the list (extend: a whole iterable)
    unknown: set[str] = set()
    if isinstance(scope, cst.FunctionDef):
        p = scope.params
        unknown |= {a.name.value for a in (*p.params, *p.posonly_params, *p.kwonly_params)}
        for star in (p.star_arg, p.star_kwarg):
            if isinstance(star, cst.Param):
                unknown.add(star.name.value)
    for n in walk(scope.body if isinstance(scope, cst.FunctionDef) else scope):
        kind = type(n)
        if kind is cst.Assign or kind is cst.AugAssign or (kind is cst.AnnAssign and n.value is not None):
            for target in ([t.target for t in n.targets] if kind is cst.Assign else [n.target]):
                if isinstance(target, cst.Name):
                    bound.setdefault(target.value, []).append(n.value)
                elif isinstance(target, cst.Subscript):  # xs[i] = v
                    root = _root_name(target)
                    if root is not None:
                        added.setdefault(root, []).append(n.value)
                elif type(target) in (cst.Tuple, cst.List):
                    value = n.value
                    items = (value.elements if type(value) in (cst.Tuple, cst.List) and len(value.elements)
                             == len(target.elements) and kind is cst.Assign else None)
                    for i, e in enumerate(target.elements):
                        if isinstance(e, cst.Element) and isinstance(e.value, cst.Name) and items is not None \
                                and isinstance(items[i], cst.Element):
                            bound.setdefault(e.value.value, []).append(items[i].value)
                        else:
                            unknown |= {x for x in target_names(e.value) if "." not in x}
        elif kind is cst.Call and _method(n) in ("append", "insert", "extend") and isinstance(n.func.value, cst.Name):
            args = _positional(n)
            if args and len(args) == len(n.args) and (len(args) == 1 or n.func.attr.value == "insert"):
                # an item, or (extend) the iterable whose items are added: both hold no graph
                added.setdefault(n.func.value.value, []).append(args[-1].value)
            else:
                unknown.add(n.func.value.value)
        elif kind in (cst.For, cst.AsName, cst.NamedExpr, cst.CompFor):
            target = n.name if kind is cst.AsName else n.target
            unknown |= {x for x in target_names(target) if "." not in x}
        elif kind in (cst.Global, cst.Nonlocal):
            unknown |= {a.name.value for a in n.names}
        elif kind in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
            # a closure may fill the list or rebind the name (nonlocal): not known
            for m in _walk_all(n):
                if type(m) is cst.Nonlocal:
                    unknown |= {a.name.value for a in m.names}
                elif type(m) is cst.Call and isinstance(m.func, cst.Attribute) and isinstance(m.func.value, cst.Name):
                    unknown.add(m.func.value.value)
    numbers = frozenset(name for name, values in bound.items() if name not in unknown
                        and any(_graph_free(v, set()) for v in values))
    free = set(bound) - unknown
    while True:  # the largest set consistent with itself (total = total + x.item())
        keep = {name for name in free
                if all(_number_value(v, free, numbers) for v in bound[name])
                and all(_number_value(v, free, numbers) for v in added.get(name, ()))}
        if keep == free:
            break
        free = keep
    return frozenset(free), numbers


def _host_returns(func: cst.FunctionDef) -> frozenset[int | None]:
    """What every ``return`` of the function gives that holds no graph (``loss.item()``, a
    ``.detach()``, a name bound only to such values in the function): ``None`` in the set when
    the whole value does, and position ``i`` when every return is a tuple of the same length
    whose ``i``-th item does (``return loss.detach(), acc``: a call's first item). Empty when
    a return is bare, the function yields, or nothing is returned."""
    bound: dict[str, list[cst.BaseExpression]] = {}
    returns: list[cst.BaseExpression] = []
    for n in walk(func.body):
        if type(n) is cst.Assign:
            for t in n.targets:
                for name in target_names(t.target):
                    bound.setdefault(name, []).append(n.value)
        elif type(n) is cst.AugAssign:
            for name in target_names(n.target):
                bound.setdefault(name, []).append(n.value)
        elif type(n) is cst.AnnAssign and n.value is not None:
            for name in target_names(n.target):
                bound.setdefault(name, []).append(n.value)
        elif type(n) is cst.Return:
            if n.value is None:
                return frozenset()
            returns.append(n.value)
        elif type(n) is cst.Yield:
            return frozenset()
        elif type(n) in (cst.For, cst.AsName, cst.NamedExpr):  # bound to anything
            target = n.name if type(n) is cst.AsName else n.target
            for name in target_names(target):
                bound.setdefault(name, []).append(_UNKNOWN)
    if not returns:
        return frozenset()
    detached: set[str] = set()
    for _ in range(3):  # names bound to names bound to .item() ...
        detached = {name for name, values in bound.items()
                    if all(_graph_free(v, detached) for v in values)}

    numbers: tuple[frozenset[str], frozenset[str]] | None = None

    def free(r: cst.BaseExpression) -> bool:
        nonlocal numbers
        if isinstance(r, cst.Name) and r.value not in bound:
            return False
        if _graph_free(r, detached):
            return True
        # numbers only, as far as the function shows (losses filled with loss.item(), np.mean(losses))
        if numbers is None:
            numbers = _number_names(func)
        return _number_value(r, numbers[0] | detached, numbers[1])

    if all(free(r) for r in returns):
        return frozenset({None})
    if not all(type(r) is cst.Tuple for r in returns):
        return frozenset()
    sizes = {len(r.elements) for r in returns}
    if len(sizes) != 1 or any(isinstance(e, cst.StarredElement) for r in returns for e in r.elements):
        return frozenset()
    return frozenset(i for i in range(sizes.pop()) if all(free(r.elements[i].value) for r in returns))


class RunningLossTensor(_LossTracking):
    """A loss added to a running total in a loop; not a string that formats a loss (a log
    line built with ``+=``), nor a value returned by a function of the file that returns only
    values holding no graph (``return loss.item()``)."""

    CODE = "PTT012"

    def visit_Assign(self, node: cst.Assign) -> None:
        super().visit_Assign(node)
        if None in self._host_items(node.value):  # loss = run_step(batch), which returns loss.item()
            for t in node.targets:
                if isinstance(t.target, cst.Name):
                    self.loss_names.discard(t.target.value)
                    self.clean.add(t.target.value)
                    self.detached.add(t.target.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        super().visit_AugAssign(node)
        if (isinstance(node.operator, cst.AddAssign) and self.where.loop() is not None
                and not _text(node.value) and not _detached(node.value, self.detached)
                and self.carries_loss(node.value)
                and not (isinstance(node.target, cst.Name)
                         and node.target.value in self.facts.backward_receivers)
                # a value of the project's functions that return no graph (a gradient getter),
                # with no name bound to a loss's graph beside it
                and not (_detached(node.value, self.detached, self.facts.project_graph_free())
                         and not names_in(node.value) & (self.loss_names - self.detached))
                # numbers only, as far as the function shows (x.item() if cond else x, x = 0.0)
                and not self._numbers_only(node.value)
                and not self._numpy_total(node.target)):
            self.candidate(node, get_full_name_for_node(node.target), node.value)

    def _numpy_total(self, target: cst.BaseExpression) -> bool:
        """The total is a NumPy array: the function binds it only to NumPy calls
        (``total_sep_loss = np.zeros(3)``). NumPy cannot take in a tensor that requires grad
        (``+=`` raises on one), so what is added holds no graph (floats from ``.item()``)."""
        func = self.where.function()
        if not isinstance(target, cst.Name) or func is None or "np" not in self.facts.source:
            return False
        values = [n.value for n in walk(func.body) if isinstance(n, cst.Assign)
                  for t in n.targets if isinstance(t.target, cst.Name) and t.target.value == target.value]
        return bool(values) and all(isinstance(v, cst.Call) and (self.qname(v) or "").startswith("numpy.")
                                    for v in values)

    def visit_Call(self, node: cst.Call) -> None:
        super().visit_Call(node)
        # an engine's backward (``accelerator.backward(loss)``, ``booster.backward(loss=x / k)``):
        # what it is passed is differentiated, so a total built with ``+=`` into it is the loss
        # (Lightning's ``self.manual_backward(loss)`` too)
        if _method(node) in ("backward", "manual_backward") and isinstance(node.func, cst.Attribute):
            for a in node.args:
                self.flow().seeds |= names_in(a.value)


class LoggedLossTensor(_LossTracking):
    """Only a value that carries a loss tensor: not a Python number (``round(meter.avg, 4)``),
    not what a builder makes (``build_loss(cfg)``, a module), not in a constructor, not the
    engine that backpropagates (``accelerator.backward(loss)``: ``accelerator`` holds no loss),
    and not in a function whose only callers in the file run under a grad-free decorator; not an
    object a constructor makes (``LpLoss(d=2)``: a loss function, no tensor) or a name bound to one."""

    CODE = "PTT013"
    NUMBERS = ("float", "int", "len", "str", "round", "bool")

    def reset(self) -> None:
        super().reset()
        self.loss_names -= self.facts.backward_engines
        self.assembled: dict[int, set[str]] = {}  # id(function or 0) -> lists joined by torch.stack/cat
        self.instances: set[str] = set()  # names bound (last) to a constructor call: objects

    def _instance(self, value: cst.BaseExpression) -> bool:
        """No evidence of a tensor: an object built by a constructor (``LpLoss(d=2)``,
        ``nn.MSELoss()``, a class of this file), a name bound (last) to one, or a setting read
        with a plain default (``cfg.loss_weights.get(name, 1.0)``)."""
        if isinstance(value, cst.Name):
            return value.value in self.instances
        if not isinstance(value, cst.Call):
            return False
        if (_method(value) == "get" and len(value.args) == 2
                and isinstance(value.args[1].value, (cst.Integer, cst.Float, *_STRINGS))):
            return True
        last = (get_full_name_for_node(value.func) or "").rsplit(".", 1)[-1]
        return ((last[:1].isupper() and any(c.islower() for c in last))
                or last in self.facts.module_classes or last in self.facts.plain_classes)

    def carries_loss(self, node: cst.BaseExpression) -> bool:
        # a bare name handed to a call: one bound to a loss, or one the function assigns itself
        # whose name says loss (not a parameter or a loop target such as a loss_info)
        # (a name that only says loss, bound to a constructor's object, loss_ = AverageMeter(),
        # handed to a call is no evidence that the call returns a loss tensor: train(p, b, loss_))
        own = {n for n in self.flow().edges if "loss" in n.lower() and n not in self.clean}
        return _logged_loss(node, self.loss_names, self.clean, self.NUMBERS,
                            self.loss_names | (own - self.instances))

    def visit_Call(self, node: cst.Call) -> None:
        super().visit_Call(node)
        func = self.where.function()
        if (_method(node) == "append" and len(node.args) == 1 and self.where.loop() is not None
                and not (func is not None and (func.name.value == "__init__"
                                               or func.name.value in self.facts.grad_free_callees))
                and not _built(node.args[0].value)
                and not self._instance(node.args[0].value)
                and not _detached(node.args[0].value, self.detached)
                and self.carries_loss(node.args[0].value)
                # numbers only, as far as the function shows (np.mean of a list of loss.item())
                and not self._numbers_only(node.args[0].value)):
            self.candidate(node, get_full_name_for_node(node.func.value), node.args[0].value)

    def visit_Assign(self, node: cst.Assign) -> None:
        super().visit_Assign(node)
        value = node.value
        instance = self._instance(value)
        for t in node.targets:
            for name in target_names(t.target):
                (self.instances.add if instance else self.instances.discard)(name)
        if (len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
                and isinstance(value, cst.Call) and self.qname(value) in _ASSEMBLE and value.args
                and isinstance(value.args[0].value, cst.Name)
                and value.args[0].value.value == node.targets[0].target.value):
            self.assembled.setdefault(self._key()[0], set()).add(node.targets[0].target.value)

    def _finish(self, key: int, func: cst.FunctionDef | None) -> None:
        # a list replaced by the tensor it joins, in the same function (scores = torch.stack(
        # scores), feats = torch.cat(feats)), filled by a loop that is not over batches: it
        # assembles a tensor (a .detach() would cut its gradient), it does not keep a log
        joined = self.assembled.pop(key, set())
        # nor a local list the function never reads (only appends to), filled by a loop that is
        # not over batches (the steps of one forward): it dies with the function, and keeps
        # nothing the function's own values do not (a .detach() on it changes no memory)
        unread = _unread_lists(func) if func is not None and any(not c[3] for c in self.candidates.get(key, [])) \
            else set()
        self.candidates[key] = [c for c in self.candidates.get(key, [])
                                if not ((c[1] in joined or c[1] in unread) and not c[3])]
        super()._finish(key, func)


def _unread_lists(func: cst.FunctionDef) -> set[str]:
    """The names the function binds itself (``xs = []``) and reads nowhere but as the receiver
    of ``.append``/``.extend`` (nested functions included: a closure may read them); not a
    parameter, nor a name declared global or nonlocal."""
    bound: set[str] = set()
    used: set[str] = set()
    params = {p.name.value for p in (*func.params.params, *func.params.posonly_params, *func.params.kwonly_params)}
    skip: set[int] = set()
    for n in _walk_all(func.body):
        kind = type(n)
        if kind is cst.Assign:
            for t in n.targets:
                if isinstance(t.target, cst.Name):
                    bound.add(t.target.value)
                    skip.add(id(t.target))
        elif kind is cst.Call and isinstance(n.func, cst.Attribute) and isinstance(n.func.value, cst.Name) \
                and n.func.attr.value in ("append", "extend"):
            skip.add(id(n.func.value))
        elif kind in (cst.Global, cst.Nonlocal):
            used.update(a.name.value for a in n.names)
        elif kind is cst.Name and id(n) not in skip:
            used.add(n.value)
    return bound - used - params


def _logged_loss(node: cst.BaseExpression, names: set[str], clean: set[str],
                 numbers: tuple[str, ...], bare: set[str]) -> bool:
    """PTT013's ``_loss_like``, with evidence for a call: its value carries a loss when it names a
    loss or a criterion, or when its receiver or an argument does, an argument that is a bare
    name only when it is in ``bare`` (bound to a loss, or assigned in the function under a loss's
    name). A parameter or loop target that merely says loss, handed to some other function
    (``stats = self.step(batch, loss_info)``: settings in, a dict of floats out), is no evidence
    that the call returns a tensor with a graph."""
    if isinstance(node, cst.Call):
        if _method(node) in UNTRACKED or (isinstance(node.func, cst.Name) and node.func.value in numbers):
            return False
        callee = (get_full_name_for_node(node.func) or "").lower()
        if "loss" in callee or "criterion" in callee:
            return True
        return any(a.value.value in bare if isinstance(a.value, cst.Name)
                   else _logged_loss(a.value, names, clean, numbers, bare) for a in node.args) or (
            isinstance(node.func, cst.Attribute) and _logged_loss(node.func.value, names, clean, numbers, bare))
    if isinstance(node, cst.Attribute):
        return _logged_loss(node.value, names, clean, numbers, bare)
    if isinstance(node, (cst.BinaryOperation, cst.IfExp, cst.UnaryOperation, cst.Subscript)):
        parts = {cst.BinaryOperation: ("left", "right"), cst.IfExp: ("body", "orelse"),
                 cst.UnaryOperation: ("expression",), cst.Subscript: ("value",)}[type(node)]
        return any(_logged_loss(getattr(node, p), names, clean, numbers, bare) for p in parts)
    return _loss_like(node, names, clean, numbers)


# torch's functions that join a list of tensors into one (what they join keeps its graph)
_ASSEMBLE = frozenset({"torch.stack", "torch.cat", "torch.concat", "torch.concatenate", "torch.hstack",
                       "torch.vstack", "torch.dstack", "torch.column_stack"})


def _built(value: cst.BaseExpression) -> bool:
    """``build_loss(cfg)``, ``make_criterion(...)``: an object made from a configuration."""
    if not isinstance(value, cst.Call):
        return False
    name = (get_full_name_for_node(value.func) or "").rsplit(".", 1)[-1].lower()
    return name.startswith(("build", "make_", "create"))


class DetachBeforeLayers(RuleVisitor):
    """``x = x.detach()`` before a ``backward()`` of the same code: not one after the last
    backward (predictions detached for metrics after the step, a hand-written backward pass
    that recomputes activations after calling backward on them), not in a ``backward`` method
    (an autograd.Function's), and not under a grad-free block (where it changes nothing)."""

    CODE = "PTT025"

    def reset(self) -> None:
        self.pending: dict[int, list[tuple[int, cst.Call]]] = {}  # id(function or 0) -> (order, detach)
        self.backward: dict[int, int] = {}  # id(function or 0) -> order of its last backward()
        self.order = 0
        # (id(function or 0), name) -> whether each read of the name after its detach is a
        # target's (a loss call's second operand, a difference): [order of the read, is a target]
        self.reads: dict[tuple[int, str], list[tuple[int, bool]]] = {}
        self.targets: set[int] = set()  # ids of the Name nodes in a target's place
        self.own: set[int] = set()  # ids of the Name nodes of the x = x.detach() itself

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if (len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
                and isinstance(value, cst.Call) and _method(value) == "detach" and not value.args
                and isinstance(value.func.value, cst.Name)
                and value.func.value.value == node.targets[0].target.value):
            func = self.where.function()
            if func is not None and func.name.value == "backward":
                return  # a hand-written backward: what it detaches is its own business
            if self.where.grad_free(self):
                return
            if func is not None or self.at_module_level:
                self.order += 1
                self.pending.setdefault(id(func) if func else 0, []).append((self.order, value))
                self.reads.setdefault((id(func) if func else 0, value.func.value.value), [])
                self.own |= {id(node.targets[0].target), id(value.func.value)}

    def visit_Call(self, node: cst.Call) -> None:
        if _method(node) == "backward":
            func = self.where.function()
            self.order += 1
            self.backward[id(func) if func else 0] = self.order
        callee = (get_full_name_for_node(node.func) or "").rsplit(".", 1)[-1].lower()
        if _LOSS_CALL.search(callee):  # F.mse_loss(pred, target), criterion(out, target=y)
            for i, a in enumerate(node.args):
                if isinstance(a.value, cst.Name) and (
                        (a.keyword is None and i > 0) or (a.keyword is not None and "target" in a.keyword.value)):
                    self.targets.add(id(a.value))

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.Subtract):  # pred - target, target - pred
            self.targets |= {id(p) for p in (node.left, node.right) if isinstance(p, cst.Name)}

    def visit_Comparison(self, node: cst.Comparison) -> None:
        # ``if ref is None: break``: a test of whether the value was given reads no tensor
        if all(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in node.comparisons):
            self.own |= {id(p) for p in (node.left, *(c.comparator for c in node.comparisons))
                         if isinstance(p, cst.Name)}

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) in self.own:
            return
        func = self.where.function()
        reads = self.reads.get((id(func) if func else 0, node.value))
        if reads is not None:
            self.order += 1
            reads.append((self.order, id(node) in self.targets))

    def _only_target(self, key: int, order: int, call: cst.Call) -> bool:
        """What the detach gives is read after it, and only as a target (``F.mse_loss(q,
        target_q)``, ``pred - target``): a stop-gradient on the target (a TD target, a teacher's
        output), which the method needs; removing it would train what makes the target."""
        after = [is_target for o, is_target in self.reads.get((key, call.func.value.value), []) if o > order]
        return bool(after) and all(after)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        last = self.backward.get(id(node))
        for order, call in self.pending.pop(id(node), []):
            if last is not None and order < last and not self._only_target(id(node), order, call):
                self.flag(call)

    def leave_Module(self, node: cst.Module) -> None:
        last = self.backward.get(0)
        for order, call in self.pending.pop(0, []):
            if ((last is not None and order < last) or (last is None and self.facts.module_backward)) \
                    and not self._only_target(0, order, call):
                self.flag(call)


# a loss's call: what its second operand holds is the target (F.mse_loss, criterion, nn.L1Loss()(...))
_LOSS_CALL = re.compile(r"loss|criterion|crit$|mse|l1$|huber")


# --- loops ------------------------------------------------------------------------------------------

def _calls_backward(node: cst.CSTNode, *, into_loops: bool = True) -> bool:
    return any(isinstance(n, cst.Call) and _method(n) == "backward" for n in walk(node, into_loops=into_loops))


def _scaler_step(call: cst.Call) -> bool:
    """``loss_scaler(loss, optimizer, ...)``: timm's and DeiT's NativeScaler calls ``backward()``
    and ``optimizer.step()`` for the loop."""
    name = (get_full_name_for_node(call.func) or "").rsplit(".", 1)[-1]
    return name.endswith("scaler") and len(_positional(call)) >= 2


def _training_step(loop: cst.CSTNode) -> bool:
    """The loop's own body (not a nested loop) calls ``.backward()`` (or a loss scaler that does),
    itself or in a closure it defines (``def closure(): ...; loss.backward()`` for ``optimizer.step(closure)``): one
    iteration is one training step."""
    for n in walk(loop.body, into_loops=False):
        if isinstance(n, cst.Call) and (_method(n) == "backward" or _scaler_step(n)):
            return True
        if isinstance(n, (cst.FunctionDef, cst.Lambda)) and _calls_backward(n, into_loops=False):
            return True
    return False


# An ``if`` that picks a process, not an interval: true on every step of a single-process run.
_RANK = re.compile(r"(^|_)rank$|get_rank|main_process|is_main|is_master|master_process|global_zero|is_primary"
                   r"|is_rank_zero|rank_zero|distributed|world_size|(^|_)ddp$|is_initialized|multi_?gpu|n_gpu",
                   re.IGNORECASE)
_INTERVAL = re.compile(r"step|iter|batch|epoch|log|every|interval|freq|print|verbose|debug|idx|^i$|^it$",
                       re.IGNORECASE)


def rank_guard(test: cst.CSTNode) -> bool:
    """``if rank == 0:``, ``if is_main_process():``, ``if args.local_rank in (-1, 0):``: a test
    of which process runs, with no step counter or modulo in it."""
    if _has_mod(test):
        return False
    names = [n.value for n in [test, *walk(test)] if isinstance(n, cst.Name)]
    return any(_RANK.search(n) for n in names) and not any(_INTERVAL.search(n) for n in names)


# torch's functions whose result is a tensor of bools (or a bool read from the device)
_TENSOR_TESTS = frozenset({"torch.isnan", "torch.isinf", "torch.isfinite", "torch.any", "torch.all",
                           "torch.is_nonzero", "torch.equal", "torch.allclose"})


def tensor_truth(visitor: RuleVisitor, test: cst.BaseExpression) -> bool:
    """The test uses a tensor as a Python bool (``if torch.isnan(loss):``, ``if not mask.any():``,
    ``if torch.isinf(x).any() or ...``): the host waits for the device's value to decide. Not a
    ``.any()`` of NumPy's (``np.isnan(a).any()``)."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return tensor_truth(visitor, test.expression)
    if isinstance(test, cst.BooleanOperation):
        return tensor_truth(visitor, test.left) or tensor_truth(visitor, test.right)
    if not isinstance(test, cst.Call):
        return False
    if visitor.qname(test) in _TENSOR_TESTS:
        return True
    if _method(test) not in ("any", "all") or test.args:
        return False
    receiver = test.func.value
    while isinstance(receiver, (cst.Attribute, cst.Subscript)):
        receiver = receiver.value
    if isinstance(receiver, cst.Call):
        return tensor_truth(visitor, receiver) or (visitor.qname(receiver) or "").startswith("torch.")
    return isinstance(receiver, cst.Name) and not (visitor.qualify(receiver) or "").startswith("numpy")


def _decides(loop: cst.CSTNode, visitor: RuleVisitor | None = None) -> bool:
    """The loop reads a value on every step to decide something (``if not math.isfinite(
    loss.item())``, ``value = loss.item(); assert ...``; with ``visitor``, a tensor used as a
    bool too: ``if torch.isnan(loss): continue``): it waits for the GPU each step anyway."""
    tested: set[str] = set()
    if isinstance(loop, cst.While):  # the loop's own test: ``while value < 0.99:`` stops on the read
        tested |= names_in(loop.test)
        if any(isinstance(c, cst.Call) and _method(c) in HOST_READS for c in [loop.test, *walk(loop.test)]):
            return True
        if visitor is not None and tensor_truth(visitor, loop.test):
            return True
    for n in walk(loop.body, into_loops=False):
        if isinstance(n, (cst.If, cst.While)):
            tested |= names_in(n.test)
            if any(isinstance(c, cst.Call) and _method(c) in HOST_READS for c in [n.test, *walk(n.test)]):
                return True
            if visitor is not None and tensor_truth(visitor, n.test):
                return True
        elif isinstance(n, cst.Assert):
            tested |= names_in(n.test)
    for n in walk(loop.body, into_loops=False):  # value = loss.item(); if not isfinite(value)
        if isinstance(n, cst.Assign) and any(target_names(t.target) & tested for t in n.targets) \
                and any(isinstance(c, cst.Call) and _method(c) in HOST_READS for c in [n.value, *walk(n.value)]):
            return True
    return False


# methods a trainer calls after every training step (detectron2-style HookBase, mmengine's Hook,
# Lightning's Callback), in a class deriving from a hook or callback class
HOOK_METHODS = frozenset({"after_step", "after_train_step", "after_train_iter", "on_train_batch_end"})
HOOK_BASE = re.compile(r"hook|callback", re.IGNORECASE)


def _every_step_test(test: cst.BaseExpression) -> bool:
    """An ``if`` that a hook takes on every step when it takes it once: a rank guard, or a test of
    what the trainer holds (``"losses" in out``, ``x is not None``, ``isinstance``/``hasattr``), with
    no step counter or modulo in it."""
    if rank_guard(test):
        return True
    if _has_mod(test) or any(isinstance(n, cst.Name) and _INTERVAL.search(n.value) for n in [test, *walk(test)]):
        return False
    if isinstance(test, cst.Comparison):
        return all(isinstance(c.operator, (cst.In, cst.NotIn, cst.Is, cst.IsNot)) for c in test.comparisons)
    return isinstance(test, cst.Call) and get_full_name_for_node(test.func) in ("isinstance", "hasattr")


_OPTIMIZER = re.compile(r"optim|(^|_)opt$", re.IGNORECASE)


def optimizer_step_receiver(receiver: str, has_args: bool) -> bool:
    """``x.step(...)`` steps an optimizer: ``optimizer.step()``, ``self.opt.step()``, or
    ``scaler.step(optimizer)`` (not a scheduler's ``step()``)."""
    last = receiver.rsplit(".", 1)[-1]
    return bool(_OPTIMIZER.search(last)) or (has_args and last.lower().endswith("scaler"))


def _one_step(func: cst.FunctionDef) -> bool:
    """The function's own body, outside its loops, calls ``backward()`` and an optimizer's
    ``step()``: each call is one training step."""
    backward = step = False
    for n in walk(func.body, into_loops=False):
        if isinstance(n, cst.Call) and type(n.func) is cst.Attribute:
            backward |= n.func.attr.value == "backward"
            step |= n.func.attr.value == "step" and optimizer_step_receiver(
                get_full_name_for_node(n.func.value) or "", bool(n.args))
    return backward and step


class HostReadInLoop(RuleVisitor):
    """A read of a tensor's value on every step of a training loop: not one gated by an ``if``
    (logging every N steps; a rank guard is no gate), and not in a loop that already waits for
    the GPU every step for a decision (``if not math.isfinite(loss.item())``), where one more read
    costs nothing. (A ``torch.cuda.synchronize()`` every step is PTT040's finding, not a reason.)"""

    CODE = "PTT011"

    def reset(self) -> None:
        self.loops: dict[int, bool] = {}  # id(loop) -> a training step that does not already wait
        self.hooks: dict[int, bool] = {}  # id(hook method) -> it does not already read to decide
        self.cpu_values: dict[int, frozenset[str]] = {}  # id(function) -> names bound to CPU values only

    def _loop(self, loop: cst.CSTNode) -> bool:
        known = self.loops.get(id(loop))
        if known is None:
            if isinstance(loop, cst.FunctionDef):  # a step function that a loop of the file calls
                known = loop.name.value in self.facts.step_functions and _one_step(loop)
            else:
                known = _training_step(loop)
            known = self.loops[id(loop)] = known and not _decides(loop, self)
        return known

    def visit_Call(self, node: cst.Call) -> None:
        if self._float_of_loss(node):
            loop = self.where.loop()
            if not self.where.gated_in(loop) and not self.where.grad_free(self) and self._loop(loop):
                self.flag(node)
            return
        if _method(node) not in HOST_READS or node.args:
            return
        if _numpy_chain(node.func.value):
            return  # np.finfo(np.float32).eps.item(): a NumPy value, read on the host already
        loop = self.where.loop() or self.where.function()
        if loop is None or self.where.gated_in(loop) or self.where.grad_free(self):
            return  # (an evaluation inside the loop, under no_grad: its results are for the host)
        if self._loop(loop):
            if not self._read_on_cpu(node) and not self._host_batch(node):
                self.flag(node)
        elif not self.where.gated_in(loop):
            self._hook(node)

    def _read_on_cpu(self, node: cst.Call) -> bool:
        """The read is of a name that the function only ever binds to a value on a CPU device:
        moved to it (``x.to(cpu_device)`` with ``cpu_device = torch.device("cpu")``, ``.cpu()``),
        or computed by a call whose tensor arguments all are such names (``loss, acc =
        model.loss(embeds_cpu)``): the value is the host's, and reading it waits for no GPU."""
        receiver = node.func.value
        func = self.where.function()
        if not isinstance(receiver, cst.Name) or func is None:
            return False
        known = self.cpu_values.get(id(func))
        if known is None:
            known = self.cpu_values[id(func)] = _cpu_values(func)
        return receiver.value in known

    def _host_batch(self, node: cst.Call) -> bool:
        """The read is of a batch that a ``for`` over a host loader of the file gives (or of an
        item, a cast, ``.data`` of one: ``points.data.numpy()``), the name not bound again in
        the loop's body before the read (no ``points = points.cuda()`` earlier): the loader's
        tensor is still on the host, and reading it waits for no GPU."""
        receiver = node.func.value
        while True:
            if isinstance(receiver, cst.Attribute) and receiver.attr.value == "data":
                receiver = receiver.value
            elif isinstance(receiver, cst.Subscript):
                receiver = receiver.value
            elif isinstance(receiver, cst.Call) and _method(receiver) in _HOST_KEEPS:
                receiver = receiver.func.value
            else:
                break
        if not isinstance(receiver, cst.Name) or not self.facts.host_loaders:
            return False
        name = receiver.value
        for loop in reversed(self.where.stack):
            if isinstance(loop, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return False
            if isinstance(loop, cst.For) and name in target_names(loop.target):
                break
        else:
            return False
        loader = _loader_iter(loop.iter, self.facts)
        return (loader is not None and loader.rsplit(".", 1)[-1] in self.facts.host_loaders
                and _bound_before(loop.body, node, name) is False)

    def _float_of_loss(self, node: cst.Call) -> bool:
        """``float(loss)`` in a loop that calls ``loss.backward()`` itself: the same read as
        ``loss.item()`` (the name is a tensor: it is backpropagated)."""
        if not (isinstance(node.func, cst.Name) and node.func.value == "float" and len(node.args) == 1
                and node.args[0].keyword is None and node.args[0].star == ""
                and isinstance(node.args[0].value, cst.Name)):
            return False
        loop = self.where.loop()
        name = node.args[0].value.value
        return loop is not None and any(
            type(n) is cst.Call and _method(n) == "backward" and isinstance(n.func, cst.Attribute)
            and isinstance(n.func.value, cst.Name) and n.func.value.value == name
            for n in walk(loop.body, into_loops=False))

    def _hook(self, node: cst.Call) -> None:
        """A read in a per-step hook method (``after_step`` of a hook class) of a file that names
        CUDA, under no ``if`` that skips steps, in a hook that does not read to decide something."""
        func = self.where.function()
        if func is None or func.name.value not in self.facts.hook_methods or not self.facts.mentions_cuda:
            return
        for n in reversed(self.where.stack):
            if n is func:
                break
            if isinstance(n, (cst.FunctionDef, cst.Lambda, cst.ExceptHandler)) or (
                    isinstance(n, cst.If) and not _every_step_test(n.test)):
                return
        known = self.hooks.get(id(func))
        if known is None:
            known = self.hooks[id(func)] = not _decides(func)
        if known:
            self.flag(node)


# PTT011: calls that leave a tensor on the device it is on (a host tensor stays on the host)
_HOST_KEEPS = frozenset({"detach", "clone", "cpu", "float", "double", "long", "int", "half", "bool", "view",
                         "reshape", "permute", "unsqueeze", "squeeze", "contiguous", "flatten", "transpose"})


def _bound_before(node: cst.CSTNode, read: cst.CSTNode, name: str) -> bool | None:
    """Whether ``name`` (or an attribute of it: ``x.data = ...``) is bound under ``node`` before
    ``read`` is evaluated, in the order Python runs it (an assignment binds after its value):
    True where it is, False where ``read`` comes first, None where neither is under ``node``."""
    if node is read:
        return False
    kind = type(node)
    if kind in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
        return None

    def binds(target: cst.CSTNode) -> bool:
        return any(n == name or n.startswith(name + ".") for n in target_names(target))

    if kind in (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.NamedExpr):
        if node.value is not None:
            found = _bound_before(node.value, read, name)
            if found is not None:
                return found
        targets = [t.target for t in node.targets] if kind is cst.Assign else [node.target]
        for t in targets:
            found = _bound_before(t, read, name)
            if found is not None:
                return found
            if binds(t):
                return True
        return None
    if kind in (cst.For, cst.CompFor):
        found = _bound_before(node.iter, read, name)
        if found is not None:
            return found
        if binds(node.target):
            return True
    elif kind is cst.WithItem and node.asname is not None:
        found = _bound_before(node.item, read, name)
        if found is not None:
            return found
        if binds(node.asname.name):
            return True
    for child in children(node):
        found = _bound_before(child, read, name)
        if found is not None:
            return found
    return None


def _numpy_chain(node: cst.BaseExpression) -> bool:
    """``np.finfo(np.float32).eps``, ``numpy.array(x).mean()``: calls, attributes and items
    down to the ``np``/``numpy`` module itself, a NumPy value (never a tensor)."""
    while True:
        if isinstance(node, cst.Call):
            node = node.func
        elif isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        else:
            return isinstance(node, cst.Name) and node.value in ("np", "numpy")


def _cpu_device(node: cst.BaseExpression, devices: set[str]) -> bool:
    """``"cpu"``, ``torch.device("cpu")``, or a name bound to one of them."""
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value == "cpu"
    if isinstance(node, cst.Name):
        return node.value in devices
    return (isinstance(node, cst.Call) and get_full_name_for_node(node.func) in ("torch.device", "device")
            and len(node.args) == 1 and _cpu_device(node.args[0].value, devices))


def _cpu_values(func: cst.FunctionDef) -> frozenset[str]:
    """The local names that ``func`` binds only to values on a literal CPU device: moved there
    (``e.view(n, -1).to(cpu_dev)``, ``x.cpu()``, then casts and reshapes), or computed by a
    call whose arguments are all such names or constants, one at least (``model.loss(e_cpu)``).
    Any other binding of a name (a loop target, ``+=``, a value computed otherwise) drops it."""
    text_has_cpu = any(isinstance(n, cst.SimpleString) and "cpu" in n.value for n in walk(func.body)) or any(
        type(n) is cst.Attribute and n.attr.value == "cpu" for n in walk(func.body))
    if not text_has_cpu:
        return frozenset()
    devices: set[str] = set()
    binds: dict[str, list[cst.BaseExpression | None]] = {}
    for n in walk(func.body):
        if type(n) is cst.Assign:
            for t in n.targets:
                for name in target_names(t.target):
                    binds.setdefault(name, []).append(n.value)
                if isinstance(t.target, cst.Name) and _cpu_device(n.value, devices):
                    devices.add(t.target.value)
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)):
            for name in target_names(n.target):
                binds.setdefault(name, []).append(None)
        elif isinstance(n, (cst.For, cst.CompFor)):
            for name in target_names(n.target):
                binds.setdefault(name, []).append(None)
        elif isinstance(n, cst.WithItem) and n.asname is not None:
            for name in target_names(n.asname.name):
                binds.setdefault(name, []).append(None)
    cpu: set[str] = set()

    def on_cpu(value: cst.BaseExpression) -> bool:
        while isinstance(value, cst.Call) and _method(value) in _NO_WORK - {"to", "cuda"}:
            value = value.func.value
        if not isinstance(value, cst.Call):
            return False
        method = _method(value)
        if method == "cpu" and not value.args:
            return True
        if method == "to":
            args = _positional(value) or [a for a in value.args if a.keyword and a.keyword.value == "device"]
            return bool(args) and _cpu_device(args[0].value, devices)
        seen = False
        for a in value.args:
            if isinstance(a.value, cst.Name) and a.value.value in cpu:
                seen = True
            elif not (isinstance(a.value, (cst.Integer, cst.Float, cst.SimpleString)) or (
                    isinstance(a.value, cst.Name) and a.value.value in ("None", "True", "False"))):
                return False
        return seen

    changed = True
    while changed:
        changed = False
        for name, values in binds.items():
            if name not in cpu and name not in devices and all(v is not None and on_cpu(v) for v in values):
                cpu.add(name)
                changed = True
    return frozenset(cpu)


def _loader_iter(node: cst.BaseExpression, facts: Facts) -> str | None:
    """The name of the DataLoader a ``for`` iterates (through enumerate/tqdm/zip), or None."""
    while isinstance(node, cst.Call) and get_full_name_for_node(node.func) in LOADER_WRAPPERS and node.args:
        node = node.args[0].value
    name = get_full_name_for_node(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
    if name and (name in facts.loader_names or "loader" in name.rsplit(".", 1)[-1].lower()):
        return name
    return None


class BlockingCopyInLoader(RuleVisitor):
    """A batch from a pinned DataLoader (``pin_memory=True`` in the same file) copied to the
    device without ``non_blocking=True``: the half of the tip's recipe that is missing. One
    finding per statement; only the loop's own batch variables, not models or outputs."""

    CODE = "PTT022"

    def reset(self) -> None:
        self.done: set[int] = set()
        self.statement: cst.CSTNode | None = None
        self.comps: list[tuple[set[str], str | None]] = []  # comprehensions: (targets, iterated name)
        self.rebuilt: set[tuple[int, str]] = set()  # (id(loop), batch name made a new tensor in it)

    def visit_Assign(self, node: cst.Assign) -> None:
        # targets = torch.tensor(targets), x = torch.stack(x): the name now holds a tensor torch
        # has just made in pageable memory, no longer the pinned batch (a copy of it from here
        # on is staged either way)
        loop = self.where.loop()
        value = node.value
        if not (isinstance(loop, cst.For) and isinstance(value, cst.Call)):
            return
        name = self.qname(value) or ""
        pinned = self.get_specific_arg(value, "pin_memory", -1)
        if not name.startswith("torch.") or name.startswith("torch.Tensor.") or pinned is not None:
            return
        batch = target_names(loop.target)
        for t in node.targets:
            self.rebuilt.update((id(loop), n) for n in target_names(t.target) if n in batch)

    def _comp(self, node: cst.ListComp | cst.GeneratorExp) -> None:
        # [x.to(device) for x in batch]: x is a part of the batch (the element is visited
        # before the comprehension's for: the names are taken here)
        for_in = node.for_in
        it = for_in.iter.value if isinstance(for_in.iter, cst.Name) else None
        self.comps.append((target_names(for_in.target), it))

    def visit_ListComp(self, node: cst.ListComp) -> None:
        self._comp(node)

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self._comp(node)

    def leave_ListComp(self, node: cst.ListComp) -> None:
        self.comps.pop()

    def leave_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self.comps.pop()

    def _batch_name(self, name: str, targets: set[str]) -> bool:
        """``name`` is one of the loop's batch variables, or a comprehension's name for a part
        of one (``for x in batch``)."""
        if name in targets:
            return True
        return any(name in names and it in targets for names, it in self.comps)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.statement = node

    def visit_Call(self, node: cst.Call) -> None:
        method = _method(node)
        if method not in ("to", "cuda"):
            return
        loop = self.where.loop()
        if not isinstance(loop, cst.For):
            return
        loader = _loader_iter(loop.iter, self.facts)
        if loader is None or loader.rsplit(".", 1)[-1] not in self.facts.pinned_loaders:
            return
        receiver = node.func.value
        while isinstance(receiver, cst.Subscript):
            receiver = receiver.value
        if not (isinstance(receiver, cst.Name) and self._batch_name(receiver.value, target_names(loop.target))):
            return
        if (id(loop), receiver.value) in self.rebuilt:
            return
        if self.get_specific_arg(node, "non_blocking", 1 if method == "cuda" else 2) is not None \
                or _off_cuda(self, node) or self._decided_at_once(loop):
            return
        args = _positional(node)
        if method == "to" and (not args or (isinstance(args[0].value, cst.SimpleString)
                                            and "cpu" in args[0].value.value)):
            return
        key = id(self.statement) if self.statement is not None else id(node)
        if key not in self.done:
            self.done.add(key)
            self.flag(node)

    def _decided_at_once(self, loop: cst.For) -> bool:
        """The copy's statement is followed in the loop's body, before any other work, by an
        ``if`` that reads the device to decide (``if not mask.any(): continue``): the host
        waits for the copies there anyway, so ``non_blocking`` would overlap nothing."""
        body = getattr(loop.body, "body", ())
        after = next((i for i, stmt in enumerate(body) if stmt is self.statement), None)
        if after is None:
            return False
        for stmt in body[after + 1:]:
            if isinstance(stmt, cst.If):
                return tensor_truth(self, stmt.test) or any(
                    isinstance(c, cst.Call) and _method(c) in HOST_READS for c in [stmt.test, *walk(stmt.test)])
            if not isinstance(stmt, cst.SimpleStatementLine) or any(
                    isinstance(c, cst.Call) and _method(c) not in _NO_WORK for c in walk(stmt)):
                return False
        return False


# tensor methods that copy, cast or reshape: no work a non-blocking copy could overlap with
_NO_WORK = frozenset({"to", "cuda", "float", "half", "double", "long", "int", "bool", "view", "reshape",
                      "permute", "unsqueeze", "squeeze", "contiguous", "flatten", "transpose"})


def _cuda_test(visitor: RuleVisitor, test: cst.BaseExpression, cpu: bool = False) -> bool | None:
    """What a test says of the device: True where its body may run on CUDA and its else cannot
    (``torch.cuda.is_available()``, ``device != "cpu"``, ``x.device.type == "cuda"``), False
    where its body cannot (``not torch.cuda.is_available()``, ``device == "cpu"``); None when
    it says neither (``device == "cuda"`` leaves "cuda:1" to the else). With ``cpu``, only a
    test whose other side is the CPU (not ``x.device.type == "cuda"``, whose else may be MPS)."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _cuda_test(visitor, test.expression, cpu)
        return None if inner is None else not inner
    if isinstance(test, cst.Call):
        return True if visitor.qname(test) == "torch.cuda.is_available" and not test.args else None
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    op, right, left = test.comparisons[0].operator, test.comparisons[0].comparator, test.left
    if isinstance(left, cst.SimpleString):
        left, right = right, left
    if not isinstance(right, cst.SimpleString) or not isinstance(op, (cst.Equal, cst.NotEqual)):
        return None
    word = right.evaluated_value if isinstance(right.evaluated_value, str) else None
    if word == "cpu":
        said = False  # the body runs on the CPU
    elif word == "cuda" and isinstance(left, cst.Attribute) and left.attr.value == "type" and not cpu:
        said = True  # x.device.type == "cuda": its else is not CUDA
    else:
        return None
    return said if isinstance(op, cst.Equal) else not said


def _off_cuda(visitor: RuleVisitor, node: cst.CSTNode, cpu: bool = False) -> bool:
    """The node is reached only where the device is not CUDA (with ``cpu``: only where it is the
    CPU): in the else of ``if torch.cuda.is_available():`` (a plain ``else``, not an ``elif``
    that may test for MPS, where ``cpu`` is asked), in the body of ``if not
    torch.cuda.is_available():`` or ``if device == "cpu":``, or after an earlier ``if`` of its
    path that tests for CUDA and leaves (``if torch.cuda.is_available(): return ...``, the
    early exit PTT027 reads too)."""
    stack = visitor.where.stack
    for i in range(len(stack) - 1, -1, -1):
        outer = stack[i]
        if isinstance(outer, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            break
        if not isinstance(outer, cst.If):
            continue
        said = _cuda_test(visitor, outer.test, cpu)
        if said is None:
            continue
        inner = stack[i + 1] if i + 1 < len(stack) else node
        branch = outer.orelse if said else outer.body
        if branch is None or (said and cpu and isinstance(branch, cst.If)):
            continue
        if inner is branch or any(n is inner for n in walk(branch)):
            return True
    return any(isinstance(stmt, cst.If) and _cuda_test(visitor, stmt.test, cpu) and _exits(stmt.body)
               for stmt in _statements_before(visitor.where, node))


def _has_mod(node: cst.CSTNode) -> bool:
    return any(isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo)
               for n in [node, *walk(node)])


def _divided(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Divide, cst.FloorDivide))


class AccumulationWithoutScaling(RuleVisitor):
    """A ``backward()`` of an unscaled loss in a loop whose ``step()`` runs only every k-th
    iteration (under an ``if`` with a modulo that the backward is not under): k backward calls
    add up before each step. Not a backward with its own step right after it in the same block,
    or its own ``zero_grad()`` right before it (one backward per step: separate optimizers, each
    zeroed and stepped around its own loss), nor one under the same interval as the step (an
    update every k environment steps, one backward each)."""

    CODE = "PTT024"

    def reset(self) -> None:
        self.loops: dict[int, dict] = {}
        self.scaled: set[str] = set()
        self.assigned: dict[str, bool] = {}  # name -> its last assignment divides
        self.called: dict[str, str | None] = {}  # name -> the function of the call it was bound from

    def visit_Assign(self, node: cst.Assign) -> None:
        callee = _callee_name(node.value)
        for t in node.targets:
            if isinstance(t.target, cst.Name):
                self.assigned[t.target.value] = _divided(node.value)
                self.called[t.target.value] = callee
            elif isinstance(t.target, (cst.Tuple, cst.List)):  # loss, n_correct = fwd_pass(...)
                for e in t.target.elements:
                    if isinstance(e.value, cst.Name):
                        self.assigned[e.value.value] = False
                        self.called[e.value.value] = callee

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.target, cst.Name) and isinstance(node.operator, (cst.DivideAssign, cst.FloorDivideAssign)):
            self.assigned[node.target.value] = True

    def visit_With(self, node: cst.With) -> None:
        # ``with amp.scale_loss(loss, opt) as scaled: scaled.backward()`` (apex): the name it
        # binds is divided when the loss it is given is
        for item in node.items:
            if (item.asname is not None and isinstance(item.asname.name, cst.Name)
                    and isinstance(item.item, cst.Call) and _positional(item.item)):
                first = _positional(item.item)[0].value
                self.assigned[item.asname.name.value] = _divided(first) or (
                    isinstance(first, cst.Name) and self.assigned.get(first.value, False))
                self.called[item.asname.name.value] = (
                    self.called.get(first.value) if isinstance(first, cst.Name) else None)

    def _divisors(self, loop: cst.CSTNode) -> set[str]:
        """The names a modulo divides by in the ``if``s between ``loop`` and the node
        (``if ni % accumulate == 0:`` -> ``accumulate``)."""
        out: set[str] = set()
        for n in self.where.stack[self.where.stack.index(loop):]:
            if isinstance(n, cst.If):
                for m in [n.test, *walk(n.test)]:
                    if isinstance(m, cst.BinaryOperation) and isinstance(m.operator, cst.Modulo):
                        out |= {x.value for x in [m.right, *walk(m.right)] if isinstance(x, cst.Name)}
        return out

    def _gates(self, loop: cst.CSTNode) -> frozenset[int]:
        """The ``if``s with a modulo in their test between ``loop`` and the node."""
        return frozenset(id(n) for n in self.where.stack[self.where.stack.index(loop):]
                         if isinstance(n, cst.If) and _has_mod(n.test))

    def visit_Call(self, node: cst.Call) -> None:
        loop = self.where.loop()
        if not isinstance(loop, cst.For):
            return
        if _scales_grads(node):  # (also from a loop over the parameters inside the training loop)
            for outer in self.where.stack:
                if isinstance(outer, cst.For):
                    self.loops.setdefault(id(outer), {"backward": [], "steps": []})["grads_scaled"] = True
        state = self.loops.setdefault(id(loop), {"backward": [], "steps": []})
        method = _method(node)
        if method == "backward":
            receiver = node.func.value
            if isinstance(receiver, cst.Call) and _method(receiver) == "scale" and receiver.args:
                receiver = receiver.args[0].value  # scaler.scale(loss).backward()
            divided = _divided(receiver) or (isinstance(receiver, cst.Name)
                                              and self.assigned.get(receiver.value, False))
            # an engine's backward given the loss already scaled: ``booster.backward(loss=x / k)``
            divided = divided or any(_scaled(a.value) for a in node.args)
            if not divided:
                callee = self.called.get(receiver.value) if isinstance(receiver, cst.Name) else None
                state["backward"].append((node, self._gates(loop), callee))
        elif method == "step":
            state["steps"].append(self._gates(loop))
            state.setdefault("divisors", set()).update(self._divisors(loop))
            state.setdefault("counts", set()).update(self._counts(loop))

    def _counts(self, loop: cst.CSTNode) -> set[str]:
        """The accumulation counts of the modulo ``if``s between ``loop`` and the node: the last
        name of each modulo's right operand (``i % cfg.train.gradient_accumulation_steps`` ->
        ``gradient_accumulation_steps``)."""
        out: set[str] = set()
        for n in self.where.stack[self.where.stack.index(loop):]:
            if isinstance(n, cst.If):
                for m in [n.test, *walk(n.test)]:
                    if isinstance(m, cst.BinaryOperation) and isinstance(m.operator, cst.Modulo):
                        if isinstance(m.right, cst.Name):
                            out.add(m.right.value)
                        elif isinstance(m.right, cst.Attribute):
                            out.add(m.right.attr.value)
        return out

    def leave_For(self, node: cst.For) -> None:
        state = self.loops.pop(id(node), None)
        if not state:
            return
        if state.get("grads_scaled"):
            return  # the gradients are scaled by hand before the step (by a token count, say)
        if state["backward"] and state.get("divisors") and state["divisors"] & _hyper_scalers(self.facts.source, self.facts.tree):
            return  # the weight decay is rescaled by the accumulation count: designed sums
        for call, gates, callee in state["backward"]:
            # a loss bound from a call of a function of the file that divides by the step's
            # interval (loss = loss / cfg.gradient_accumulation_steps before its return)
            if callee and state.get("counts") and _divides_by(self.facts.tree, callee, frozenset(state["counts"])):
                continue
            # a step under an interval this backward is not under: it runs on more iterations
            if any(step - gates for step in state["steps"]) and not _stepped_in_place(node, call):
                self.flag(call)


def _callee_name(value: cst.BaseExpression) -> str | None:
    """The name of the function a call calls (``fwd_pass(...)``, ``self._calc_loss(...)``:
    its last name); None for anything else."""
    if not isinstance(value, cst.Call):
        return None
    if isinstance(value.func, cst.Name):
        return value.func.value
    if isinstance(value.func, cst.Attribute) and isinstance(value.func.value, cst.Name) and value.func.value.value in (
            "self", "cls"):
        return value.func.attr.value
    return None


def _divides_by(tree: ast.Module | None, name: str, counts: frozenset[str]) -> bool:
    """A function or method ``name`` of the file divides something by one of ``counts``
    (``loss = loss / cfg.train.gradient_accumulation_steps``, ``loss /= accum_steps``): the
    loss it returns is already scaled for the accumulation."""
    if tree is None:
        return False
    for f in ast.walk(tree):
        if not (isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == name):
            continue
        for n in ast.walk(f):
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
                right = n.right
            elif isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Div):
                right = n.value
            else:
                continue
            said = {x.id if isinstance(x, ast.Name) else x.attr for x in ast.walk(right)
                    if isinstance(x, (ast.Name, ast.Attribute))}
            if said & counts:
                return True
    return False


# an optimizer's weight decay (``hyp["weight_decay"]``, ``wd``); not a learning rate, which a
# linear scaling rule multiplies by the effective batch for a mean loss (where k sums are wrong)
_HYPER = re.compile(r"weight_?decay|(^|_)wd\b", re.IGNORECASE)


def _hyper_scalers(source: str, tree: ast.Module | None) -> set[str]:
    """Names that a weight decay of the code is multiplied or divided by
    (``hyp["weight_decay"] *= batch_size * accumulate / nbs``): an accumulation count there was
    accounted for in the optimizer's settings, so the summed gradient of k batches is what the
    code was tuned for (a nominal batch size's, of a loss summed over its samples)."""
    if "decay" not in source and "wd" not in source:
        return set()
    out: set[str] = set()
    for n in ast.walk(tree) if tree is not None else ():
        if isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Mult, ast.Div)):
            target, value = n.target, n.value
        elif (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.value, ast.BinOp)
              and isinstance(n.value.op, (ast.Mult, ast.Div))):
            target, value = n.targets[0], n.value
        else:
            continue
        said = [x.id if isinstance(x, ast.Name) else x.attr if isinstance(x, ast.Attribute) else x.value
                for x in ast.walk(target) if isinstance(x, (ast.Name, ast.Attribute))
                or (isinstance(x, ast.Constant) and isinstance(x.value, str))]
        if any(_HYPER.search(w) for w in said):
            out |= {x.id for x in ast.walk(value) if isinstance(x, ast.Name)}
    return out


def _scaled(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.BinaryOperation) and isinstance(
        node.operator, (cst.Divide, cst.FloorDivide, cst.Multiply))


_GRAD_SCALING = re.compile(r"scale_?grad|grads?_?scal", re.IGNORECASE)


def _scales_grads(call: cst.Call) -> bool:
    """A manual scaling of the gradients: a call named like ``scale_grads`` / ``grad_scaler``
    (not AMP's ``scaler.scale(loss)`` nor a ``GradScaler()`` made), ``p.grad.div_(n)`` / ``p.grad.data.mul_(c)``, or
    ``torch._foreach_mul_`` / ``_foreach_div_`` over them."""
    name = (get_full_name_for_node(call.func) or "").rsplit(".", 1)[-1]
    if (_GRAD_SCALING.search(name) and not name[:1].isupper()) or name in ("_foreach_mul_", "_foreach_div_"):
        return True
    if name in ("div_", "mul_") and isinstance(call.func, cst.Attribute):
        receiver = call.func.value
        if isinstance(receiver, cst.Attribute) and receiver.attr.value == "data":
            receiver = receiver.value
        return isinstance(receiver, cst.Attribute) and receiver.attr.value == "grad"
    return False


def _holding(loop: cst.CSTNode, call: cst.Call):
    """(statements, index) of each statement list of ``loop`` (its body and the blocks in it,
    not nested loops) whose statement at the index holds ``call``."""
    for block in [loop, *walk(loop, into_loops=False)]:
        body = getattr(block, "body", None)
        stmts = getattr(body, "body", None) if isinstance(body, cst.BaseSuite) else None
        if not isinstance(stmts, (list, tuple)):
            continue
        for i, stmt in enumerate(stmts):
            if any(n is call for n in walk(stmt)):
                yield stmts, i


def _stepped_in_place(loop: cst.CSTNode, call: cst.Call) -> bool:
    """Whether the statement list holding ``call`` (in ``loop``) steps right after it or zeroes
    the gradients right before it: ``opt.zero_grad(); loss.backward(); opt.step()``, one backward
    per step whatever the other optimizers of the loop do; or a list around the block holding
    it (a ``with``, an ``if``) both zeroes before that block and steps after it."""
    for stmts, i in _holding(loop, call):
        before = {_method(n) for s in stmts[:i] if isinstance(s, cst.SimpleStatementLine)
                  for n in walk(s) if isinstance(n, cst.Call)}
        after = {_method(n) for s in stmts[i + 1:] if isinstance(s, cst.SimpleStatementLine)
                 for n in walk(s) if isinstance(n, cst.Call)}
        if isinstance(stmts[i], cst.SimpleStatementLine):
            if "zero_grad" in before or "step" in after:
                return True
        elif "zero_grad" in before and "step" in after:
            return True  # around the block that holds it (not a scheduler's step alone)
    return False


def _binds(node: cst.CSTNode) -> bool:
    return any(isinstance(n, (cst.Assign, cst.AugAssign, cst.AnnAssign)) for n in walk(node))


def _uses_memory_after(stmts: list[cst.CSTNode], visitor: RuleVisitor) -> bool:
    """Code after a training loop that needs memory of its own: an evaluation call
    (eval/valid/test in its name), or another training loop; not one run without autograd (a
    function of this file under a grad-free decorator, or a grad-free ``with``)."""
    for s in stmts:
        if isinstance(s, cst.With) and any(grad_free(i.item, visitor) for i in s.items):
            continue
        for n in [s, *walk(s)]:
            if isinstance(n, (cst.For, cst.While)) and _calls_backward(n.body):
                return True
            if isinstance(n, cst.Call):
                last = (get_full_name_for_node(n.func) or "").rsplit(".", 1)[-1]
                if last in visitor.facts.grad_free_functions:
                    continue
                if last not in ("eval", "train") and EVALUATION.search(last):  # not the mode switches
                    return True
    return False


class LoopTensorsOutliveLoop(RuleVisitor):
    """A training loop followed, in the same function, by an evaluation or another loop, with
    the loop's tensors still bound (no ``del``)."""

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
            if _uses_memory_after(after, self):
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
        if not sized or not isinstance(node.target, cst.Name) or not self._rows(bound):
            return
        var = node.target.value
        if _writes_element(node.body, var, self.facts.tensor_names) and not self._typed_otherwise(node) \
                and not _recurrent(node.body) and not _writes_out(node.body):
            self.flag(node)

    def _typed_otherwise(self, loop: cst.For) -> bool:
        """The loop is in the body of an ``if isinstance(obj, list)`` (or another type that is
        not a tensor) whose name the loop writes into: there it is no tensor."""
        written = {t.target.value.value for n in walk(loop.body) if isinstance(n, cst.Assign)
                   for t in n.targets if isinstance(t.target, cst.Subscript)
                   and isinstance(t.target.value, cst.Name)}
        for outer in self.where.stack:
            branch = outer  # the if, or the elif (an If in its orelse) whose body holds the loop
            while isinstance(branch, cst.If) and not any(n is loop for n in walk(branch.body)):
                branch = branch.orelse
            if not isinstance(branch, cst.If):
                continue  # (the loop in the final else is no evidence)
            for n in [branch.test, *walk(branch.test)]:
                if (isinstance(n, cst.Call) and get_full_name_for_node(n.func) == "isinstance"
                        and len(n.args) == 2 and isinstance(n.args[0].value, cst.Name)
                        and n.args[0].value.value in written
                        and not any(x.endswith("Tensor") for x in names_in(n.args[1].value))):
                    return True
        return False


    def _rows(self, bound: cst.BaseExpression) -> bool:
        """The bound counts a tensor's rows: ``x.size(0)``, ``x.shape[1]`` (a fixed dimension),
        or ``len(t)`` of a tensor made in this file; not ``len(mean)`` of a list of per-channel
        constants, nor ``x.shape[dim]`` of a dimension chosen at run time (a few channels)."""
        if isinstance(bound, cst.Call) and get_full_name_for_node(bound.func) == "len":
            arg = bound.args[0].value if len(bound.args) == 1 else None
            return isinstance(arg, cst.Name) and arg.value in self.facts.tensor_names
        if isinstance(bound, cst.Call):
            if _method(bound) == "numel":
                return True
            args = _positional(bound)
            return len(args) == 1 and _fixed_dim(args[0].value)
        elements = bound.slice if isinstance(bound, cst.Subscript) else ()
        return len(elements) == 1 and isinstance(elements[0].slice, cst.Index) and _fixed_dim(
            elements[0].slice.value)


# calls that write a file or draw a plot: img.save(path), plt.savefig, imageio.imwrite,
# torchvision.utils.save_image, cv2.imwrite, f.write
_WRITE_OUT = frozenset({"save", "savefig", "imsave", "imwrite", "mimsave", "mimwrite", "save_image",
                        "write", "imshow", "show"})
_PLOT_MODULES = frozenset({"plt", "pyplot", "matplotlib", "imageio", "cv2"})


def _writes_out(body: cst.CSTNode) -> bool:
    """PTT033: the loop's body saves an image or a file, or draws a plot, for each item: I/O per
    iteration, which no single vectorised call replaces."""
    for n in walk(body):
        if isinstance(n, cst.Call):
            name = get_full_name_for_node(n.func) or ""
            if ((_method(n) or name.rsplit(".", 1)[-1]) in _WRITE_OUT
                    or name.split(".", 1)[0] in _PLOT_MODULES):
                return True
    return False


_RECURRENT_CELL = re.compile(r"lstm|gru|rnn|cell$", re.IGNORECASE)


def _recurrent(body: cst.CSTNode) -> bool:
    """Each iteration feeds on the one before: a name the body binds (``state = ...``) is read in
    the body before that binding (``output, state = step(it, state)``), or the body calls a
    recurrent cell (``self.lstm_cell(x, (h, c))``, an ``nn.GRUCell``): a recurrent decode, no
    single vectorised call. (``total += x`` alone is no such binding.)"""
    bound = {x for n in walk(body) if isinstance(n, cst.Assign) for t in n.targets
             for x in target_names(t.target) if "." not in x}
    if any(isinstance(n, cst.Call) and _RECURRENT_CELL.search((get_full_name_for_node(n.func) or "").rsplit(".", 1)[-1])
           for n in walk(body)):
        return True
    return bool(bound) and _read_before_bound(body, bound, set())


def _read_before_bound(node: cst.CSTNode, bound: set[str], done: set[str]) -> bool:
    """In source order (an assignment's value before its targets), a name of ``bound`` read
    before any binding of it."""
    if type(node) in _STOPS:
        return False
    if isinstance(node, cst.Assign):
        if _read_before_bound(node.value, bound, done):
            return True
        for t in node.targets:
            done |= target_names(t.target)
        return False
    if isinstance(node, cst.Name):
        return node.value in bound and node.value not in done
    if isinstance(node, cst.Attribute):
        return _read_before_bound(node.value, bound, done)
    if isinstance(node, cst.Arg):
        return _read_before_bound(node.value, bound, done)
    if isinstance(node, (cst.CompFor, cst.For)):
        done |= target_names(node.target)
    return any(_read_before_bound(c, bound, done) for c in children(node))


def _fixed_dim(value: cst.BaseExpression) -> bool:
    """``0``, ``-1``: a dimension written as a number."""
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
        value = value.expression
    return isinstance(value, cst.Integer)


def _writes_element(node: cst.CSTNode, var: str, tensors: set[str]) -> bool:
    """Whether the loop writes ``t[var] = ...`` into a tensor: a name every binding of which in
    the file is a torch call (not a list, a NumPy array or an unknown value). Not a write that
    also indexes another dimension with an index tensor (``t[order[:, j], j] = v``, ``t[perm,
    j] = v``): each iteration scatters a whole row or column in one vectorised assignment."""
    for n in walk(node):
        if isinstance(n, cst.Assign):
            for t in n.targets:
                if (isinstance(t.target, cst.Subscript) and isinstance(t.target.value, cst.Name)
                        and t.target.value.value in tensors and any(
                        isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name)
                        and e.slice.value.value == var for e in t.target.slice)
                        and not any(_index_tensor(e.slice, var, tensors) for e in t.target.slice)):
                    return True
    return False


def _index_tensor(part: cst.BaseSlice, var: str, tensors: set[str]) -> bool:
    """An index that selects many entries of its dimension by a tensor: a slice taken of one
    (``order[:, j]``), or a name every binding of which is a torch call (``perm``)."""
    if not isinstance(part, cst.Index):
        return False
    value = part.value
    if isinstance(value, cst.Name):
        return value.value != var and value.value in tensors
    return isinstance(value, cst.Subscript) and any(isinstance(e.slice, cst.Slice) for e in value.slice)


class RetryOnAnyRuntimeError(RuleVisitor):
    CODE = "PTT028"

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.type is None or self.where.loop() is None:
            return
        types = [e.value for e in node.type.elements] if isinstance(node.type, cst.Tuple) else [node.type]
        names = {(get_full_name_for_node(t) or "").rsplit(".", 1)[-1] for t in types}
        if "RuntimeError" not in names or names & _INPUT_ERRORS:
            return  # beside TypeError, AttributeError...: a guard against bad input, not an OOM
        if _mentions(node.body, "memory") or any(isinstance(n, cst.Raise) for n in walk(node.body)):
            return
        if _inspects_error(node) or _ignores_error(node):
            return
        if not _handles_oom(node, self.where.loop()):
            return  # nothing says the error is out-of-memory: a skip of what raised, not a retry
        self.flag(node)


_OOM_WORD = re.compile(r"(?<![a-z])oom(?![a-z])", re.IGNORECASE)
_SHRINKS = (cst.FloorDivideAssign, cst.DivideAssign, cst.RightShiftAssign, cst.SubtractAssign)
_HALVES = (cst.FloorDivide, cst.Divide, cst.RightShift)


def _handles_oom(handler: cst.ExceptHandler, loop: cst.CSTNode | None) -> bool:
    """Evidence that the handler deals with running out of memory: it (or what the loop does
    after the ``try``) frees memory (``empty_cache()``, ``gc.collect()``) or shrinks a size
    (``bs //= 2``, ``bs -= 8``, ``bs *= 0.5``, ``bs = max(1, bs // 2)``), or the handler names
    OOM (``print("OOM: retrying")``, ``oom_count += 1``)."""
    nodes = [*walk(handler.body), *(n for stmt in _after_statement(loop, handler) for n in walk(stmt))]
    for n in nodes:
        kind = type(n)
        if kind is cst.Call:
            last = (get_full_name_for_node(n.func) or "").rsplit(".", 1)[-1]
            if last in ("empty_cache", "collect"):
                return True
        elif kind is cst.AugAssign:
            if isinstance(n.operator, _SHRINKS) or (
                    isinstance(n.operator, cst.MultiplyAssign) and isinstance(n.value, cst.Float)):
                return True
        elif kind is cst.BinaryOperation and isinstance(n.operator, _HALVES) and isinstance(
                n.left, (cst.Name, cst.Attribute)) and isinstance(n.right, cst.Integer):
            return True
    return any((type(n) is cst.Name and _OOM_WORD.search(n.value.replace("_", " ")))
               or (type(n) is cst.SimpleString and _OOM_WORD.search(n.value)) for n in walk(handler.body))


def _after_statement(loop: cst.CSTNode | None, inner: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements of ``loop``'s body after the one that holds ``inner``."""
    body = getattr(getattr(loop, "body", None), "body", ())
    for i, stmt in enumerate(body):
        if any(n is inner for n in walk(stmt)):
            return list(body[i + 1:])
    return []


# errors of bad input or of deserializing one: caught with RuntimeError, the handler guards a
# parse or an unpickle, not a step that ran out of memory
_INPUT_ERRORS = frozenset({"TypeError", "AttributeError", "ValueError", "KeyError", "IndexError",
                           "ImportError", "ModuleNotFoundError", "EOFError", "UnpicklingError",
                           "PicklingError", "JSONDecodeError", "UnicodeDecodeError"})


def _ignores_error(handler: cst.ExceptHandler) -> bool:
    """A handler that does nothing (``pass``): a best-effort step, not a retry with less work."""
    body = handler.body.body if isinstance(handler.body, cst.IndentedBlock) else ()
    return bool(body) and all(
        isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, (cst.Pass, cst.Expr)) and (
            isinstance(x, cst.Pass) or isinstance(x.value, cst.Ellipsis)) for x in s.body) for s in body)


_LOGGING = re.compile(r"(^|\.)(print|debug|info|warning|warn|error|exception|critical|log)$")


def _inspects_error(handler: cst.ExceptHandler) -> bool:
    """The handler reads the error it caught other than to log it (``msg = str(e)`` then a
    filter on the message): it decides what to retry, which the rule cannot judge."""
    if handler.name is None or not isinstance(handler.name.name, cst.Name):
        return False
    name = handler.name.name.value
    logged: set[int] = set()
    for n in walk(handler.body):
        if type(n) is cst.Call and _LOGGING.search(get_full_name_for_node(n.func) or ""):
            logged |= {id(m) for m in walk(n)}
    return any(type(n) is cst.Name and n.value == name and id(n) not in logged for n in walk(handler.body))


# --- calls judged on their own ------------------------------------------------------------------

def _int_literal(value: cst.BaseExpression) -> bool:
    """``3`` or ``-1``: one row for every batch element."""
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
        value = value.expression
    return isinstance(value, cst.Integer)


def _first_dim_of(value: cst.BaseExpression, target: cst.BaseExpression) -> bool:
    """``target.shape[0]``, ``target.size(0)`` or ``len(target)``: the length of its first dim."""
    if isinstance(value, cst.Call):
        func = value.func
        if isinstance(func, cst.Name) and func.value == "len" and len(value.args) == 1:
            return value.args[0].value.deep_equals(target)
        if (isinstance(func, cst.Attribute) and func.attr.value == "size" and len(value.args) == 1
                and isinstance(value.args[0].value, cst.Integer) and value.args[0].value.value == "0"):
            return func.value.deep_equals(target)
        return False
    if (isinstance(value, cst.Subscript) and len(value.slice) == 1
            and isinstance(value.slice[0].slice, cst.Index)
            and isinstance(value.slice[0].slice.value, cst.Integer)
            and value.slice[0].slice.value.value == "0"):
        shape = value.value
        return (isinstance(shape, cst.Attribute) and shape.attr.value == "shape"
                and shape.value.deep_equals(target))
    return False


class ArangePairing(RuleVisitor):
    """Only ``H[torch.arange(len(H)), k]`` with an integer literal ``k``: there the tip's short
    form ``H[:, k]`` picks the same rows (a view, no index tensor). With one index per batch
    element the arange form is already the right code (the advice would change nothing), an
    arange over fewer rows than ``H`` has is not ``:``, and ``np.arange`` / ``jnp.arange``
    index NumPy or JAX arrays, not tensors."""

    CODE = "PTT010"

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if len(node.slice) < 2:
            return
        first, second = node.slice[0].slice, node.slice[1].slice
        if not (isinstance(first, cst.Index) and isinstance(first.value, cst.Call)
                and isinstance(second, cst.Index) and _int_literal(second.value)):
            return
        if any(not isinstance(e.slice, cst.Slice) for e in node.slice[2:]):
            return  # a further index array would pair with the arange too
        arange = first.value
        args = _positional(arange)
        others = [a for a in arange.args if a not in args]
        if (self.qname(arange) == "torch.arange" and len(args) == 1
                and all(a.keyword is not None and a.keyword.value in ("device", "dtype") for a in others)
                and _first_dim_of(args[0].value, node.value)):
            self.flag(node)


_PER_SAMPLE = re.compile(r"^(__getitem__|__iter__|__next__|forward|collate\w*|\w*_step|step)$")


class TensorFromNdarray(RuleVisitor):
    CODE = "PTT014"

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname(node) != "torch.tensor" or not node.args or node.args[0].keyword:
            return
        if any(a.keyword is not None and a.keyword.value in ("dtype", "device")
               and not (isinstance(a.value, cst.Name) and a.value.value == "None") for a in node.args):
            return  # converted or moved as it is made: torch.from_numpy would copy too
        func = self.where.function()
        per_sample = func is not None and _PER_SAMPLE.search(func.name.value)
        if (self.where.loop() is None or self.facts.converts_weights) and not per_sample:
            # a one-off copy (at start-up, or a weight-conversion script's loop over the
            # checkpoint, run once): sharing the memory would save nothing that matters
            return
        value = node.args[0].value
        if isinstance(value, cst.Call):
            name = self.qname(value) or ""
            if name.startswith("numpy.") or _method(value) == "numpy":
                self.flag(node)
        elif (isinstance(value, cst.Name) and value.value in self.facts.numpy_names
                and not self._bound_otherwise(value.value, func)):
            self.flag(node)

    def _numpy_call(self, value: cst.BaseExpression) -> bool:
        return isinstance(value, cst.Call) and (
            (self.qname(value) or "").startswith("numpy.") or _method(value) == "numpy")

    def _bound_otherwise(self, name: str, func: cst.FunctionDef | None) -> bool:
        """The file binds ``name`` to an ndarray somewhere, but the function around the call
        binds it itself (a parameter, a loop target, an assignment) and never to a NumPy call:
        the ndarray is another variable of the same name (a list here, say)."""
        scope = func if func is not None else (self.where.stack[0] if self.where.stack else None)
        if scope is None:
            return False  # the piece checked is the function or a statement of it (a loop)
        local = False
        if func is not None:
            p = func.params
            local = any(x.name.value == name for x in [*p.posonly_params, *p.params, *p.kwonly_params])
        for n in [scope, *walk(scope)]:
            kind = type(n)
            if kind in (cst.For, cst.CompFor) and any(
                    type(m) is cst.Name and m.value == name for m in [n.target, *walk(n.target)]):
                local = True
            elif kind is cst.Assign and any(
                    type(m) is cst.Name and m.value == name for t in n.targets for m in [t.target, *walk(t.target)]):
                if self._numpy_call(n.value):
                    return False
                local = True
        return local


class DataLoaderWithoutPinMemory(RuleVisitor):
    """Only in a file that names CUDA or an accelerator (pinned memory is about copies to a GPU)."""

    CODE = "PTT021"

    def reset(self) -> None:
        self.bound: dict[int, str] = {}  # id(DataLoader call) -> the name it is bound to
        self.prepared: set[int] = set()  # id(DataLoader call) built inside a prepare(...) call
        self.attr_bound: dict[int, str] = {}  # id(DataLoader call) -> the self attribute it is bound to

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            self.bound[id(node.value)] = node.targets[0].target.value
        elif len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Attribute) \
                and get_full_name_for_node(node.targets[0].target.value) == "self":
            # self.loader = DataLoader(...): the engine knows it by its attribute's name
            self.attr_bound[id(node.value)] = node.targets[0].target.attr.value

    def visit_Call(self, node: cst.Call) -> None:
        if _method(node) in ("prepare", "prepare_data_loader") and self.facts.accelerate_copies:
            self.prepared |= {id(a.value) for a in node.args}  # accelerator.prepare(DataLoader(...))
        if (self.qname(node) != "torch.utils.data.DataLoader" or _star_kwargs(node)
                or not self.facts.cuda_beyond_autocast_off):
            return
        name = self.bound.get(id(node))
        if name in self.facts.numpy_loaders:
            return  # its batches go to NumPy (an ONNX runtime) and torch never moves them
        if (name or self.attr_bound.get(id(node))) in self.facts.prepared_loaders or (
                id(node) in self.prepared and self.facts.accelerate_copies):
            return  # accelerate's prepared loader copies the batches itself (blocking)
        if self._collate_leaves_nothing_to_pin(node):
            return
        if name in self.facts.peeked_loaders:
            return  # one batch read once (next(iter(loader))): one copy, nothing to overlap
        arg = self.get_specific_arg(node, "pin_memory", 7)
        # an explicit pin_memory=False (or a name the caller sets) is a stated choice
        if (arg is None and not self._over_tensors(node) and not self._over_indices(node)
                and name not in self.facts.idle_loaders):
            self.flag(node)

    def _collate_leaves_nothing_to_pin(self, node: cst.Call) -> bool:
        """The loader's ``collate_fn`` is a function of this file (named, in a lambda, or in
        ``functools.partial``) that puts tensors on CUDA itself (``.to("cuda")``, ``.cuda()``:
        pin_memory=True raises on a CUDA batch), or one that returns the batch as it is (``def
        collate(batch): return batch``, ``lambda b: b``): no tensor is stacked, and what the
        samples hold (paths, annotations) the rule cannot see."""
        arg = self.get_specific_arg(node, "collate_fn", 6)
        value = arg.value if arg is not None else None
        if isinstance(value, cst.Lambda):
            params = value.params.params
            if len(params) == 1 and isinstance(value.body, cst.Name) and value.body.value == params[0].name.value:
                return True
            called = {n.func.value for n in [value.body, *walk(value.body)]
                      if type(n) is cst.Call and isinstance(n.func, cst.Name)}
            return bool(called & self.facts.cuda_collates)
        if isinstance(value, cst.Call) and self.qname(value) == "functools.partial" and value.args:
            value = value.args[0].value
        name = value.value if isinstance(value, cst.Name) else None
        return name in self.facts.cuda_collates or name in self.facts.identity_collates

    def _over_indices(self, node: cst.Call) -> bool:
        """A loader over ``range(n)`` or an index tensor (``torch.arange``, ``torch.randperm``)
        built in the call: its batches are small index tensors that gather rows of tensors the
        script has already placed, and there is nothing worth pinning."""
        data = self.get_specific_arg(node, "dataset", 0)
        value = data.value if data is not None else None
        if not isinstance(value, cst.Call):
            return False
        if isinstance(value.func, cst.Name) and value.func.value == "range":
            return True
        return self.qname(value) in ("torch.arange", "torch.randperm")

    def _over_tensors(self, node: cst.Call) -> bool:
        """A loader over a ``TensorDataset`` (built in the call, or a name of the file bound to
        one), or over a dataset built on a device (a name bound to what a call given a device
        other than the CPU builds, or to a part of it: ``tasks = get_tasksets(...,
        device=device)``, ``data = tasks.dataset``; a class named for living on the device,
        ``OnDeviceDataset(...)``): its tensors may already be on the GPU, where
        ``pin_memory=True`` raises."""
        data = self.get_specific_arg(node, "dataset", 0)
        if data is None:
            return False
        value = data.value
        if isinstance(value, cst.Name):
            return value.value in self.facts.tensor_datasets or value.value in self.facts.device_datasets
        root = value
        while isinstance(root, (cst.Attribute, cst.Subscript)):
            root = root.value
        if root is not value and isinstance(root, cst.Name) and root.value in self.facts.device_datasets:
            return True  # DataLoader(tasks.dataset)
        if isinstance(value, cst.Call) and _device_call(value):
            return True
        return isinstance(value, cst.Call) and isinstance(value.func, (cst.Name, cst.Attribute)) and (
            (self.qname(value) or "").endswith("TensorDataset"))


def _device_call(call: cst.Call) -> bool:
    """PTT021: the engine's ``_on_device`` for a dataset built in the loader's call."""
    if re.search(r"on_?device", get_full_name_for_node(call.func) or "", re.IGNORECASE):
        return True
    for a in call.args:
        if a.keyword is not None and a.keyword.value == "device":
            v = a.value
            if isinstance(v, cst.Call) and v.args:
                v = v.args[0].value
            return not ((isinstance(v, cst.Name) and v.value == "None")
                        or (isinstance(v, cst.SimpleString) and "cpu" in v.value.lower()))
    return False


class MemoryAllocated(RuleVisitor):
    """Only in a file with a CPU path (it names the device "cpu"), outside a CUDA check."""

    CODE = "PTT027"

    def reset(self) -> None:
        self.cuda_branches: list[cst.CSTNode | None] = []  # the CUDA side of each conditional expression entered

    def visit_IfExp(self, node: cst.IfExp) -> None:
        # x if device == "cuda" else None: the body is the CUDA side; x if not cuda else y: the else
        negated = _negated_test(node.test)
        self.cuda_branches.append((node.orelse if negated else node.body) if _mentions(node.test, "cuda")
                                  else None)

    def leave_IfExp(self, node: cst.IfExp) -> None:
        self.cuda_branches.pop()

    def _in_cuda_branch(self, node: cst.CSTNode) -> bool:
        return any(b is not None and any(n is node for n in [b, *walk(b)]) for b in self.cuda_branches)

    def visit_Call(self, node: cst.Call) -> None:
        if (self.qname(node) in ("torch.cuda.memory_allocated", "torch.cuda.max_memory_allocated")
                and self.facts.cpu_path and not self.where.under_cuda_check()
                and not self._in_cuda_branch(node)
                and not _after_device_exit(self.where, node) and not _past_cpu_test(self.where, node)
                and not _cuda_only_function(self.where, self) and not _reported_as_gpu(self.where, node)
                and not _placed_on_cuda_before(self.where, node)
                and not _cuda_device_required_before(self.where, node, self)):
            self.flag(node)


def _negated_test(test: cst.CSTNode) -> bool:
    """``not x``, ``a != b``, ``a is not b``, ``a not in b`` at the top of a test."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return True
    return isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(
        test.comparisons[0].operator, (cst.NotEqual, cst.IsNot, cst.NotIn))


# torch.cuda calls that raise for a CPU device given as their device (ValueError: Expected a cuda
# device) and without a GPU: after one of them with a device argument, that device is CUDA's
_NEEDS_CUDA_DEVICE = {f"torch.cuda.{n}" for n in (
    "synchronize", "reset_peak_memory_stats", "reset_max_memory_allocated", "device", "set_device",
)}


def _needs_cuda_device(call: cst.CSTNode, visitor: RuleVisitor) -> bool:
    """``torch.cuda.synchronize(device)``, ``torch.cuda.device(dev)``: a call that names a device
    (not None, not a string naming the CPU) to one of torch.cuda's functions that refuse a CPU one."""
    if not (isinstance(call, cst.Call) and visitor.qname(call) in _NEEDS_CUDA_DEVICE and call.args):
        return False
    v = call.args[0].value
    return not ((isinstance(v, cst.Name) and v.value == "None")
                or (isinstance(v, cst.SimpleString) and "cpu" in v.value.lower()))


def _cuda_device_required_before(where: Tracker, node: cst.CSTNode, visitor: RuleVisitor) -> bool:
    """PTT027: before the call on its path, in its function, a plain statement (one of an enclosing
    block, not one nested in an ``if``) or an enclosing ``with`` hands a device to a torch.cuda
    function that raises for a CPU device (``torch.cuda.synchronize(device)``,
    ``torch.cuda.reset_peak_memory_stats(device)``, ``with torch.cuda.device(device):``): the
    code cannot reach the call on the CPU."""
    for outer in reversed(where.stack):
        if isinstance(outer, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            break
        if isinstance(outer, cst.With) and any(_needs_cuda_device(i.item, visitor) for i in outer.items):
            return True
    return any(isinstance(stmt, cst.SimpleStatementLine) and any(
        _needs_cuda_device(n, visitor) for n in walk(stmt)) for stmt in _statements_before(where, node))


def _places_on_cuda(node: cst.CSTNode) -> bool:
    """A call that puts a tensor on a CUDA device by name: ``device="cuda"`` (or
    ``"cuda:0"``), ``.cuda()``, ``.to("cuda")``."""
    for n in [node, *walk(node)]:
        if not isinstance(n, cst.Call):
            continue
        if isinstance(n.func, cst.Attribute) and n.func.attr.value == "cuda":
            return True
        for a in n.args:
            is_to = a.keyword is None and isinstance(n.func, cst.Attribute) and n.func.attr.value == "to"
            if ((is_to or (a.keyword is not None and a.keyword.value == "device"))
                    and isinstance(a.value, cst.SimpleString) and _DEVICE_STRING.match(a.value.value)):
                return True
    return False


def _placed_on_cuda_before(where: Tracker, node: cst.CSTNode) -> bool:
    """PTT027: a plain statement that runs before the call on its path, in the same function
    (one of an enclosing block, not one nested in an ``if``), puts a tensor on a CUDA device by
    name: the function fails without a GPU, so the call never reads CPU memory as 0."""
    return any(isinstance(stmt, cst.SimpleStatementLine) and _places_on_cuda(stmt)
               for stmt in _statements_before(where, node))


# a string that names the GPU ("GPU memory: ", f"gpu_mem_{name}", "CUDA peak")
_GPU_WORD = re.compile(r"(^|[^a-z])(gpu|cuda)([^a-z]|$)", re.IGNORECASE)
_DEVICE_STRING = re.compile(r"^[rbuf]*[\"']+cuda(:\d+)?[\"']+$")  # "cuda", 'cuda:0': a device name


def _reported_as_gpu(where: Tracker, node: cst.CSTNode) -> bool:
    """PTT027: the statement around the call labels the figure as the GPU's in a string (a
    message "GPU memory: {...} MiB", a logged name "GPU Memory (MB)"): it reports GPU memory
    on purpose, and 0 is the true figure for it on a CPU run."""
    if not where.stack:
        return False
    scope = where.stack[-1]
    part = next((n for n in walk(scope) if isinstance(n, cst.SimpleStatementLine)
                 and any(m is node for m in walk(n))), None)
    if part is None:  # in the header of the innermost if / while / for / with
        part = scope.test if isinstance(scope, (cst.If, cst.While)) else (
            scope.iter if isinstance(scope, cst.For) else None)
        if isinstance(scope, cst.With):
            part = cst.Tuple([cst.Element(i.item) for i in scope.items])
    inside = {id(n) for n in walk(node)}  # memory_allocated("cuda:0"): a device, not a label
    return part is not None and any(
        isinstance(n, (cst.SimpleString, cst.FormattedStringText)) and id(n) not in inside
        and _GPU_WORD.search(n.value) and not _DEVICE_STRING.match(n.value) for n in walk(part))


def _past_cpu_test(where: Tracker, node: cst.CSTNode) -> bool:
    """In the ``else`` (or a later ``elif``) of ``if device == "cpu":``, or in the body of
    ``if device != "cpu":``: reached only off the CPU."""
    stack = where.stack
    for i, outer in enumerate(stack):
        if not isinstance(outer, cst.If) or not _mentions(outer.test, "cpu"):
            continue
        inner = stack[i + 1] if i + 1 < len(stack) else node
        # (walk() leaves operators out: read them from the comparisons and ``not`` themselves)
        negated = any(isinstance(getattr(n, "operator", None), (cst.NotEqual, cst.NotIn, cst.IsNot, cst.Not))
                      for n in [outer.test, *walk(outer.test)])
        in_else = outer.orelse is not None and (inner is outer.orelse or any(
            n is inner for n in walk(outer.orelse)))
        if in_else != negated:
            return True
    return False


# CUDA calls that fail for a CPU device (or without CUDA): a function that makes one is CUDA-only.
CUDA_ONLY = {f"torch.cuda.{n}" for n in ("get_device_properties", "get_device_name",
                                        "get_device_capability", "mem_get_info")}


# a function named for the GPU (print_cuda_usage, log_gpu_memory): it reports CUDA on purpose
_GPU_NAMED = re.compile(r"(^|_)(cuda|gpu)(_|$)", re.IGNORECASE)


def _cuda_only_function(where: Tracker, visitor: RuleVisitor) -> bool:
    func = where.function()
    return func is not None and (bool(_GPU_NAMED.search(func.name.value)) or any(
        isinstance(n, cst.Call) and visitor.qname(n) in CUDA_ONLY for n in walk(func.body)))


def _device_test(test: cst.CSTNode) -> bool:
    return _mentions(test, "cpu") or _mentions(test, "cuda") or _mentions(test, "device")


def _exits(block: cst.BaseSuite) -> bool:
    body = block.body if isinstance(block, cst.IndentedBlock) else [block]
    last = body[-1] if body else None
    if isinstance(last, cst.SimpleStatementLine):
        return any(isinstance(x, (cst.Return, cst.Raise, cst.Continue, cst.Break)) for x in last.body)
    return isinstance(last, cst.SimpleStatementSuite) and any(
        isinstance(x, (cst.Return, cst.Raise, cst.Continue, cst.Break)) for x in last.body)


def _after_device_exit(where: Tracker, node: cst.CSTNode) -> bool:
    """An earlier ``if`` of the same block that tests the device and leaves (``if device ==
    "cpu": return 0``): the node is reached only on the other path."""
    return any(isinstance(stmt, cst.If) and _device_test(stmt.test) and _exits(stmt.body)
               for stmt in _statements_before(where, node))


def _statements_before(where: Tracker, node: cst.CSTNode):
    """The statements that run before ``node`` on its path, in its function: those of each
    enclosing block before the one that holds it, innermost block first (none of a body that
    does not hold it: for a node in the ``else`` of an ``if``, its body does not run before)."""
    for outer in reversed(where.stack):
        body = getattr(outer, "body", None)
        stmts = body.body if isinstance(body, cst.IndentedBlock) else []
        for i, stmt in enumerate(stmts):
            if any(n is node for n in [stmt, *walk(stmt)]):
                yield from stmts[:i]
                break
        if isinstance(outer, (cst.FunctionDef, cst.ClassDef)):
            break


class OptimizerNotFused(RuleVisitor):
    """Adam and AdamW (the optimizers the tip measures) built without choosing an implementation
    (no ``fused=``, no ``foreach=``), where the reader's torch, the torch the project pins
    exactly if it does, and the oldest torch it declares (its floor) accept ``fused=True`` on
    the device;
    for CUDA, only in a file that names an accelerator (one that never does trains on the CPU);
    not where the file or its project creates complex parameters (fused=True raises on them)."""

    CODE = "PTT031"

    def visit_Call(self, node: cst.Call) -> None:
        name = self.qname(node)
        if name not in OPTIMIZERS or _star_kwargs(node):
            return
        for a in node.args:
            if a.keyword is not None and a.keyword.value in ("fused", "foreach", "differentiable"):
                if not (a.keyword.value == "foreach" and _is_false(a.value)):
                    return  # an implementation chosen (foreach=False, the for-loop, is still flagged)
        if FUSED_SINCE[name].get(self.device) is None:
            return  # no fused= on this device (a torch without it, or one the project supports,
            # is left to advice_needs: a TypeError there)
        if self.device == "cuda" and not self.facts.mentions_cuda:
            return  # a file that never names an accelerator trains on the CPU
        if self.facts.complex_params:
            return  # fused=True raises at step() on a complex parameter (an FFT layer's weights)
        self.flag(node)

    def advice_needs(self, node: cst.CSTNode) -> tuple[int, ...] | None:
        """The first release with fused= for this optimizer on the device (FUSED_SINCE)."""
        return FUSED_SINCE.get(self.qname(node) or "", {}).get(self.device)


# A test that names an opt-in debugging switch: ``if args.debug:``, ``if cfg.detect_anomaly:``.
_DEBUG_SWITCH = re.compile(r"debug|anomal|detect|(^|_)nan", re.IGNORECASE)


class AnomalyDetection(RuleVisitor):
    """Anomaly detection switched on; not under an ``if`` that tests a debugging option (the
    advice, already taken: on only while hunting a NaN)."""

    CODE = "PTT034"

    def _opt_in(self) -> bool:
        # a name, an attribute (cfg.debug) or a key (config["debug"], args.get("debug"))
        return any(isinstance(n, cst.If) and any(
            (isinstance(x, cst.Name) and _DEBUG_SWITCH.search(x.value))
            or (isinstance(x, cst.SimpleString) and _DEBUG_SWITCH.search(x.value))
            for x in [n.test, *walk(n.test)])
            for n in self.where.stack)

    def visit_Call(self, node: cst.Call) -> None:
        name = self.qname(node)
        if name in ("torch.autograd.detect_anomaly", "torch.autograd.set_detect_anomaly") and self._opt_in():
            return
        if name == "torch.autograd.detect_anomaly":
            self.flag(node)
        elif name == "torch.autograd.set_detect_anomaly":
            arg = self.get_specific_arg(node, "mode", 0)
            if arg is not None and _is_true(arg.value):
                self.flag(node)



class DataParallelWrapper(RuleVisitor):
    CODE = "PTT035"

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname(node) in ("torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
                                "torch.nn.parallel.data_parallel.DataParallel") and not self._warned_fallback() \
                and not self.facts.inference_only and not self.facts.evaluation_script \
                and self.facts.part_trains and not self._second_order(node):
            # DDP's launcher and gathering do not pay for evaluation or inference
            self.flag(node)

    def _second_order(self, node: cst.Call) -> bool:
        """The function that wraps the module differentiates through gradients: it calls
        ``autograd.grad(..., create_graph=...)``, or a method of the wrapped object (``learner``
        of ``learner.module = DataParallel(learner.module)``) that the project defines with such
        a call (MAML's ``learner.adapt(loss)``); DDP does not support double backward."""
        func = self.where.function()
        args = _positional(node)
        if func is None or not args:
            return False
        root = args[0].value
        while isinstance(root, (cst.Attribute, cst.Subscript, cst.Call)):
            root = root.func if isinstance(root, cst.Call) else root.value
        name = root.value if isinstance(root, cst.Name) else None
        for n in walk(func.body):
            if type(n) is not cst.Call:
                continue
            if _method(n) == "grad" or (isinstance(n.func, cst.Name) and n.func.value == "grad"):
                if any(a.keyword is not None and a.keyword.value == "create_graph"
                       and not _is_false(a.value) for a in n.args):
                    return True
            if (name and isinstance(n.func, cst.Attribute) and isinstance(n.func.value, cst.Name)
                    and n.func.value.value == name and n.func.attr.value in self.facts.second_order):
                return True
        return False

    def _warned_fallback(self) -> bool:
        """A single-process fallback the code warns about, beside a DistributedDataParallel path
        in the same file: the advice is already taken where it can be."""
        if not self.facts.has_ddp:
            return False
        return any(isinstance(n, cst.If) and any(
            isinstance(c, cst.Call) and re.search(r"warn", (get_full_name_for_node(c.func) or "").rsplit(".", 1)[-1])
            for c in walk(n)) for n in self.where.stack)


class EmptyCacheEveryStep(RuleVisitor):
    """``torch.cuda.empty_cache()`` on every step of a training loop: a loop whose own body calls
    ``backward()``, not under an ``if`` or in an ``except`` (an out-of-memory retry) inside it."""

    CODE = "PTT036"

    def reset(self) -> None:
        self.handlers: list[set[int]] = []  # for each except block entered: the tracked nodes around it

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self.handlers.append({id(n) for n in self.where.stack})

    def leave_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self.handlers.pop()

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname(node) not in ("torch.cuda.empty_cache", "torch.cuda.memory.empty_cache"):
            return
        loop = self.where.loop()
        if (loop is None or self.where.gated_in(loop) or any(id(loop) in h for h in self.handlers)
                or not _training_step(loop) or _steps_handed_off(loop)):
            return
        self.flag(node)


def _steps_handed_off(loop: cst.CSTNode) -> bool:
    """PTT036: the loop's body calls ``backward()`` only in functions it defines, and hands each
    of them by name to another function to run (``ms = time_ms(step)``, ``timeit(step,
    number=30)``), not to an optimizer's ``step(closure)``: that function runs the training
    steps, and one iteration of this loop is one configuration or run, not one step."""
    body = walk(loop.body, into_loops=False)
    nodes = list(body)
    if any(isinstance(n, cst.Call) and (_method(n) == "backward" or _scaler_step(n)) for n in nodes):
        return False
    steps = [n.name.value for n in nodes if isinstance(n, cst.FunctionDef) and _calls_backward(n.body)]
    if not steps or any(isinstance(n, cst.Lambda) and _calls_backward(n) for n in nodes):
        return False
    handed = {a.value.value for n in nodes if isinstance(n, cst.Call)
              and not (get_full_name_for_node(n.func) or "").lower().endswith("step")
              for a in n.args if isinstance(a.value, cst.Name)}
    return all(name in handed for name in steps)


_BATCH_NORMS = {f"torch.nn.BatchNorm{n}d" for n in (1, 2, 3)} | {"torch.nn.SyncBatchNorm"}
_SEQUENTIAL = {"torch.nn.Sequential"}


def _bias_unguarded(stmts: list[ast.stmt], var: str | None) -> bool:
    """The statements read or write ``var.bias`` (any name's ``.bias`` but ``self``'s, for
    ``var`` None), with no test of a bias among them (``if m.bias is not None``,
    ``hasattr(m, "bias")``): with ``bias=False`` the attribute is None and the access raises."""
    found = False
    for stmt in stmts:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Compare) and any(
                    isinstance(x, ast.Attribute) and x.attr == "bias" for x in (n.left, *n.comparators)):
                return False
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("hasattr", "getattr"):
                return False
            if (isinstance(n, ast.Attribute) and n.attr == "bias" and isinstance(n.value, ast.Name)
                    and (n.value.id == var if var else n.value.id != "self")):
                found = True
    return found


def _conv_test(test: ast.expr, conv: str) -> tuple[bool, str | None]:
    """Whether ``test`` picks out convolutions of class ``conv`` (``isinstance(m, nn.Conv2d)``,
    ``type(m) == nn.Conv2d``, ``classname.find("Conv") != -1``), and the name it tests (None for
    a test of a class's name)."""
    for n in ast.walk(test):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.args and isinstance(n.args[0], ast.Name):
            if n.func.id == "isinstance" and len(n.args) == 2:
                kinds = n.args[1].elts if isinstance(n.args[1], ast.Tuple) else [n.args[1]]
            elif n.func.id == "type" and isinstance(getattr(test, "comparators", None), list):
                kinds = test.comparators
            else:
                continue
            names = {k.attr if isinstance(k, ast.Attribute) else getattr(k, "id", None) for k in kinds}
            if conv in names or "_ConvNd" in names:
                return True, n.args[0].id
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and len(n.value) >= 4 \
                and n.value.lower() in conv.lower():
            return True, None
    return False, None


def _touches_conv_bias(source: str, tree: ast.Module | None, classes: set[str], conv: str) -> bool:
    """PTT037: a class of ``classes`` initialises its convolutions' biases unguarded: a method
    that, under a test for ``conv`` (``for m in self.modules(): if isinstance(m, nn.Conv2d):``),
    reads or writes ``m.bias`` or hands ``m`` to a method or function of the file that does
    (``self._conv_init(m)`` -> ``nn.init.constant_(conv.bias, 0)``); or that ``apply``-s such
    a function of the file to its modules. With ``bias=False`` that code raises."""
    if ".bias" not in source or not classes or tree is None:
        return False
    functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}

    def callee(func: ast.expr, methods: dict[str, ast.FunctionDef]) -> tuple[ast.FunctionDef | None, int]:
        if isinstance(func, ast.Name):
            return functions.get(func.id), 0
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            return methods.get(func.attr), 1
        return None, 0

    def picks(func: ast.FunctionDef, var: str | None, methods: dict[str, ast.FunctionDef], depth: int) -> bool:
        """``func`` touches the bias of the convolutions it tests for (of ``var``, where given)."""
        for n in ast.walk(func):
            if not isinstance(n, ast.If):
                continue
            yes, tested = _conv_test(n.test, conv)
            if not yes or (var and tested and tested != var) or any(
                    isinstance(x, ast.Attribute) and x.attr == "bias" for x in ast.walk(n.test)):
                continue  # (``if isinstance(m, nn.Conv2d) and m.bias is not None:``)
            if _bias_unguarded(n.body, tested):
                return True
            for call in (c for s in n.body for c in ast.walk(s) if isinstance(c, ast.Call)):
                target, skip = callee(call.func, methods)
                if target is None or depth > 1:
                    continue
                params = [a.arg for a in (*target.args.posonlyargs, *target.args.args)][skip:]
                for i, a in enumerate(call.args[:len(params)]):
                    if isinstance(a, ast.Name) and (a.id == tested or tested is None) \
                            and _bias_unguarded(target.body, params[i]):
                        return True
        return False

    for cls in ast.walk(tree):
        if not (isinstance(cls, ast.ClassDef) and cls.name in classes):
            continue
        methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
        for method in methods.values():
            if picks(method, None, methods, 1):
                return True
            for call in ast.walk(method):  # self.apply(init_weights)
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "apply" and len(call.args) == 1):
                    target, _ = callee(call.args[0], methods)
                    if target is not None and target is not method and picks(target, None, methods, 1):
                        return True
    return False


class ConvBiasBeforeBatchNorm(RuleVisitor):
    """A convolution with its default bias (no ``bias=``, or ``bias=True``) whose next element in
    an ``nn.Sequential(...)`` (or a list literal of layers) is a batch norm; not in a folder of
    code that loads state dicts and never trains (an inference app serving released weights)."""

    CODE = "PTT037"

    def _layers(self, elements: list[cst.BaseExpression]) -> None:
        for conv, norm in zip(elements, elements[1:]):
            if not (isinstance(conv, cst.Call) and isinstance(norm, cst.Call)):
                continue
            if self.qname(conv) not in CONVS or self.qname(norm) not in _BATCH_NORMS:
                continue
            if any(a.star for a in conv.args):  # *args or **kwargs: bias may be in them
                continue
            arg = self.get_specific_arg(conv, "bias", 7)
            if self.facts.serves_checkpoints or self._twin():
                return  # the checkpoints it loads hold the bias: dropping it breaks loading
            if arg is None or (isinstance(arg.value, cst.Name) and arg.value.value == "True"):
                if self._loaded_only():
                    return  # an evaluator's model, built only to load released weights
                if self.facts.released():
                    return  # its package downloads its released weights, which hold the bias
                if self.facts.frozen_bn():
                    return  # frozen BatchNorm uses running statistics: the bias is not cancelled
                classes = {n.name.value for n in self.where.stack if isinstance(n, cst.ClassDef)}
                if _touches_conv_bias(self.facts.source, self.facts.tree, classes, (self.qname(conv) or "").rsplit(".", 1)[-1]):
                    return  # its class initialises every conv's bias: bias=False would raise there
                self.flag(conv)

    def _loaded_only(self) -> bool:
        """The layers are built in a class that the project never trains (no training file in
        its part of the project, none elsewhere naming it) and that a file naming it loads a
        state dict into: an evaluator's network, whose released weights hold the bias."""
        classes = [n.name.value for n in self.where.stack if isinstance(n, cst.ClassDef)]
        return bool(classes) and bool(set(classes) & self.facts.loaded_only())

    def _twin(self) -> bool:
        """The layers are built in a class that another file of the project also defines (with
        a BatchNorm): a copy of one model (a trainer's beside its package's) whose checkpoints
        load into both, so dropping the bias in one breaks the strict loads between them."""
        twins = self.facts.twin_classes
        return bool(twins) and any(isinstance(n, cst.ClassDef) and n.name.value in twins
                                   for n in self.where.stack)

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname(node) in _SEQUENTIAL:
            self._layers([a.value for a in node.args if a.keyword is None and not a.star])

    def visit_List(self, node: cst.List) -> None:
        self._layers([e.value for e in node.elements if isinstance(e, cst.Element)])


_FLOAT16 = {"torch.float16", "torch.half"}


class Float16WithoutScaler(RuleVisitor):
    """float16 autocast (``dtype=torch.float16``; or ``torch.cuda.amp.autocast()`` /
    ``autocast("cuda")`` without a dtype, whose default is float16) in a function that calls
    ``backward()`` and never names a scaler (``GradScaler``, ``scaler``, ``loss_scaler``)."""

    CODE = "PTT038"

    def reset(self) -> None:
        self.functions: dict[int, list[cst.Call]] = {}

    def _float16(self, call: cst.Call) -> bool:
        name = self.qname(call)
        if name not in ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast",
                        "torch.amp.autocast_mode.autocast") or _star_kwargs(call):
            return False
        enabled = self.get_specific_arg(call, "enabled", 2 if name != "torch.cuda.amp.autocast" else 0)
        if enabled is not None and not (isinstance(enabled.value, cst.Name) and enabled.value.value == "True"):
            return False
        dtype = self.get_specific_arg(call, "dtype", 1)
        if dtype is not None:
            return self.qualify(dtype.value) in _FLOAT16
        if name == "torch.cuda.amp.autocast":
            return True
        device = self.get_specific_arg(call, "device_type", 0)
        return (device is not None and isinstance(device.value, cst.SimpleString)
                and device.value.evaluated_value == "cuda")

    def visit_With(self, node: cst.With) -> None:
        func = self.where.function()
        if func is None:
            return
        for item in node.items:
            if isinstance(item.item, cst.Call) and self._float16(item.item):
                self.functions.setdefault(id(func), []).append(item.item)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        calls = self.functions.pop(id(node), [])
        if not calls or not _calls_backward(node.body) or _mentions(node.body, "scale"):
            return
        for call in calls:
            self.flag(call)


# --- per-step syncs that read no value (preview) -----------------------------------------------

def _tensor_names_in(scope: cst.CSTNode, loop: cst.CSTNode, facts: Facts, visitor: RuleVisitor) -> set[str]:
    """Names that hold a tensor in ``loop``: what it calls ``backward()`` on, what a loss call
    returns in it, what a torch call binds in ``scope``, and arithmetic on those; never a name
    also bound to a Python number (``.item()``, ``float()``, a literal)."""
    tensors = set(facts.tensor_names)
    numbers: set[str] = set()
    assigns = [n for n in walk(scope) if isinstance(n, cst.Assign)]
    for n in walk(loop.body):
        if isinstance(n, cst.Call) and _method(n) == "backward" and isinstance(n.func.value, cst.Name):
            tensors.add(n.func.value.value)
    for a in assigns:
        names = {x for t in a.targets for x in target_names(t.target)}
        v = a.value
        if isinstance(v, cst.Call):
            callee = (get_full_name_for_node(v.func) or "")
            q = visitor.qualify(v.func) if isinstance(v.func, (cst.Name, cst.Attribute)) else None
            if _method(v) in UNTRACKED or callee in ("float", "int", "round", "len", "str"):
                numbers |= names
            elif returns_tensor(q) or "loss" in callee.lower() or "criterion" in callee.lower():
                tensors |= names
        elif isinstance(v, (cst.Integer, cst.Float, cst.SimpleString, cst.List, cst.Dict)):
            numbers |= names
    for _ in range(2):
        for a in assigns:
            if isinstance(a.value, (cst.BinaryOperation, cst.Subscript)) and not any(
                    isinstance(c, cst.Call) for c in walk(a.value)) and names_in(a.value) & tensors:
                tensors |= {x for t in a.targets for x in target_names(t.target)}
    return tensors - numbers


def _is_text(node: cst.CSTNode) -> bool:
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
        return True
    return isinstance(node, cst.BinaryOperation) and (_is_text(node.left) or _is_text(node.right))


def _formatted(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The values a string formatting reads: ``f"{x:.3f}"``, ``"%g" % x``, ``"{}".format(x)``."""
    if isinstance(node, cst.FormattedStringExpression):
        return [node.expression]
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo) and _is_text(node.left):
        right = node.right
        return [e.value for e in right.elements] if isinstance(right, cst.Tuple) else [right]
    if (isinstance(node, cst.Call) and _method(node) == "format" and _is_text(node.func.value)):
        return [a.value for a in node.args]
    return []


def _tensor_value(node: cst.BaseExpression, tensors: set[str]) -> bool:
    while isinstance(node, cst.Subscript):
        node = node.value
    return isinstance(node, cst.Name) and node.value in tensors


class FormattedTensorEveryStep(RuleVisitor):
    """A CUDA tensor formatted into text (f-string, ``%``, ``.format``) on every training step:
    formatting reads the value (``__format__`` calls ``.item()``), so the host waits for the GPU.
    Only names with evidence of holding a tensor, in a file that names CUDA, in a loop whose body
    calls ``backward()``, not under an ``if`` that runs on some steps only."""

    CODE = "PTT039"

    def reset(self) -> None:
        self.cache: dict[tuple[int, int], set[str]] = {}
        self.steps: dict[int, bool] = {}

    def _check(self, node: cst.CSTNode, values: list[cst.BaseExpression]) -> None:
        loop = self.where.loop()
        if loop is None or not self.facts.mentions_cuda or self.where.gated_in(loop):
            return
        step = self.steps.get(id(loop))
        if step is None:  # (a step that reads a value on the host anyway: the format adds no wait of note)
            step = self.steps[id(loop)] = _training_step(loop) and not _reads_every_step(loop.body.body)
        if not step:
            return
        scope = self.where.function() or loop
        key = (id(scope), id(loop))
        if key not in self.cache:
            self.cache[key] = _tensor_names_in(scope, loop, self.facts, self)
        tensors = self.cache[key]
        if any(_tensor_value(v.value if isinstance(v, cst.StarredElement) else v, tensors) for v in values):
            self.flag(node)

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        values = [p.expression for p in node.parts if isinstance(p, cst.FormattedStringExpression)]
        if values:
            self._check(node, values)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        values = _formatted(node)
        if values:
            self._check(node, values)

    def visit_Call(self, node: cst.Call) -> None:
        if _method(node) == "format":
            values = _formatted(node)
            if values:
                self._check(node, values)


def _reads_every_step(stmts) -> bool:
    """A statement of the step (not in a nested loop, nor under an ``if`` other than a rank
    guard) reads a value on the host: ``losses.append(loss.item())``, so the step syncs anyway."""
    for stmt in stmts:
        if isinstance(stmt, cst.SimpleStatementLine):
            if any(isinstance(n, cst.Call) and _method(n) in HOST_READS for n in walk(stmt)):
                return True
        elif isinstance(stmt, cst.If):
            if rank_guard(stmt.test) and _reads_every_step(stmt.body.body):
                return True
        elif isinstance(stmt, (cst.With, cst.Try)) and _reads_every_step(stmt.body.body):
            return True
    return False


_BENCHMARK = re.compile(r"bench|profil|timing|measure|speed", re.IGNORECASE)


class SynchronizeEveryStep(RuleVisitor):
    """``torch.cuda.synchronize()`` on every step of a training loop that logs every N steps (an
    ``if`` with ``%`` in it, or a loop over ``metric_logger.log_every(...)``): the wait is paid each
    step for a value read every N; not in a function named for benchmarking or profiling, where
    waiting is the point, nor in a loop that reads a value every step to decide something."""

    CODE = "PTT040"

    def visit_Call(self, node: cst.Call) -> None:
        if not isinstance(node.func, (cst.Name, cst.Attribute)) or self.qualify(node.func) not in (
                "torch.cuda.synchronize", "torch.accelerator.synchronize"):
            return
        loop = self.where.loop()
        if loop is None or self.where.gated_in(loop) or not _training_step(loop) or _decides(loop):
            return  # (a loop that reads a value every step to decide something waits anyway)
        func = self.where.function()
        if func is not None and _BENCHMARK.search(func.name.value):
            return
        logs_every = isinstance(loop, cst.For) and "log_every" in (get_full_name_for_node(
            loop.iter.func) or "" if isinstance(loop.iter, cst.Call) else "")
        if logs_every or any(isinstance(n, cst.If) and _has_mod(n.test) for n in walk(loop.body, into_loops=False)):
            clocks = _clock_names_after(loop, node)
            if clocks and _used_every_step(loop, clocks):
                return  # the timing it serves is printed or kept on every step, not every N
            self.flag(node)


_CLOCKS = frozenset({"time", "perf_counter", "monotonic", "time_ns", "perf_counter_ns", "monotonic_ns",
                     "default_timer"})


def _clock_names_after(loop: cst.CSTNode, call: cst.Call) -> set[str]:
    """The names bound to a clock read (``end = time.time()``) on the line of the synchronize or
    on the two lines after it, in the same block: the timing the synchronize serves."""
    for stmts, i in _holding(loop, call):
        if not isinstance(stmts[i], cst.SimpleStatementLine):
            continue
        names: set[str] = set()
        for line in stmts[i:i + 3]:
            if not isinstance(line, cst.SimpleStatementLine):
                break
            for small in line.body:
                if isinstance(small, cst.Assign) and any(
                        isinstance(c, cst.Call) and (get_full_name_for_node(c.func) or "").rsplit(".", 1)[-1]
                        in _CLOCKS for c in [small.value, *walk(small.value)]):
                    names |= {x for t in small.targets for x in target_names(t.target)}
        return names
    return set()


def _ungated(node: cst.CSTNode):
    """The nodes under ``node`` outside any ``if`` with ``%`` in its test (a logging interval)
    and outside nested functions."""
    for c in children(node):
        if type(c) in _STOPS or (isinstance(c, cst.If) and _has_mod(c.test)):
            continue
        yield c
        yield from _ungated(c)


def _used_every_step(loop: cst.CSTNode, names: set[str]) -> bool:
    """A value of ``names`` (or one computed from them, ``elapsed = end - start``) is handed to
    a call (print, a logger, append, a meter's update) or formatted into text outside the logging
    interval: the timing is used on every step."""
    nodes = list(_ungated(loop.body))
    for _ in range(3):
        grown = names | {x for n in nodes if isinstance(n, cst.Assign) and names_in(n.value) & names
                         for t in n.targets for x in target_names(t.target)}
        if grown == names:
            break
        names = grown
    return any((isinstance(n, cst.Arg) and names_in(n.value) & names)
               or (isinstance(n, cst.FormattedStringExpression) and names_in(n.expression) & names)
               for n in nodes)


def _whole_module_cst(value: cst.BaseExpression, facts: Facts) -> bool:
    """A module object itself (``model``, ``deepcopy(model)``, ``model.half()``), not its weights."""
    while isinstance(value, cst.Call):
        name = (get_full_name_for_node(value.func) or "").rsplit(".", 1)[-1]
        if name in ("deepcopy", "copy") and value.args:
            value = value.args[0].value
        elif name in ("half", "float", "cpu", "eval") and isinstance(value.func, cst.Attribute):
            value = value.func.value
        elif (name.startswith("de_parallel") or name == "unwrap_model") and value.args:
            value = value.args[0].value
        else:
            return False
    wrapped = False
    while isinstance(value, cst.Attribute) and value.attr.value == "module":
        value, wrapped = value.value, True
    name = get_full_name_for_node(value) if isinstance(value, (cst.Name, cst.Attribute)) else None
    if (not name or name.split(".", 1)[0] in _SETTINGS or name.split(".")[:2] == ["self", "args"]
            or name in facts.state_names):
        return False
    if name.startswith("self.") and not wrapped:  # an attribute: a module only where bound to one
        return name in facts.module_attrs
    return bool(_MODULE_NAME.search(name.rsplit(".", 1)[-1])) or name in facts.module_names


def _saved_dict(visitor: RuleVisitor, node: cst.Call) -> tuple[list[cst.BaseExpression], str | None] | None:
    """For ``torch.save({...}, f)`` the dict's values; for ``torch.save(ckpt, f)`` the name."""
    if visitor.qname(node) != "torch.save":
        return None
    args = _positional(node)
    if not args:
        return None
    value = args[0].value
    if isinstance(value, cst.Dict):
        return [e.value for e in value.elements if isinstance(e, cst.DictElement)], None
    if isinstance(value, cst.Name):
        return [], value.value
    return None


class SaveDictWithModule(RuleVisitor):
    """``torch.save`` of a checkpoint dict one of whose values is a whole module (``"model":
    deepcopy(model)``): the module object is pickled, as in PTT004. Not where the file or its
    project reads one of those keys back from a loaded checkpoint as a module
    (``ckpt["model"].float().state_dict()``): its checkpoint format pickles modules on purpose,
    and a state_dict there breaks its own readers."""

    CODE = "PTT041"

    def visit_Call(self, node: cst.Call) -> None:
        saved = _saved_dict(self, node)
        if saved is None:
            return
        values, name = saved
        plain = self.facts.plain_names  # also bound to an entry of a container: weights, maybe
        first = _positional(node)[0].value
        if isinstance(first, cst.Dict):
            keys = {_key(e.key) for e in first.elements if isinstance(e, cst.DictElement)
                    and _whole_module_cst(e.value, self.facts)
                    and not (isinstance(e.value, cst.Name) and e.value.value in plain)}
        else:
            keys = set(self.facts.module_keys.get(name, ())) if name in self.facts.module_dicts else set()
        if keys and not (keys & self.facts.modules_read_back) and not self._format_chosen(node):
            self.flag(node)

    def _format_chosen(self, save: cst.Call) -> bool:
        """The save is one branch of an ``if``/``elif`` chain on flags or parameters (tests that
        call nothing: ``elif not save_state_dict and save_optimizer``) another branch of which
        saves a ``state_dict()``: the code offers both formats, and this branch is the one that
        pickles the module on purpose."""
        stack = self.where.stack
        inner = next((i for i in range(len(stack) - 1, -1, -1) if isinstance(stack[i], (cst.If, *SCOPES))),
                     None)
        if inner is None or not isinstance(stack[inner], cst.If):
            return False
        while inner > 0 and isinstance(stack[inner - 1], cst.If) and stack[inner - 1].orelse is stack[inner]:
            inner -= 1  # up an elif chain to its first if
        branches, tests, link = [], [], stack[inner]
        while isinstance(link, cst.If):
            tests.append(link.test)
            branches.append(link.body)
            link = link.orelse
        if link is not None:
            branches.append(link.body)
        if any(type(n) is cst.Call for t in tests for n in [t, *walk(t)]) or not any(
                type(n) in (cst.Name, cst.Attribute) for t in tests for n in [t, *walk(t)]):
            return False
        return any(not any(n is save for n in walk(b)) and self._saves_state_dict(b) for b in branches)

    def _saves_state_dict(self, branch: cst.CSTNode) -> bool:
        """The branch calls ``torch.save`` on a value that holds a ``.state_dict()``."""
        for n in walk(branch):
            if type(n) is cst.Call and self.qname(n) == "torch.save":
                args = _positional(n)
                if args and any(type(m) is cst.Call and type(m.func) is cst.Attribute
                                and m.func.attr.value == "state_dict" for m in [args[0].value, *walk(args[0].value)]):
                    return True
        return False


class SaveNamespace(RuleVisitor):
    """``torch.save`` of a checkpoint holding an ``argparse.Namespace`` (``"args": args``): from
    torch 2.6 ``torch.load`` loads with ``weights_only=True`` by default and refuses it. Not in a
    file that loads with ``weights_only=False`` (it reads its own checkpoints that way)."""

    CODE = "PTT042"

    def visit_Call(self, node: cst.Call) -> None:
        saved = _saved_dict(self, node)
        if saved is None or self.torch_before((2, 6)) or self.facts.loads_unsafely:
            return
        values, name = saved
        if any(isinstance(v, cst.Name) and v.value in self.facts.namespace_names - self.facts.plain_names
               for v in values) or (
                name and name in self.facts.namespace_dicts):
            self.flag(node)


OWN_VISITORS = [cls for cls in list(globals().values())
                if isinstance(cls, type) and issubclass(cls, RuleVisitor) and cls.CODE]
