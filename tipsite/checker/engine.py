"""Find the rules' patterns in Python source: Python's ``ast`` picks the pieces, libcst checks them.

Parsing a whole file with libcst and resolving its scope metadata costs ~20x what Python's own
``ast`` does, far too slow for the checker's budget (50 files of 200 lines a second on two
shared cores). So each file is read twice, cheaply first:

1. ``ast`` parses the whole file and gathers :class:`~tipsite.checker.visitors.Facts`: the
   imports (which give each dotted name its qualified name, the job libcst's
   ``QualifiedNameProvider`` does for TorchFix) and what some names were bound to. It also marks
   every node that could start a finding (a call named ``load``, an ``except`` in a loop, ...)
   and, for each, the smallest enclosing piece a rule needs to judge it: the statement, the loop,
   the function or the class.
2. libcst parses only those pieces (nested ones are dropped in favour of the piece around them)
   and all visitors (:mod:`tipsite.checker.visitors`) run over each piece in one batched
   traversal. An indented piece is parsed under an ``if 1:`` line so that its lines, and so its
   columns, stay exactly as in the file.

Positions are resolved (libcst's ``PositionProvider``) only for pieces with a finding. A
``# noqa`` or ``# noqa: PTT012`` comment on any line of a statement silences its findings (for a
compound statement, on the lines of its header: ``for ...:``, ``with ...:``).
"""

from __future__ import annotations

import ast
import bisect
import collections
import dataclasses
import functools
import io
import os
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst
from libcst._batched_visitor import _get_visitor_methods
from libcst._position import CodePosition, CodeRange
from libcst.helpers import get_full_name_for_node
from libcst.metadata import (
    MetadataWrapper,
    PositionProvider,
    QualifiedName,
    QualifiedNameProvider,
    QualifiedNameSource,
    WhitespaceInclusivePositionProvider,
)

from tipsite.checker import visitors as V

MARKER = "torch"  # like TorchFix: a file that never says "torch" has nothing to find
DEFAULT_ALIASES = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional", "np": "numpy"}
STMT_CALLS = {"save", "zero_grad", "ModuleList", "tensor",
              "DataLoader", "register_parameter",
              "Linear", "set_detect_anomaly", "detect_anomaly", "autocast", "GradScaler",
              "DataParallel", "Sequential", *(n.rsplit(".", 1)[1] for n in V.CONVS | V.OPTIMIZERS)}
SCOPE_CALLS = {"load", "no_grad", "load_state_dict", "eval"}  # judged with the rest of the function
LOOP_CALLS = V.HOST_READS | {"empty_cache", "synchronize"}
FUNCTION_CALLS = {"autocast"}  # judged with the rest of the function, not the whole file at top level
CLASS_CALLS = {"cuda", "cpu", "to", "no_grad", "eval", "train", *(n.rsplit(".", 1)[1] for n in V.FACTORIES)}
# Each of these is searched in code, not in comments: see _in_code()
_CPU_PATH = re.compile(r"""["']cpu["']""")
# the script picks CUDA and nothing else (``Fabric(accelerator="cuda")``): a "cpu" elsewhere in it
# is a map_location or a staging device, not a CPU path the rules must keep working
_CUDA_ONLY = re.compile(r"""\baccelerator\s*=\s*["'](cuda|gpu)["']""")
_TRAINS = re.compile(r"""\.backward\(|\.step\(|\bbackward\(|manual_backward""")
_INFERS = re.compile(r"""no_grad|inference_mode|\.eval\(\)""")
_ACCELERATOR = re.compile(r"cuda|accelerator")
_DDP = re.compile(r"DistributedDataParallel|FullyShardedDataParallel|\bDDP\b|_DDP\b|torch\.distributed\.run|torchrun")
_EXPORTS_WORDS = ("onnx", "torch.jit.trace", "torch.jit.script", "torch.export", "coremltools", "openvino",
                  "tensorrt", "tflite")  # the file exports its model: one of these is in the text
_DDP_WORDS = ("DistributedDataParallel", "FullyShardedDataParallel", "DDP", "torch.distributed.run",
              "torchrun")  # _DDP needs one of these
_UNSAFE_LOAD = re.compile(r"weights_only\s*=\s*False")
# the project turns the weights-only loader off (os.environ[...] = "1", setdefault, putenv): it
# decided that its files load with weights_only=False (PTT001)
_FORCE_UNSAFE = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
_SETS_FORCE_UNSAFE = re.compile(r"""TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD["']\s*\]\s*=(?!=)"""
                                r"""|(?:setdefault|putenv)\(\s*["']TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD""")
# the file allow-lists classes for the weights-only loader, or asks whether torch can (PTT001)
_ALLOW_LISTS = re.compile(r"\b(?:add_)?safe_globals\b")
# A project's declared torch requirement: "torch>=2.6" (a requirement line, pyproject, setup.py)
# and, in a README, a lower bound ("torch>=2.6", "PyTorch 2.6 or later") or any release it names
# (_named_releases: "pip install torch==1.8.0", "tested with PyTorch 1.7": the oldest is the
# floor where no requirement file names torch); "pytorch-lightning", "torchaudio" do not match.
_TORCH_REQ = re.compile(r"(?<![\w.-])(?:py)?torch\s*(?:>=|==|~=|>)\s*(\d+)\.(\d+)", re.IGNORECASE)
# In prose (a README, an install document) the name may be a Markdown link and the requirement
# may sit in parentheses: "[PyTorch (>= 1.7)](https://pytorch.org)", "[PyTorch](url) >= 1.7",
# "[PyTorch]((http://pytorch.org/)) v1.0" (_LINKED: the link's target, then a parenthesis)
_LINKED = r"(?:\]\(+[^()\s]{0,200}\)+)?\s*\(?"
_TORCH_MIN = re.compile(r"(?<![\w.-])(?:py)?torch" + _LINKED + r"\s*(?:>=|>)\s*(\d+)\.(\d+)", re.IGNORECASE)
_TORCH_PROSE = re.compile(r"(?<![\w.-])(?:py)?torch" + _LINKED + r"\s*(\d+)\.(\d+)(?:\.\d+)?\s+or\s+"
                          r"(?:later|newer|higher|above)", re.IGNORECASE)
# A floor said in words later in the same sentence, in a README or an install document: "install
# PyTorch meeting your environment (at least 1.7)", "PyTorch, version 1.7 or higher", "PyTorch
# (minimum 1.7)". The words between name no other package (CUDA, Python, torchvision...), no
# number and end no sentence, and the release is a torch one (0.x to 2.x: "CUDA at least 10.2"
# and "Python 3.8 or later" are not read). _FLOOR_WORDS guards the search.
_GAP = (r"(?:\]\(+[^()\s]{0,200}\)+)?(?:(?!cuda|cudnn|python|gcc|g\+\+|nvcc|nvidia|driver|torchvision|torchaudio"
        r"|numpy|tensorflow|jax|mmcv|apex|transformers|lightning|ubuntu|windows|linux)[^.!?;\n\d]){0,80}?")
_TORCH_LEAST = re.compile(r"(?<![\w.-])(?:py)?torch(?![\w-])" + _GAP + r"\b(?:at\s+least|minimum)\s*:?\s*"
                          r"(?:(?:required\s+)?version\s*:?\s*)?(?:of\s+)?v?(?<![\d.])([0-2])\.(\d{1,2})(?![\d])",
                          re.IGNORECASE)
_TORCH_OR_LATER = re.compile(r"(?<![\w.-])(?:py)?torch(?![\w-])" + _GAP + r"(?:\bv(?:ersion)?\s*)?(?<![\d.])"
                             r"([0-2])\.(\d{1,2})(?:\.\d+)?\s+or\s+(?:later|newer|higher|above)\b",
                             re.IGNORECASE)
_FLOOR_WORDS = ("least", "minimum", " or ")
# A ceiling in prose, "compatible with PyTorch <= 1.4", "PyTorch < 1.0 needs ...": the project
# runs on that release or older ones, so its oldest supported torch is no newer (see _ceiling)
_TORCH_CEIL = re.compile(r"(?<![\w.-])(?:py)?torch" + _LINKED + r"\s*(<=?)\s*(\d+)\.(\d+)", re.IGNORECASE)
# A project root's markers, with a setup.py other than a torch extension's build (see _is_root)
_ROOT_MARKERS = frozenset(("pyproject.toml", "setup.cfg", ".git"))
# A pin of one torch release, "torch==1.10.0" (pip) or "pytorch=1.10.0=py3.8_cuda11.3" (conda),
# in a requirement file, a conda environment file (*env*.yml) or an install script (install*.sh)
_TORCH_PIN = re.compile(r"(?<![\w.-])(?:py)?torch\s*==?\s*(\d+)\.(\d+)", re.IGNORECASE)
_TORCH_OPEN = re.compile(r"(?<![\w.-])(?:py)?torch\s*(?:>=|~=|>|<|!=)", re.IGNORECASE)
_TORCH_NAMED = re.compile(r"(?<![\w.-])(?:py)?torch(?:\]\(+[^()\s]{0,200}\)+)?\W{0,3}(?:v(?:ersion)?\s*)?"
                          r"(\d+)\.(\d+)", re.IGNORECASE)
_NEWER_TORCH = re.compile(r"(?:higher|newer|later|above)\s+(?:versions?\s+(?:of\s+)?)?(?:py)?torch",
                          re.IGNORECASE)
# An exact pin of torchvision or torchaudio ("torchvision==0.15.2", conda "torchaudio=0.13.1"):
# each of their releases is built against one torch release and requires it, so the pin pins
# torch too (see _COMPANION_TORCH)
_COMPANION_PIN = re.compile(r"(?<![\w.-])torch(vision|audio)\s*==?\s*(\d+)\.(\d+)", re.IGNORECASE)
# (and a Cog file, cog.yaml: its python_packages build one image, as a Dockerfile does)
_PIN_FILE = re.compile(r"(?:^requirements.*\.(?:txt|ya?ml)|env.*\.ya?ml|conda.*\.ya?ml|^install.*\.(?:sh|bat|cmd|ps1)"
                       r"|^cog\.ya?ml)$", re.IGNORECASE)
# Folders where a project keeps its install files (scripts/install.bat, scripts/requirements_conda.yaml,
# docker/Dockerfile): their pin files are read as the files of the folder that holds them
_INSTALL_DIRS = ("scripts", "script", "tools", "docker", "install", "installation", "env", "envs", "conda",
                 "environment", "environments", "setup")
# A folder of requirement files (requirements/requirements.txt, requirements/base.txt, which a
# setup.py reads): its *.txt files are requirement files of the folder that holds it
_REQ_DIR = "requirements"
_REQ_DIR_MAX = 20  # files read from it, in name order
# A README's list item naming one torch release and nothing else ("* pytorch 1.8.0",
# "- PyTorch v1.8"): a requirement list's entry, the release the project needs (a floor); an
# item naming another package ("* torchvision 0.9.0") or saying more is not read
_TORCH_BULLET = re.compile(r"^[ \t]*[*+-][ \t]+(?:py)?torch[ \t]*(?:v(?:ersion)?[ \t]*)?(\d+)\.(\d+)(?:\.\d+)?[ \t]*$",
                           re.IGNORECASE | re.MULTILINE)
_REQ_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "environment.yml")
_READMES = ("README.md", "README.rst", "README.txt", "README")
# An install document (INSTALL.md, installation.rst, get_started.md, getting_started.rst, quickstart.md,
# setup.md; in the folder or a docs folder of it, _DOC_DIRS): prose
# like a README, read only where no requirement file names torch; every torch release it names
# ("CUDA 11.1 + PyTorch 1.8.0", "PyTorch >= 1.8") is one it was tested with or requires, so the
# lowest is a floor (not a pin: an install document lists setups that work, not the only one)
_INSTALL_DOC = re.compile(r"^(?:install|get_?started|getting_?started|quick_?start|setup)[\w.-]*\.(?:md|rst|txt)$",
                          re.IGNORECASE)
# the folders of a project's documents, its install document among them (docs/INSTALL.md,
# doc/installation.rst, readme/INSTALL.md): only these names, one level down, are looked into
_DOC_DIRS = ("docs", "doc", "readme")
# A Dockerfile (Dockerfile, Dockerfile.gpu, cuda.Dockerfile) builds one image with one torch:
# "pip install torch==1.10", "conda install pytorch=1.10", "FROM pytorch/pytorch:1.10.0-cuda11.3"
# install exactly that release, as an install script does, so it is read as a pin (an open range
# there, "torch>=1.10", lifts the ceiling as in a requirement file)
_DOCKERFILE = re.compile(r"^(?:dockerfile(?:\.[\w.-]+)?|[\w.-]+\.dockerfile)$", re.IGNORECASE)
_TORCH_IMAGE = re.compile(r"\bpytorch/pytorch:(\d+)\.(\d+)", re.IGNORECASE)
# A Dockerfile's build argument with a default (ARG PYTORCH="1.6.0"), which its FROM line names
# (FROM pytorch/pytorch:${PYTORCH}-cuda10.1-cudnn7-devel): see _docker_args
_DOCKER_ARG = re.compile(r"^[ \t]*ARG[ \t]+(\w+)[ \t]*=[ \t]*[\"']?([^\"'\s]+)", re.MULTILINE)
_NOQA = re.compile(r"#\s*noqa(?::\s*([\w, ]+))?", re.IGNORECASE)
_CLAUSE = re.compile(r"\s*(else|elif|except|finally|case)\b")


# A project's tests: a unit test's toy model, stub loader or file it wrote itself is not the
# training code the rules are about, and the advice never pays there (a folder named tests or
# test, testing, unittests or unit_tests, test_*.py, *_test.py, conftest.py).
_TEST_PATH = re.compile(r"(^|[/\\])(tests?|testing|unit_?tests?)[/\\]"
                        r"|(^|[/\\])(test_[^/\\]*|[^/\\]*_test|conftest)\.py$")


def _numpy_of_input(forward: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The forward calls ``.numpy()`` on its input (its first parameter, an item or attribute of
    it, or a name bound to such), with no ``.cpu()`` on the way: the input must be on the CPU
    (PTT016). Not another parameter: lengths for pack_padded_sequence are on the CPU beside a
    GPU input."""
    params = [x.arg for x in [*forward.args.posonlyargs, *forward.args.args] if x.arg != "self"]
    inputs = set(params[:1])
    body = [n for stmt in forward.body for n in ast.walk(stmt)]
    for n in body:  # x = data["audio"][k]: a name for (part of) an input
        if isinstance(n, ast.Assign) and isinstance(n.value, (ast.Subscript, ast.Attribute, ast.Name)):
            root = n.value
            while isinstance(root, (ast.Subscript, ast.Attribute)):
                root = root.value
            if isinstance(root, ast.Name) and root.id in inputs:
                inputs |= {t.id for t in n.targets if isinstance(t, ast.Name)}
    for n in body:
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "numpy":
            value = n.func.value
            while isinstance(value, (ast.Subscript, ast.Attribute, ast.Call)):
                if isinstance(value, ast.Call):
                    if not isinstance(value.func, ast.Attribute) or value.func.attr == "cpu":
                        break
                    value = value.func.value
                else:
                    value = value.value
            if isinstance(value, ast.Name) and value.id in inputs:
                return True
    return False


def _cuda_beyond_autocast_off(tree: ast.AST, text: str) -> bool:
    """PTT021: the file names CUDA or an accelerator outside its ``autocast(..., enabled=False)``
    calls (a decorator that keeps a function in full precision names "cuda" as autocast's device
    type, not as where the file's tensors go)."""
    lines = [line.encode() for line in text.splitlines(keepends=True)]  # ast's columns are bytes
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and _last_name(node.func) == "autocast" and any(
                k.arg == "enabled" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in node.keywords)):
            for i in range(node.lineno - 1, node.end_lineno):
                start = node.col_offset if i == node.lineno - 1 else 0
                end = node.end_col_offset if i == node.end_lineno - 1 else len(lines[i]) - 1
                lines[i] = lines[i][:start] + b" " * (end - start) + lines[i][end:]
    return _in_code(_ACCELERATOR, b"".join(lines).decode(errors="replace"))


def _in_code(pattern: re.Pattern, text: str) -> bool:
    """Whether ``pattern`` occurs on a line before any ``#`` (the same answer as searching
    ``^[^#\\n]*(pattern)`` line by line, in a third of the time: the line's start is read only
    where the pattern occurs). The first occurrence on a line decides: a later one has a longer
    prefix, which holds a ``#`` if the first's does."""
    for m in pattern.finditer(text):
        start = m.start()
        if "#" not in text[text.rfind("\n", 0, start) + 1:start]:
            return True
    return False


# a file named for ONNX (models_onnx.py, onnx_model.py): its modules are written for the export
_ONNX_NAME = re.compile(r"(^|[_.-])onnx([_.-]|$)", re.IGNORECASE)


def _named_for_onnx(path: str) -> bool:
    return "onnx" in path.lower() and bool(_ONNX_NAME.search(os.path.splitext(os.path.basename(path))[0]))


# PTT014: a script named for converting weights (convert_nest_flax.py, conver_params.py)
_CONVERSION_NAME = re.compile(r"(^|[_-])(conver(t|sion|ter)?|port)(s|ed)?([_-]|$)", re.IGNORECASE)


def _named_for_conversion(path: str) -> bool:
    return bool(_CONVERSION_NAME.search(os.path.splitext(os.path.basename(path))[0]))


# a script named for evaluation or inference (test.py, eval_coco.py, inference.py, predict.py)
_EVAL_NAME = re.compile(r"^(test|eval|evaluate|evaluation|validate|infer|inference|predict|demo)([_-]|$)",
                        re.IGNORECASE)


def _evaluation_script(path: str, text: str) -> bool:
    """PTT035: a script named for evaluation or inference that does not train (no backward()
    nor step()): DDP's launcher, sampler and gathering of the results do not pay for one pass."""
    stem = os.path.splitext(os.path.basename(path))[0]
    return bool(_EVAL_NAME.match(stem)) and not _in_code(_TRAINS, text)


def is_test_path(path: str) -> bool:
    """Whether ``path`` is a test module (its findings are not reported)."""
    return bool(_TEST_PATH.search(path))


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    col: int  # 1-based
    code: str
    message: str
    torchfix: str | None = None  # the TorchFix code when TorchFix's own visitor found it


# the errors a version fallback catches when the newer spelling is missing
_IMPORT_FALLBACK = frozenset({"ImportError", "ModuleNotFoundError", "AttributeError"})


def _import_bound(node: ast.Import | ast.ImportFrom) -> dict[str, str]:
    """The local names the import binds, each to what it names (``torch.cuda.amp.GradScaler``)."""
    if isinstance(node, ast.Import):
        return {a.asname: a.name for a in node.names if a.asname}
    if not node.module or node.level:
        return {}
    return {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}


def _deprecated_amp(name: str) -> bool:
    return name == "torch.cuda.amp" or name.startswith("torch.cuda.amp.")


def _amp_fallback(node: ast.Import | ast.ImportFrom, stack: list[ast.AST],
                  aliases: dict[str, str]) -> set[str]:
    """PTT005: the names an import in ``except ImportError`` (or ``AttributeError``) binds to
    ``torch.cuda.amp`` after the ``try`` imported the same name from torch's newer API
    (``try: from torch import GradScaler / except ImportError: from torch.cuda.amp import
    GradScaler``): the fallback runs only on a torch without the new name, where
    torch.cuda.amp is not deprecated; the name keeps what the ``try`` bound it to."""
    bound = {k: v for k, v in _import_bound(node).items() if _deprecated_amp(v)}
    if not bound or len(stack) < 3:
        return set()
    handler, trial = stack[-2], stack[-3]
    if not isinstance(handler, ast.ExceptHandler) or not isinstance(trial, ast.Try) or handler.type is None:
        return set()
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    if not any(_last_name(t) in _IMPORT_FALLBACK for t in types):
        return set()
    tried: dict[str, str] = {}
    for n in trial.body:
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            tried.update(_import_bound(n))
    return {k for k in bound if k in tried and tried[k].startswith("torch.") and not _deprecated_amp(tried[k])
            and aliases.get(k) == tried[k]}


def _last_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _places_on_cuda(func: ast.AST) -> bool:
    """PTT021: a function (not the functions nested in it) that puts a tensor on CUDA by name:
    ``.cuda()``, ``.to("cuda")``, ``device="cuda"`` (or ``"cuda:0"``)."""
    for n in _walk_own(func):
        if not isinstance(n, ast.Call):
            continue
        if isinstance(n.func, ast.Attribute) and n.func.attr == "cuda":
            return True
        to = isinstance(n.func, ast.Attribute) and n.func.attr == "to"
        for v in [*(n.args[:1] if to else []), *(k.value for k in n.keywords if k.arg == "device")]:
            if isinstance(v, ast.Constant) and isinstance(v.value, str) and re.fullmatch(r"cuda(:\d+)?", v.value):
                return True
    return False


def _walk_own(func: ast.AST):
    """The nodes of a function's body, not entering the functions, lambdas and classes in it."""
    stack = list(getattr(func, "body", []))
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(n))


def _returns_its_argument(func: ast.AST) -> bool:
    """PTT021: ``def collate(batch): return batch`` (a docstring aside)."""
    args = func.args
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return (len(args.args) == 1 and not args.vararg and not args.kwonlyargs and len(body) == 1
            and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Name)
            and body[0].value.id == args.args[0].arg)


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


_ENTERED: dict[type, bool] = {}


def _entered(kind: type) -> bool:
    """Whether the scan walks into a value of this type: an ast node with children to read."""
    known = _ENTERED.get(kind)
    if known is None:
        known = _ENTERED[kind] = issubclass(kind, ast.AST) and kind not in _AST_LEAVES
    return known


_AST_LEAVES = {ast.Name, ast.Constant, ast.Load, ast.Store, ast.Del, ast.Pass, ast.Break, ast.Continue,
               *ast.operator.__subclasses__(), *ast.cmpop.__subclasses__(), *ast.unaryop.__subclasses__(),
               *ast.boolop.__subclasses__(), ast.alias}


class _Scan:
    """One pass over the ``ast``: facts, and the pieces libcst must check."""

    STOP = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    LOOPS = (ast.For, ast.AsyncFor, ast.While)

    def __init__(self) -> None:
        self.facts = V.Facts()
        self.whole = False  # a top-level finding needs the whole file (libcst parses it all)
        self.pin_dict = False  # a dict literal sets 'pin_memory': True (passed on as **kwargs)
        self.cpu_roots: set[str] = set()  # names .cpu() is called on (x.cpu(), model.eval().cpu())
        self.saved_roots: set[str] = set()  # names torch.save saves (or saves a part of)
        self.saved: list[ast.expr] = []  # what each torch.save saves (its first argument)
        self.pieces: dict[int, ast.AST] = {}
        self.binds: list[tuple[str, ast.expr]] = []
        self.functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        self.text = ""
        self.prepared: set[str] = set()  # PTT021: names passed to a prepare() call (accelerate)
        self.accelerate_non_blocking = False  # DataLoaderConfiguration(non_blocking=True)
        self.peeks: dict[str, int] = {}  # PTT021: name -> next(iter(name)) outside loops
        self.collate_refs: set[str] = set()  # PTT021: functions named in a DataLoader's collate_fn
        self.formatted: list[tuple[ast.AST, ast.AST]] = []  # (loop, piece) of text formatted in a loop
        self.backward_loops: set[int] = set()  # loops whose body (or a closure in it) calls backward()
        # torch.no_grad / torch.inference_mode named in a function's body: (node, the functions around it)
        self.grad_free_refs: list[tuple[ast.expr, set[str]]] = []
        self.callers: dict[str, set[str | None]] = {}  # a called name -> the functions calling it
        self.call_counts: dict[str, int] = {}  # a called name -> its calls in the file
        self.with_callers: dict[str, set[str | None]] = {}  # ... calling it in a grad-free with
        self.path = ""  # the file's path (PTT023 counts the calls of its functions in the project)
        self.grad_text = False  # the text names no_grad or inference_mode (set with the text)
        self.numpy = False  # PTT014 can fire: the file names numpy
        self.formats = False  # PTT039 can fire: the file names CUDA and calls backward()
        self.amp_names: set[str] = set()  # local names bound to torch.cuda.amp or a name in it (PTT005)
        self.item_binds: list[tuple[str, ast.expr]] = []  # d["args"] = args: (d, args)
        self.item_keys: dict[int, str | None] = {}  # id(args) -> "args": the key it is bound to
        self.unpacked: list[tuple[str, ast.expr]] = []  # a, b = x, y: (a, x), (b, y)
        self.attr_binds: list[tuple[str, ast.expr]] = []  # self.x = v: (x, v) (PTT041's evidence)
        self.device_text = False  # PTT021: the file has a DataLoader and says device= or OnDevice
        self.placed: list[tuple[list[str], ast.expr]] = []  # PTT021: (names, value) where one may be placed
        # PTT012/PTT013: x = f(...) / x = self.f(...): (f, the function around the assignment)
        self.call_binds: list[tuple[str, ast.AST | None]] = []
        self.for_loops: list[ast.For] = []
        self.while_loops: list[ast.While] = []
        # PTT011: functions with a host read outside any loop of theirs (a training step's read?)
        self.step_reads: dict[int, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.hook_reads: dict[int, ast.FunctionDef | ast.AsyncFunctionDef] = {}  # reads in per-step hooks
        self.hook_defs: set[str] = set()  # per-step hook methods of hook classes (after_step...)
        self.other_defs: set[str] = set()  # functions of the same names elsewhere
        # pieces that depend on whole-file facts: (why, expression, the enclosing function or the loop)
        self.maybe: list[tuple[str, ast.expr, ast.AST | None]] = []
        self.spots: dict[str, list[tuple[int, int, int, int]]] = {k: [] for k in POSITIONED}

    def qualify(self, node: ast.expr) -> str | None:
        name = _dotted(node)
        if name is None:
            return None
        root, _, rest = name.partition(".")
        base = self.facts.aliases.get(root)
        return (base + ("." + rest if rest else "")) if base else name

    # which piece a rule needs, from the node's ancestors (innermost last)
    def _add(self, node: ast.AST | None) -> None:
        if node is not None:
            self.pieces[id(node)] = node

    @staticmethod
    def _stmt(stack: list[ast.AST]) -> ast.AST | None:
        return next((n for n in reversed(stack) if isinstance(n, ast.stmt)), None)

    def _loop(self, stack: list[ast.AST]) -> ast.AST | None:
        for n in reversed(stack):
            if isinstance(n, self.LOOPS):
                return n
            if isinstance(n, self.STOP):
                return None
        return None

    def _guard(self, stack: list[ast.AST]) -> ast.AST | None:
        """The outermost ``try`` or ``if`` around the node, within its function."""
        found = None
        for n in reversed(stack):
            if isinstance(n, self.STOP):
                break
            if isinstance(n, (ast.Try, ast.If)):
                found = n
        return found

    @staticmethod
    def _function(stack: list[ast.AST]) -> ast.AST | None:
        return next((n for n in reversed(stack) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)

    def _scope(self, func: ast.AST | None) -> None:
        """The enclosing function, or the whole file for top-level code (``func`` None)."""
        if func is None:
            self.whole = True
        else:
            self._add(func)

    def _branch(self, stack: list[ast.AST]) -> ast.AST | None:
        """The innermost ``if`` with an ``else`` (or ``elif``) around the node, within its function."""
        for n in reversed(stack):
            if isinstance(n, self.STOP):
                return None
            if isinstance(n, ast.If) and n.orelse:
                return n
        return None

    @staticmethod
    def _method_class(stack: list[ast.AST], names=("forward", "__init__")) -> ast.AST | None:
        """The class whose method (one of ``names``; any, for None) holds the node."""
        for i in range(len(stack) - 1, 0, -1):
            if isinstance(stack[i], (ast.FunctionDef, ast.AsyncFunctionDef)) and isinstance(stack[i - 1], ast.ClassDef):
                return stack[i - 1] if names is None or stack[i].name in names else None
        return None

    def walk(self, node: ast.AST, stack: list[ast.AST]) -> None:
        stack.append(node)
        kind = _AST_KIND.get(type(node))
        if kind is not None:
            self.spots[kind].append((node.lineno, node.col_offset, -node.end_lineno, -node.end_col_offset))
        if isinstance(node, ast.Call):
            self.call(node, stack)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self.imports(node, stack)
        elif isinstance(node, ast.Assign):
            self.assign(node, stack)
        elif isinstance(node, ast.AugAssign):
            loop = self._loop(stack)
            if loop is not None and isinstance(node.op, ast.Add):
                self.maybe.append(("lossy", node.value, self._function(stack)))
            if _writes_grad(node.target):
                self.facts.manual_grad = True
        elif isinstance(node, ast.For):
            self.for_loops.append(node)  # PTT021: where each loader's batches go
        elif isinstance(node, ast.While):
            self.while_loops.append(node)  # PTT011: step functions called in a loop
        elif isinstance(node, ast.ClassDef):
            if any((_dotted(b) or "").endswith("Module") for b in node.bases):
                self.facts.module_classes.add(node.name)
            elif all(_dotted(b) == "object" for b in node.bases) and not node.keywords:
                self.facts.plain_classes.add(node.name)  # PTT017: no module, no parameters
        elif isinstance(node, ast.Dict):
            if any(isinstance(k, ast.Constant) and k.value == "pin_memory" and isinstance(v, ast.Constant)
                   and v.value for k, v in zip(node.keys, node.values)):
                self.pin_dict = True
        elif isinstance(node, (ast.JoinedStr, ast.BinOp)):
            if self.formats and (isinstance(node, ast.JoinedStr) or (
                    isinstance(node.op, ast.Mod) and isinstance(node.left, (ast.Constant, ast.BinOp)))):
                self._formatting(stack)
        if isinstance(node, ast.ExceptHandler):
            if node.type is not None and "RuntimeError" in ast.dump(node.type):
                self._add(self._loop(stack))
        elif isinstance(node, ast.Subscript):
            sl = node.slice
            if (isinstance(sl, ast.Tuple) and sl.elts and isinstance(sl.elts[0], ast.Call)
                    and _last_name(sl.elts[0].func) == "arange"):
                self._add(self._stmt(stack))
        elif isinstance(node, ast.Attribute):
            if node.attr in ("no_grad", "inference_mode"):
                funcs = {n.name for n in stack if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                         and node not in n.decorator_list}
                if funcs:
                    self.grad_free_refs.append((node, funcs))
            if node.attr == "amp" and isinstance(node.value, ast.Attribute) and node.value.attr == "cuda":
                self._add(self._guard(stack) or self._stmt(stack))  # judged with a fallback around it
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.functions.append(node)
            if node.name in V.HOOK_METHODS:  # PTT011: a hook the trainer calls after every step
                parent = stack[-2] if len(stack) > 1 else None
                hook = isinstance(parent, ast.ClassDef) and any(
                    V.HOOK_BASE.search((_dotted(b) or "").rsplit(".", 1)[-1]) for b in parent.bases)
                (self.hook_defs if hook else self.other_defs).add(node.name)
            if any(_last_name(d.func if isinstance(d, ast.Call) else d) == "no_grad" for d in node.decorator_list):
                self._add(node)
            if self.amp_names and any(self._uses_amp(d) for d in node.decorator_list):
                self._add(self._guard(stack[:-1]) or node)  # @custom_fwd from torch.cuda.amp (PTT005)
        for field in node._fields:
            value = getattr(node, field, None)
            kind = type(value)
            if kind is list:
                for item in value:
                    if _entered(type(item)):
                        self.walk(item, stack)
            elif _entered(kind):
                self.walk(value, stack)
        stack.pop()

    def _top_loop(self, stack: list[ast.AST]) -> ast.AST | None:
        """The outermost loop around the node, within its function (or the file's top level)."""
        found = None
        for n in reversed(stack):
            if isinstance(n, self.STOP):
                break
            if isinstance(n, self.LOOPS):
                found = n
        return found

    def _formatting(self, stack: list[ast.AST]) -> None:
        """Text formatted in a loop: PTT039 reads the bindings of the function around it."""
        loop = self._loop(stack)
        if loop is not None:  # kept in finish() only when the loop calls backward()
            self.formatted.append((loop, self._function(stack) or self._top_loop(stack)))

    def imports(self, node: ast.Import | ast.ImportFrom, stack: list[ast.AST] | None = None) -> None:
        aliases = self.facts.aliases
        # PTT005: names this import rebinds to torch.cuda.amp only as an old torch's fallback
        kept = _amp_fallback(node, stack or [], aliases)
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    if a.asname not in kept:
                        aliases[a.asname] = a.name
                else:
                    root = a.name.split(".")[0]
                    aliases[root] = root
        else:
            aliases.update({k: v for k, v in _import_bound(node).items() if k not in kept})
        for a in node.names:  # `from torch.cuda.amp import custom_fwd`, `from torch.cuda import amp`
            local = a.asname or a.name.split(".")[0]
            if local not in kept and local != "torch" and _deprecated_amp(aliases.get(local) or ""):
                self.amp_names.add(local)
        module = getattr(node, "module", None) or ""
        if any(n.startswith("torch.distributed.rpc") for n in [module, *(a.name for a in node.names)]) or (
                module == "torch.distributed" and any(a.name == "rpc" for a in node.names)):
            self.facts.uses_rpc = True

    def _uses_amp(self, expr: ast.expr) -> bool:
        """``expr`` is a name imported from ``torch.cuda.amp`` or an attribute of one (the
        ``torch.cuda.amp.x`` spelling is seen as an attribute, in walk())."""
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        return isinstance(expr, ast.Name) and expr.id in self.amp_names

    def call(self, node: ast.Call, stack: list[ast.AST]) -> None:
        name = _last_name(node.func)
        if name is None:
            return
        if name == "DataLoader":  # PTT021: the functions its collate_fn names
            collate = next((k.value for k in node.keywords if k.arg == "collate_fn"),
                           node.args[6] if len(node.args) > 6 else None)
            if isinstance(collate, ast.Call) and _last_name(collate.func) == "partial" and collate.args:
                collate = collate.args[0]
            if isinstance(collate, ast.Lambda):
                self.collate_refs |= {n.func.id for n in ast.walk(collate.body)
                                      if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            elif isinstance(collate, ast.Name):
                self.collate_refs.add(collate.id)
        if self.grad_text:  # PTT013: who calls each function of a file that names no_grad
            func = self._function(stack)
            # PTT023: a call inside a grad-free ``with`` of its function runs without a graph
            caller = func.name if func is not None else None
            if _in_grad_free_with(stack):
                self.with_callers.setdefault(name, set()).add(caller)
                caller = _UNDER_GRAD_FREE
            self.callers.setdefault(name, set()).add(caller)
            self.call_counts[name] = self.call_counts.get(name, 0) + 1
        if self.amp_names and self._uses_amp(node.func):  # PTT005, with a fallback around it
            self._add(self._guard(stack) or self._stmt(stack))
        if name == "tensor" and self.numpy:  # PTT014 judges it with the loop or per-sample function
            func = self._function(stack)
            self._add(self._loop(stack) or (func if func is not None and V._PER_SAMPLE.search(func.name)
                                            else None) or self._stmt(stack))
        elif name == "DataParallel":
            self._add(self._guard(stack) or self._stmt(stack))  # PTT035 reads the branches around it
            func = self._function(stack)
            if func is not None and (self.facts.second_order or "create_graph" in self.text):
                self._add(func)  # ... and the function's second-order adaptation of the module
        elif name in ("set_detect_anomaly", "detect_anomaly"):
            self._add(self._guard(stack) or self._stmt(stack))  # PTT034 reads the ifs around it
        elif name == "Variable":  # PTT007 reads its function (a penalty's leaf), or the if around it
            self._add(self._function(stack) or self._guard(stack) or self._stmt(stack))
        elif name in STMT_CALLS:
            self._add(self._stmt(stack))
        if name in SCOPE_CALLS:
            self._scope(self._function(stack))
            if name in ("load", "load_state_dict"):  # PTT001/PTT003 read the class's other methods
                self._add(self._method_class(stack, names=None))
        if name == "format" and self.formats:
            self._formatting(stack)
        if name in ("prepare", "prepare_data_loader") and isinstance(node.func, ast.Attribute):
            for a in node.args:  # prepare(net, opt, loader), prepare(self.loader)
                if isinstance(a, ast.Name):
                    self.prepared.add(a.id)
                elif isinstance(a, ast.Attribute) and _dotted(a.value) == "self":
                    self.prepared.add(a.attr)
        elif name == "DataLoaderConfiguration" and any(
                k.arg == "non_blocking" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in node.keywords):
            self.accelerate_non_blocking = True
        elif (name == "next" and isinstance(node.func, ast.Name) and len(node.args) == 1
              and isinstance(node.args[0], ast.Call) and _last_name(node.args[0].func) == "iter"
              and len(node.args[0].args) == 1 and isinstance(node.args[0].args[0], ast.Name)
              and self._loop(stack) is None):
            peeked = node.args[0].args[0].id
            self.peeks[peeked] = self.peeks.get(peeked, 0) + 1
        if (name.endswith("_") and isinstance(node.func, ast.Attribute)
                and _writes_grad(node.func.value)):  # p.grad.add_(g)
            self.facts.manual_grad = True
        if name == "cpu" and isinstance(node.func, ast.Attribute):
            root = _root(node.func.value)
            if root:
                self.cpu_roots.add(root)
        elif name == "save" and node.args and self.qualify(node.func) == "torch.save":
            first = node.args[0]
            if any(isinstance(n, ast.Call) and _last_name(n.func) == "cpu" for n in ast.walk(first)):
                self.facts.saves_from_cpu = True
            elif _root(first):
                self.saved_roots.add(_root(first))
            self.saved.append(first)
            func = self._function(stack)
            if isinstance(first, ast.Name) and func is not None and _maybe_not_module(first.id, func):
                self._add(func)  # PTT004 judges the name with the function that binds it
            elif func is not None and "torch.save" in (ast.get_docstring(func, clean=False) or ""):
                self._add(func)  # ... or the save with the docstring that documents its format
            # ... and the save with the if-else around it (the other branch may save the weights)
            self._add(self._branch(stack))
        elif name == "isinstance" and len(node.args) == 2 and any(
                (_dotted(t) or "").rsplit(".", 1)[-1] == "Namespace"
                for t in (node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]])):
            self.facts.reads_namespaces = True
        if name == "Linear":  # PTT032: the literal widths each Linear takes in and gives out
            sizes = {**dict(zip(("in_features", "out_features"), node.args[:2])),
                     **{k.arg: k.value for k in node.keywords if k.arg in ("in_features", "out_features")}}
            for key, value in sizes.items():
                if isinstance(value, ast.Constant) and type(value.value) is int:
                    (self.facts.linear_inputs if key == "in_features" else self.facts.linear_outputs).add(value.value)
        if name in FUNCTION_CALLS:
            self._add(self._function(stack))
        if name == "float" and isinstance(node.func, ast.Name) and len(node.args) == 1 \
                and isinstance(node.args[0], ast.Name):
            self._add(self._loop(stack))  # PTT011: float(loss) of the loss the loop backpropagates
        if name in LOOP_CALLS:
            loop = self._loop(stack)
            self._add(loop)
            func = self._function(stack) if name in V.HOST_READS and not node.args else None
            if func is not None:
                if loop is None:
                    self.step_reads[id(func)] = func
                if func.name in V.HOOK_METHODS:
                    self.hook_reads[id(func)] = func
        elif name in ("to", "cuda"):
            loop = self._loop(stack)
            if isinstance(loop, (ast.For, ast.AsyncFor)):
                # with the if around the loop, if any: PTT022 reads which device its branch is for
                guard = self._guard(stack)
                outer = guard is not None and stack.index(guard) < stack.index(loop)
                self.maybe.append(("loader", loop.iter, guard if outer else loop))
        elif name == "append" and node.args:
            loop = self._loop(stack)
            if loop is not None:
                self.maybe.append(("lossy", node.args[0], self._function(stack)))
        elif name == "step" and any(isinstance(n, ast.If) and any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod)
                                                                for b in ast.walk(n.test)) for n in stack):
            self._add(self._loop(stack))
        if name == "backward":
            self.backward_loops |= {id(n) for n in stack if isinstance(n, self.LOOPS)}
            receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
            if isinstance(receiver, ast.Name):
                self.facts.backward_receivers.add(receiver.id)
                if node.args and "loss" not in receiver.id.lower():  # accelerator.backward(loss)
                    self.facts.backward_engines.add(receiver.id)
            func = self._function(stack)
            if func is None:
                self.facts.module_backward = True
            elif self._loop(stack) is not None:
                self._add(func)
        if name in ("memory_allocated", "max_memory_allocated"):  # judged with the ifs around it
            self._add(self._function(stack) or next((n for n in stack if isinstance(n, ast.stmt)), None))
        if name in CLASS_CALLS:
            self._add(self._method_class(stack, ("forward",)))

    def assign(self, node: ast.Assign, stack: list[ast.AST]) -> None:
        value = node.value
        if self.device_text and isinstance(value, (ast.Call, ast.Attribute, ast.Subscript)):
            names = [e.id for t in node.targets for e in ([t] if isinstance(t, ast.Name) else getattr(t, "elts", []))
                     if isinstance(e, ast.Name)]
            if names:
                self.placed.append((names, value))
        if isinstance(value, ast.Call):
            func = value.func
            if isinstance(func, ast.Name):
                self.call_binds.append((func.id, self._function(stack)))
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
                self.call_binds.append((func.attr, self._function(stack)))
        for t in node.targets:
            if isinstance(t, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                    and len(t.elts) == len(value.elts):  # vocab, opt = ckpt["vocab"], ckpt["opt"]
                self.unpacked += [(e.id, v) for e, v in zip(t.elts, value.elts) if isinstance(e, ast.Name)]
            if isinstance(t, ast.Name):
                self.binds.append((t.id, value))
                if (isinstance(value, (ast.Dict, ast.DictComp)) or (
                        isinstance(value, ast.Call) and self.qualify(value.func) in V.DICT_TYPES)) \
                        and not any(isinstance(n, self.STOP) for n in stack):
                    self.facts.top_dicts.add(t.id)  # PTT004: a dict of tensors, no module
                if isinstance(value, ast.Call) and _last_name(value.func) == "TensorDataset":
                    self.facts.tensor_datasets.add(t.id)  # PTT021: its tensors may be on the GPU
            elif isinstance(t, ast.Subscript):
                loop = self._loop(stack)
                if (isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)
                        and _last_name(loop.iter.func) == "range"):
                    # PTT033, with the ifs around the loop: ``isinstance(x, list)`` says x is
                    # no tensor there
                    self._add(_isinstance_guard(stack, loop) or loop)
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                self.attr_binds.append((t.attr, value))
                if isinstance(value, (ast.List, ast.ListComp, ast.Call)):
                    self._add(self._method_class(stack, ("__init__",)))
                if isinstance(value, ast.Call) and _last_name(value.func) == "DataLoader":
                    self.binds.append((t.attr, value))
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                self.item_binds.append((t.value.id, value))
                key = t.slice
                self.item_keys[id(value)] = key.value if (
                    isinstance(key, ast.Constant) and isinstance(key.value, str)) else None
            if _writes_grad(t):  # p.grad = p.grad + g, p.grad[...] = g
                self.facts.manual_grad = True
        if isinstance(value, ast.Call) and _last_name(value.func) == "detach":
            self._add(self._function(stack) or self._stmt(stack))

    def _loader_uses(self) -> None:
        """PTT021: the loaders of the file whose loops hand the batches to NumPy (an ONNX
        runtime's inputs) and never move them with torch: they never reach a GPU through torch."""
        uses: dict[str, list[tuple[bool, bool]]] = {}
        for loop in self.for_loops:
            it = loop.iter
            while isinstance(it, ast.Call) and it.args and _dotted(it.func) in V.LOADER_WRAPPERS:
                it = it.args[0]
            name = _dotted(it)
            if name in self.facts.loader_names:
                uses.setdefault(name, []).append(_batch_use(loop))
        self.facts.numpy_loaders = {n for n, u in uses.items()
                                    if not any(m for m, _ in u) and any(np_ for _, np_ in u)}
        # loaders whose every loop leaves its batches unread (a benchmark of loading that counts
        # or times them), named nowhere else than where they are bound and looped over
        idle: dict[str, int] = {}
        for loop in self.for_loops:
            name, batch = _loop_batch(loop)
            if name in self.facts.loader_names:
                body = [n for stmt in [*loop.body, *loop.orelse] for n in ast.walk(stmt)]
                idle[name] = idle.get(name, 0) + 1 if idle.get(name, 0) >= 0 and batch is not None and (
                    _names_read(batch).isdisjoint(n.id for n in body if isinstance(n, ast.Name))
                    and all(_dotted(n.func) in _COUNTING_CALLS for n in body if isinstance(n, ast.Call))
                ) else -1
        binds = [n for n, v in self.binds if isinstance(v, ast.Call)]
        self.facts.idle_loaders = {n for n, k in idle.items() if k > 0 and len(re.findall(
            rf"\b{re.escape(n)}\b", self.text)) == k + binds.count(n)}
        f = self.facts
        if self.collate_refs:
            defs: dict[str, list[ast.AST]] = {}
            for func in self.functions:
                if func.name in self.collate_refs:
                    defs.setdefault(func.name, []).append(func)
            for name, funcs in defs.items():
                if any(_places_on_cuda(func) for func in funcs):
                    f.cuda_collates.add(name)
                elif all(_returns_its_argument(func) for func in funcs):
                    f.identity_collates.add(name)
        # PTT011: loaders whose every binding in the file is torch's own DataLoader, over no
        # TensorDataset (its tensors may be on the GPU), with no collate_fn of the file that puts
        # tensors on CUDA and none written inline, never handed to a prepare() call: the batches
        # they give are on the host
        loader_binds: dict[str, list[ast.expr]] = {}
        for name, value in self.binds:
            if name in f.loader_names:
                loader_binds.setdefault(name, []).append(value)
        f.host_loaders = {n for n, values in loader_binds.items()
                          if n not in self.prepared and all(self._host_loader(v) for v in values)}
        f.accelerate_copies = not self.accelerate_non_blocking and any(
            v == "accelerate" or v.startswith("accelerate.") for v in f.aliases.values())
        if f.accelerate_copies:
            f.prepared_loaders = self.prepared & f.loader_names
        # read only by next(iter(x)), outside loops: one batch, once (a word count of the file's
        # text: each other mention, a comment included, keeps the loader flagged)
        f.peeked_loaders = {n for n, k in self.peeks.items() if n in f.loader_names
                            and len(re.findall(rf"\b{re.escape(n)}\b", self.text)) == k + 1}

    def _host_loader(self, value: ast.expr) -> bool:
        """PTT011: ``DataLoader(dataset, ...)`` of torch itself, whose dataset is no TensorDataset
        and whose collate_fn, if any, is a plain name of no function of the file that puts
        tensors on CUDA."""
        if not (isinstance(value, ast.Call) and self.qualify(value.func) in _TORCH_LOADERS):
            return False
        collate = next((k.value for k in value.keywords if k.arg == "collate_fn"),
                       value.args[6] if len(value.args) > 6 else None)
        data = next((k.value for k in value.keywords if k.arg == "dataset"), value.args[0] if value.args else None)
        return (collate is None or (isinstance(collate, ast.Name) and collate.id not in self.facts.cuda_collates)) \
            and not (isinstance(data, ast.Name) and data.id in self.facts.tensor_datasets) \
            and not (isinstance(data, ast.Call) and _last_name(data.func) == "TensorDataset")

    def _module_value(self, attr: str, value: ast.expr, f: V.Facts) -> bool:
        """PTT041: a value bound to ``self.<attr>`` that is evidently a module: a construction
        of a torch.nn class or of a module class of the file, of another class where the
        attribute is named as a module (``self.model = Net(cfg)``), or a module itself."""
        if isinstance(value, ast.Call):
            last = _last_name(value.func) or ""
            q = self.qualify(value.func) or ""
            if last in f.module_classes or (q.startswith("torch.nn.") and last[:1].isupper()):
                return True
            if (last[:1].isupper() and not q.startswith(("torch.", "numpy.", "collections."))
                    and _MODULE_WORD.search(attr)):
                return True
        return _whole_module(value, f.module_names, f.state_names, f.module_attrs)

    def _grad_free(self) -> None:
        """The functions of this file that return a grad-free mode (a decorator factory that picks
        ``inference_mode`` or ``no_grad`` by torch version), and those decorated with one."""
        if not self.grad_text:
            return
        f = self.facts
        for node, funcs in self.grad_free_refs:
            if self.qualify(node) in V.GRAD_FREE:
                f.grad_free_factories |= funcs
        for func in self.functions:
            for d in func.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                q = self.qualify(target) if isinstance(target, (ast.Name, ast.Attribute)) else None
                last = (q or "").rsplit(".", 1)[-1]
                if q in V.GRAD_FREE or last in f.grad_free_factories or V.GRAD_FREE_NAME.search(last):
                    f.grad_free_functions.add(func.name)
        # functions of this file called only from grad-free ones (a helper of a @no_grad search),
        # or only from such helpers, a few calls deep
        # and those called only inside grad-free ``with`` blocks (or from such functions), when
        # the project calls them nowhere else (its other files, tests aside)
        shielded = {func.name for func in self.functions
                    if _UNDER_GRAD_FREE in self.callers.get(func.name, ())}
        if shielded:
            counts = project_calls(self.path)
            shielded = {n for n in shielded if counts.get(n, 0) <= self.call_counts.get(n, 0)}
        callees: set[str] = set()
        for _ in range(4):
            known = f.grad_free_functions | callees
            grown = {func.name for func in self.functions if self.callers.get(func.name)
                     and self.callers[func.name] <= known | {_UNDER_GRAD_FREE}
                     and (_UNDER_GRAD_FREE not in self.callers[func.name] or func.name in shielded
                          or self.with_callers[func.name] <= known)}
            if grown == callees:
                break
            callees = grown
        f.grad_free_callees = callees

    def _project_shielded(self) -> None:
        """PTT023: the functions of this file (with an .eval() in the file) every call of whose
        name in the project (tests aside) lies inside a grad-free with block or a function under
        a grad-free decorator (a model's inference() method called from a trainer's test loop
        under torch.no_grad()); not forward(), dunder methods nor a framework's *_step hooks,
        which are run without a call by name."""
        if ".eval()" not in self.text or not self.path:
            return
        names = {func.name for func in self.functions if func.name != "forward" and not func.name.startswith("__")
                 and not func.name.endswith("_step")} - self.facts.grad_free_callees
        if not names:
            return
        counts, guarded = project_guarded_calls(self.path)
        self.facts.grad_free_callees |= {n for n in names if counts.get(n, 0) > 0
                                         and guarded.get(n, 0) >= counts[n]}

    def _hooks(self) -> None:
        """PTT011: the per-step hook methods with a host read (names no other function here has)."""
        self.facts.hook_methods = self.hook_defs - self.other_defs
        for f in self.hook_reads.values():
            if f.name in self.facts.hook_methods:
                self._add(f)

    def _step_functions(self) -> None:
        """PTT011: functions that read a value on the host outside their loops, run ``backward()``
        and an optimizer's ``step()`` outside their loops (one call is one training step), and are
        called in a loop of this file: the read happens on every step."""
        steps = {id(f): f for f in self.step_reads.values() if _one_step(f)}
        if not steps:
            return
        names = {f.name for f in steps.values()}
        looped, decided = set(), set()
        for loop in [*self.for_loops, *self.while_loops]:
            nodes = list(ast.walk(loop))
            called = {_last_name(n.func) for n in nodes if isinstance(n, ast.Call)} & names
            if not called:
                continue
            # a call counts for its innermost loop (each nested loop is in the lists too), and
            # not for a loop over epochs: one call per epoch is one full-batch step
            if not _epoch_loop(loop):
                looped |= {_last_name(n.func) for n in _outside_inner_loops(loop)
                           if isinstance(n, ast.Call)} & names
            # what the loop tests (if, while, assert): a step's value read there decides something,
            # and the read in the step is the one that decision needs
            tests = [n.test for n in nodes if isinstance(n, (ast.If, ast.While, ast.Assert, ast.IfExp))]
            tested = set().union(*(_names_read(t) for t in tests)) if tests else set()
            for n in nodes:
                if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    if not set().union(*(_names_read(t) for t in targets)).isdisjoint(tested):
                        decided |= {_last_name(c.func) for c in ast.walk(n.value) if isinstance(c, ast.Call)}
            for t in tests:
                decided |= {_last_name(c.func) for c in ast.walk(t) if isinstance(c, ast.Call)}
        looped -= decided
        self.facts.step_functions = looped
        for f in steps.values():
            if f.name in looped:
                self._add(f)

    def finish(self) -> None:
        """Facts about bindings need the whole import table: resolved once the walk is done."""
        for spots in self.spots.values():
            spots.sort()
        lossy = set(self.facts.backward_receivers)
        names = {n for n, _ in self.binds}
        lossy |= {n for n in names if "loss" in n.lower()}
        # each value walked once, and only when a name holds a loss (else none can grow)
        reads = [(n, _names_read(v)) for n, v in self.binds] if lossy else []
        for _ in range(3):  # names bound from a loss, a few hops deep
            grew = {n for n, read in reads if n not in lossy and not read.isdisjoint(lossy)}
            if not grew:
                break
            lossy |= grew
        for alias, target in DEFAULT_ALIASES.items():
            self.facts.aliases.setdefault(alias, target)
        if self.cpu_roots & self.saved_roots:
            self.facts.saves_from_cpu = True
        f = self.facts
        for name, value in self.binds:
            if isinstance(value, ast.Call):
                q = self.qualify(value.func) or ""
                last = _last_name(value.func) or ""
                if q.startswith("numpy.") or last == "numpy":
                    f.numpy_names.add(name)
                elif q.endswith("DataLoader"):
                    f.loader_names.add(name)
                    pin = next((k.value for k in value.keywords if k.arg == "pin_memory"), None)
                    star = any(k.arg is None for k in value.keywords)
                    if (pin is not None and not (isinstance(pin, ast.Constant) and not pin.value)) or (
                            pin is None and star and self.pin_dict):
                        f.pinned_loaders.add(name)
                elif q == "torch.load":
                    mmap = next((k.value for k in value.keywords if k.arg == "mmap"), None)
                    if not (isinstance(mmap, ast.Constant) and mmap.value):
                        f.load_names.add(name)
                elif last in f.module_classes or (q.startswith("torch.nn.") and last[:1].isupper()):
                    f.module_names.add(name)
                if (q.startswith("torchvision.datasets.") or last.endswith(V.IMAGE_DATASETS)
                        or any(k.arg == "transform" for k in value.keywords)):
                    f.decoding_datasets.add(name)
            elif isinstance(value, (ast.List, ast.ListComp)):
                elts = value.elts if isinstance(value, ast.List) else [value.elt]
                if elts and all(isinstance(e, ast.Call) and _last_name(e.func) == "Parameter" for e in elts):
                    f.param_list_names.add(name)
        text_has = self.text
        self._grad_free()
        self._project_shielded()
        tensors: dict[str, bool] = {}
        for name, value in self.binds:
            torchy = isinstance(value, ast.Call) and (
                V.returns_tensor(self.qualify(value.func)) or _last_name(value.func) in _TENSOR_METHODS)
            tensors[name] = tensors.get(name, True) and torchy
        f.tensor_names = {n for n, t in tensors.items() if t} - f.numpy_names
        f.state_names = {n for n, v in self.binds
                         if isinstance(v, ast.Call) and "state_dict" in (_last_name(v.func) or "")}
        if "parse_args" in text_has or "Namespace" in text_has:
            for name, value in self.binds:
                if isinstance(value, ast.Call) and (_last_name(value.func) in ("parse_args", "Namespace")):
                    f.namespace_names.add(name)
        f.module_names -= f.state_names
        # PTT041: the attributes (self.x) the file binds to a module: a construction of a torch.nn
        # class or of a module class (the file's, or any capitalised class), or a value that is
        # a module itself (self.model = model, deepcopy(model)); never one also bound to another
        # value (self.elite_models = list(indices))
        evidence: dict[str, bool] = {}
        for attr, value in self.attr_binds:
            evidence["self." + attr] = evidence.get("self." + attr, True) and self._module_value(attr, value, f)
        f.module_attrs = {a for a, ok in evidence.items() if ok}
        # PTT001: DeepSpeed's helpers naming per-rank checkpoint files (get_model_state_file)
        f.names_state_files = "_state_file" in text_has or "optim_files" in text_has
        if "__version__" in text_has:  # PTT001: names bound to torch's version or to a test of it
            # each value walked once: (name, names it reads, reads torch's version itself)
            reads = []
            for n, v in self.binds:
                found: list[ast.Attribute] = []
                read = _names_read(v, _VERSION_ATTRS, found)
                reads.append((n, read, any(self.qualify(a) in V.TORCH_VERSION_NAMES for a in found)))
            versions: set[str] = {n for n, _, direct in reads if direct}
            while True:
                more = {n for n, read, _ in reads if n not in versions and not read.isdisjoint(versions)}
                if not more:
                    break
                versions |= more
            f.torch_version_names = versions
        # names bound (somewhere in the file) to an entry of a container (opt = ckpt["opt"]), a
        # dict or list, or to such a name: not a Namespace or a module object, as far as the
        # file shows (which of a name's bindings a saved dict holds is not known)
        entries = (ast.Subscript, ast.Dict, ast.DictComp, ast.List, ast.ListComp)
        pairs = [*self.binds, *self.unpacked]
        f.plain_names = {n for n, v in pairs if isinstance(v, entries)}
        for _ in range(3):  # avg = weights, weights = ckpt["model"]: a few hops
            f.plain_names |= {n for n, v in pairs if isinstance(v, ast.Name) and v.id in f.plain_names}
        for name, value in [*self.binds, *self.item_binds]:
            if isinstance(value, ast.Dict):
                values = value.values
                keys = [k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None
                        for k in value.keys]
            else:
                values = [value] if (name, value) in self.item_binds else []
                keys = [self.item_keys.get(id(value))]
            for k, v in zip(keys, values):
                if isinstance(v, ast.Name) and v.id in f.plain_names:
                    continue  # PTT041/PTT042: a name also bound to another value (a loaded entry)
                if isinstance(v, ast.Name) and v.id in f.namespace_names:
                    f.namespace_dicts.add(name)
                if _whole_module(v, f.module_names, f.state_names, f.module_attrs):
                    f.module_dicts.add(name)
                    f.module_keys.setdefault(name, set()).add(k)
        f.pickles_objects = any(_pickles_object(v, f) for v in self.saved)
        for name, value in self.binds:
            if isinstance(value, (ast.List, ast.Tuple, ast.Set)) and any(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) and V.NUMPY_STATE.search(e.value)
                    for e in value.elts):
                f.state_key_names.add(name)
        for loop, piece in self.formatted:
            if id(loop) in self.backward_loops:
                self._add(piece)
        self._step_functions()
        self._hooks()
        self._loader_uses()
        lossy_scopes: set[int] = set()
        for why, expr, where in self.maybe:
            if why == "lossy" and (_mentions_any(expr, lossy) or _calls_loss(expr)):
                self._scope(where)
                lossy_scopes.add(id(where))
                continue
            if why == "loader":  # (where: the loop, or the if or try around it)
                loop, it = where, expr
                while isinstance(it, ast.Call) and it.args and _dotted(it.func) in V.LOADER_WRAPPERS:
                    it = it.args[0]
                name = _dotted(it) or ""
                if name in f.loader_names or "loader" in name.rsplit(".", 1)[-1].lower():
                    self._add(loop)
        if lossy_scopes:
            self._host_returns(lossy_scopes)
        if self.placed:
            self._device_datasets()

    def _device_datasets(self) -> None:
        """PTT021: names bound to what a call given a device builds (``get_tasksets(...,
        device=device)``, ``Dataset(root, device="cuda")``; not ``device="cpu"``), or a class or
        function named for living on the device (``OnDeviceDataset(...)``), or to an attribute or
        item of such a value (``tasks.dataset``), a few hops deep: its tensors may be on the GPU."""
        found: set[str] = set()
        for _ in range(3):
            grown = set(found)
            for names, value in self.placed:
                if _on_device(value) or (not isinstance(value, ast.Call) and _root_name(value) in found):
                    grown.update(names)
            if grown == found:
                break
            found = grown
        self.facts.device_datasets = found

    def _host_returns(self, scopes: set[int]) -> None:
        """PTT012/PTT013: what the functions of this file called (and bound to a name) in code
        that keeps a running total or list of a loss return without a graph (``V._host_returns``).
        Their bodies may lie outside every piece (blanked for libcst), so each is parsed alone."""
        wanted = {name for name, where in self.call_binds if id(where) in scopes}
        defs: dict[str, list[ast.AST]] = {}
        for func in self.functions:
            if func.name in wanted:
                defs.setdefault(func.name, []).append(func)
        if not defs:
            return
        lines = self.text.splitlines(keepends=True)
        for name, funcs in defs.items():
            found: frozenset[int | None] | None = None
            for func in funcs:
                if not any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(func)):
                    found = frozenset()
                    break
                segment = "".join(lines[func.lineno - 1:func.end_lineno])
                indented = func.col_offset > 0
                try:
                    tree = cst.parse_module("if 1:\n" + segment if indented else segment)
                except cst.ParserSyntaxError:
                    found = frozenset()
                    break
                node = tree.body[0].body.body[0] if indented else tree.body[0]
                if not isinstance(node, cst.FunctionDef):
                    found = frozenset()
                    break
                got = V._host_returns(node)
                found = got if found is None else found & got
            if found:
                self.facts.host_returns[name] = found


_UNDER_GRAD_FREE = "\0grad-free with"  # a caller: a grad-free ``with`` block of a function


def _in_grad_free_with(stack: list[ast.AST]) -> bool:
    """The innermost function's body holds the node inside ``with torch.no_grad():`` (or
    ``inference_mode()``, a context manager named for one)."""
    for n in reversed(stack):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return False
        if isinstance(n, (ast.With, ast.AsyncWith)) and any(
                isinstance(i.context_expr, ast.Call) and V.GRAD_FREE_NAME.search(
                    _last_name(i.context_expr.func) or "") for i in n.items):
            return True
    return False


def _one_step(func: ast.AST) -> bool:
    """The function's own body, outside its loops and nested functions, calls ``backward()`` (or
    a loss scaler) and an optimizer's ``step()``: each call is one training step."""
    backward = step = False
    todo = list(func.body)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef,
                          ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            backward |= n.func.attr == "backward"
            step |= n.func.attr == "step" and V.optimizer_step_receiver(_dotted(n.func.value) or "",
                                                                       bool(n.args))
        todo.extend(ast.iter_child_nodes(n))
    return backward and step


_PLAIN_CALLS = {"print", "len", "enumerate", "zip", "range", "list", "tuple", "dict", "str", "int", "float",
                "sorted", "isinstance", "min", "max"}


def _raw(expr: ast.AST, raw: set[str]) -> bool:
    """A batch value as the loader gave it: a name of ``raw``, or an item or attribute of one."""
    while isinstance(expr, (ast.Subscript, ast.Attribute)):
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id in raw


# PTT021: the calls a loop that only counts or times its batches makes (no model, no step)
_TORCH_LOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
_COUNTING_CALLS = frozenset({"print", "len", "int", "float", "str", "round", "time.time", "time.perf_counter",
                             "time.monotonic", "perf_counter", "time"})


def _loop_batch(loop: ast.For) -> tuple[str | None, ast.expr | None]:
    """PTT021: the loader a loop reads (``for b in x``, ``for i, b in enumerate(x)``,
    ``for b in tqdm(x)``) and the target its batches are bound to; None where it cannot tell."""
    it, target = loop.iter, loop.target
    while (isinstance(it, ast.Call) and len(it.args) == 1
           and _dotted(it.func) in ("tqdm", "tqdm.tqdm", "enumerate")):
        if _dotted(it.func) == "enumerate":
            if not (isinstance(target, ast.Tuple) and len(target.elts) == 2):
                return None, None
            target = target.elts[1]
        it = it.args[0]
    return _dotted(it), target


def _batch_use(loop: ast.For) -> tuple[bool, bool]:
    """Whether a loop's batches may be moved by torch: ``.to(...)`` or ``.cuda()`` of a value
    computed from them, or a batch handed as it is to a function (which may move it); and
    whether a batch, as the loader gave it, is handed to NumPy (``batch["x"].numpy()``)."""
    body = [n for stmt in loop.body for n in ast.walk(stmt)]
    batch = _names_read(loop.target)
    raw = set(batch)
    for _ in range(3):
        for n in body:
            if isinstance(n, ast.Assign) and not _names_read(n.value).isdisjoint(batch):
                for t in n.targets:
                    batch |= _names_read(t)
                    if _raw(n.value, raw):
                        raw |= _names_read(t)
    moved = numpy = False
    for n in body:
        if not isinstance(n, ast.Call):
            continue
        if isinstance(n.func, ast.Attribute) and not _names_read(n.func.value).isdisjoint(batch):
            moved |= n.func.attr in ("to", "cuda")
            numpy |= n.func.attr == "numpy" and _raw(n.func.value, raw)
        if _last_name(n.func) not in _PLAIN_CALLS and any(
                _raw(a, raw) for a in [*n.args, *(k.value for k in n.keywords)]):
            moved = True
    return moved, numpy


_TENSOR_METHODS = {"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "clone", "zeros_like",
                   "ones_like", "empty_like", "full_like"}
_MODULE_WORD = re.compile(r"(^|_)(model|net|module|network)s?\d*$", re.IGNORECASE)


def _whole_module(value: ast.AST, module_names: set[str], state_names: set[str] = frozenset(),
                  module_attrs: set[str] | None = None) -> bool:
    """A module object itself (``model``, ``deepcopy(model)``, ``model.half()``), not its weights.
    ``module_attrs``: where given, an attribute of ``self`` is a module only if it is one of
    them (bound to a module in the file) or the ``.module`` of a wrapper; a name alone is no
    evidence for an attribute (``self.elite_models``, a list of indices)."""
    while isinstance(value, ast.Call):
        name = _last_name(value.func) or ""
        if name in ("deepcopy", "copy") and value.args:
            value = value.args[0]
        elif name in ("half", "float", "cpu", "eval") and isinstance(value.func, ast.Attribute):
            value = value.func.value
        elif name.startswith("de_parallel") or name == "unwrap_model":
            if not value.args:
                return False
            value = value.args[0]
        else:
            return False
    wrapped = False
    while isinstance(value, ast.Attribute) and value.attr == "module":  # model.module (DDP)
        value, wrapped = value.value, True
    name = _dotted(value) if isinstance(value, (ast.Name, ast.Attribute)) else None
    if not name or name.split(".", 1)[0] in V._SETTINGS or name.split(".")[:2] == ["self", "args"]:
        return False
    if name in state_names:
        return False
    if module_attrs is not None and name.startswith("self.") and not wrapped:
        return name in module_attrs
    return bool(_MODULE_WORD.search(name.rsplit(".", 1)[-1])) or name in module_names


_STATE_PART = re.compile(r"^(weight|bias|data|grad)$|state|param|buffer", re.IGNORECASE)


def _pickles_object(value: ast.AST, f: V.Facts) -> bool:
    """``torch.save`` of an object the weights-only loader refuses: a whole module, a submodule
    (``self.model.head``), a Namespace, or a dict holding a module or a Namespace."""
    if isinstance(value, ast.Name) and (value.id in f.namespace_names or value.id in f.module_dicts
                                        or value.id in f.namespace_dicts):
        return True
    if _whole_module(value, f.module_names, f.state_names):
        return True
    if isinstance(value, ast.Attribute) and not _STATE_PART.search(value.attr):
        parts = (_dotted(value) or "").split(".")[:-1]
        return any(_MODULE_WORD.search(p) for p in parts if p not in V._SETTINGS)
    return False


def _root(node: ast.AST) -> str | None:
    """``model`` for ``model.eval().cpu()``, ``model.state_dict()``, ``model.layers[0]``."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _writes_grad(target: ast.AST) -> bool:
    """``p.grad``, ``p.grad.data``, ``p.grad[i]``: a write into a gradient by hand."""
    while isinstance(target, ast.Subscript):
        target = target.value
    while isinstance(target, ast.Attribute):
        if target.attr == "grad":
            return True
        target = target.value
    return False


def _isinstance_guard(stack: list[ast.AST], loop: ast.AST) -> ast.AST | None:
    """The outermost ``if`` around ``loop`` (within its function) when one of the ifs around it
    tests ``isinstance``; else None."""
    found, tested = None, False
    for n in reversed(stack[:stack.index(loop)] if loop in stack else []):
        if isinstance(n, _Scan.STOP):
            break
        if isinstance(n, ast.If):
            found = n
            tested = tested or any(isinstance(c, ast.Call) and _last_name(c.func) == "isinstance"
                                   for c in ast.walk(n.test))
    return found if tested else None


def _epoch_loop(loop: ast.For | ast.While) -> bool:
    """``for epoch in range(...)`` or ``for _ in range(args.epochs)``: a loop over epochs (a
    ``range`` whose target or bounds name an epoch), where a step function called directly is
    one full-batch step per epoch."""
    if not (isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)
            and isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "range"):
        return False
    words = [n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)]
    for arg in loop.iter.args:
        words += [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(arg)
                  if isinstance(n, (ast.Name, ast.Attribute))]
    return any(_EPOCHS.search(w) for w in words)


# a name for epochs (epoch, epochs, num_epochs, args.train_epochs), not a count per epoch
# (iters_per_epoch) nor a step inside one (epoch_step)
_EPOCHS = re.compile(r"(?<!per_)epochs?$", re.IGNORECASE)


def _outside_inner_loops(loop: ast.For | ast.While) -> list[ast.AST]:
    """The nodes of ``loop``'s body and else that no loop nested in it holds."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = [*loop.body, *loop.orelse]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.For, ast.While)):
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


_VERSION_ATTRS = frozenset(n.rsplit(".", 1)[1] for n in V.TORCH_VERSION_NAMES)  # __version__


def _names_read(expr: ast.AST, attrs: frozenset[str] = frozenset(), found: list | None = None) -> set[str]:
    """The ``id`` of every ``ast.Name`` in ``expr`` (``ast.walk``'s nodes, without its
    generators: a fifth of the scan's time went to them). The ``ast.Attribute`` nodes named in
    ``attrs`` are added to ``found`` on the same walk."""
    out: set[str] = set()
    stack = [expr]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        kind = type(node)
        if kind is ast.Name:
            out.add(node.id)
            continue  # a Name's only child is its context
        if kind is ast.Attribute and node.attr in attrs:
            found.append(node)
        for field in node._fields:
            value = getattr(node, field, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST):
                        push(item)
            elif isinstance(value, ast.AST):
                push(value)
    return out


_ON_DEVICE = re.compile(r"on_?device", re.IGNORECASE)


def _on_device(value: ast.expr) -> bool:
    """PTT021: a call given ``device=`` something other than the CPU (a name, "cuda", a
    torch.device("cuda")), or one whose name says it lives on the device (``OnDeviceDataset``)."""
    if not isinstance(value, ast.Call):
        return False
    if _ON_DEVICE.search(_last_name(value.func) or ""):
        return True
    for k in value.keywords:
        if k.arg == "device":
            v = k.value
            if isinstance(v, ast.Call) and v.args:  # torch.device("cpu")
                v = v.args[0]
            return not (isinstance(v, ast.Constant) and (v.value is None or "cpu" in str(v.value).lower()))
    return False


def _root_name(node: ast.expr) -> str | None:
    """``tasks.dataset``, ``sets[0]``: the name the attribute or item is read from."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _mentions_any(expr: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(expr))


def _calls_loss(expr: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and any(w in (_dotted(n.func) or "").lower() for w in ("loss", "criterion"))
               for n in ast.walk(expr))


class _QualifiedNames:
    """libcst metadata for TorchFix's ``get_qualified_name_for_call``, from the ``ast`` imports."""

    def __init__(self, aliases: dict[str, str]):
        self.aliases = aliases
        self.cache: dict[int, set] = {}
        self.names: dict[int, str | None] = {}  # id(node) -> the qualified name, for qname()

    def qname(self, node: cst.CSTNode) -> str | None:
        """The one qualified name of ``node`` (or None), as ``RuleVisitor.qname`` reads it."""
        key = id(node)
        if key in self.names:
            return self.names[key]
        found = self[node]
        name = self.names[key] = next(iter(found)).name if found else None
        return name

    def __getitem__(self, node: cst.CSTNode) -> set:
        key = id(node)
        if key not in self.cache:
            target = node.func if isinstance(node, cst.Call) else node
            name = None if isinstance(target, cst.Call) else get_full_name_for_node(target)
            if name is None:
                self.cache[key] = set()
            else:
                root, _, rest = name.partition(".")
                base = self.aliases.get(root)
                full = (base + ("." + rest if rest else "")) if base else name
                self.cache[key] = {QualifiedName(name=full, source=QualifiedNameSource.IMPORT)}
        return self.cache[key]

    def get(self, node, default=None):
        return self[node]

    def __contains__(self, node) -> bool:
        return True


class _NoPositions:
    """TorchFix's visitors ask for a position when they report; the engine resolves it later."""

    ZERO = CodeRange(CodePosition(1, 0), CodePosition(1, 0))

    def __getitem__(self, node):
        return self.ZERO

    def get(self, node, default=None):
        return self.ZERO


# Fields of a libcst node that hold only whitespace, punctuation or names: never walked.
_SKIP = frozenset({"lpar", "rpar", "lbracket", "rbracket", "leading_lines", "lines_after_decorators",
                   "trailing_whitespace", "header", "footer", "indent", "comma", "semicolon", "equal",
                   "dot", "star", "asynchronous", "encoding", "default_indent", "default_newline",
                   "has_trailing_newline", "operator", "colon", "keyword", "attr", "name", "asname",
                   "newline", "whitespace"})
_FIELDS: dict[type, tuple[str, ...]] = {}
# Nodes whose libcst fields are not in source order.
_SOURCE_ORDER = {"IfExp": ["body", "test", "orelse"],
                 # a signature (return annotation, bases) before the body, as the source has it
                 "FunctionDef": ["decorators", "type_parameters", "params", "returns", "body"],
                 "ClassDef": ["decorators", "type_parameters", "bases", "keywords", "body"],
                 "Parameters": ["posonly_params", "params", "star_arg", "kwonly_params", "star_kwarg"]}
# Node kinds a finding can be reported on, and the ast classes that are the same nodes: the engine
# finds a finding's position from the ast (which has them all) instead of libcst's codegen.
POSITIONED = {"Call": (ast.Call,), "Subscript": (ast.Subscript,), "Assign": (ast.Assign,),
              "AugAssign": (ast.AugAssign,), "For": (ast.For, ast.AsyncFor), "While": (ast.While,),
              "ExceptHandler": (ast.ExceptHandler,)}
_AST_KIND = {cls: kind for kind, classes in POSITIONED.items() for cls in classes}


def _fields(kind: type) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        names = [f.name for f in dataclasses.fields(kind)
                 if f.name not in _SKIP and not f.name.startswith("whitespace")]
        if "decorators" in names:  # in source order: decorators before the body
            names.remove("decorators")
            names.insert(0, "decorators")
        names = _SOURCE_ORDER.get(kind.__name__, names)
        names = _FIELDS[kind] = tuple(names)
    return names


_NODE_TYPES: dict[type, bool] = {}


def _unchecked(self) -> None:  # see _parse
    pass


def _parse(text: str) -> cst.Module:
    """``libcst.parse_module`` without re-validating each node as the parser builds it (a fifth of
    the parse: libcst's own comment on ``CSTNode.__post_init__`` suggests skipping it when
    parsing). The parser only builds valid trees; nodes built later are validated as usual."""
    post = cst.CSTNode.__post_init__
    cst.CSTNode.__post_init__ = _unchecked
    try:
        return cst.parse_module(text)
    finally:
        cst.CSTNode.__post_init__ = post


def _is_node(kind: type) -> bool:
    known = _NODE_TYPES.get(kind)
    if known is None:
        known = _NODE_TYPES[kind] = issubclass(kind, cst.CSTNode)
    return known


class _Walk:
    """A batched traversal of a libcst tree that calls the visitors' ``visit_<Node>`` and
    ``leave_<Node>`` methods in source order, like ``libcst.visit_batched``, without rebuilding
    every node on the way back up (which libcst's own traversal does, doubling the cost)."""

    def __init__(self, visitors: list, push, pop) -> None:
        methods = _get_visitor_methods(visitors)
        self.visits = {k[6:]: tuple(v) for k, v in methods.items() if k.startswith("visit_") and k.count("_") == 1}
        self.leaves = {k[6:]: tuple(v) for k, v in methods.items() if k.startswith("leave_") and k.count("_") == 1}
        other = [k for k in methods if k.count("_") != 1]
        if other:  # attribute visitors (visit_Call_func) are not supported by this walk
            raise ValueError(f"unsupported visitor methods: {other}")
        self.push, self.pop = push, pop
        self.plans: dict[type, tuple] = {}  # per node type: what __call__ does with such a node
        self.ordinal: dict[int, int] = {}  # id(node) -> its index among nodes of its kind
        self.count: dict[str, int] = {}

    def reset(self) -> None:
        self.ordinal.clear()
        self.count.clear()

    def _plan(self, kind: type) -> tuple:
        name = kind.__name__
        plan = self.plans[kind] = (name if name in POSITIONED else None, self.visits.get(name, ()),
                                   _fields(kind), self.leaves.get(name, ()))
        return plan

    def __call__(self, node: cst.CSTNode) -> None:
        kind = type(node)
        plan = self.plans.get(kind) or self._plan(kind)
        name, visits, fields, leaves = plan
        if name is not None:
            n = self.count.get(name, 0)
            self.ordinal[id(node)] = n
            self.count[name] = n + 1
        self.push(node)
        for fn in visits:
            fn(node)
        for field in fields:
            value = getattr(node, field)
            vt = type(value)
            if vt is tuple or vt is list:
                for item in value:
                    if _is_node(type(item)):
                        self(item)
            elif _is_node(vt):
                self(value)
        for fn in leaves:
            fn(node)
        self.pop(node)


def _maybe_not_module(name: str, func: ast.AST) -> bool:
    """``name`` is a parameter of ``func``, or ``func`` binds it to a call, a dict or an item of
    one, or passes it to a ``save_file``: whether it holds a module is for PTT004 to judge with
    the function."""
    a = func.args
    if any(p.arg == name for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]):
        return True
    for n in ast.walk(func):
        if isinstance(n, (ast.Assign, ast.AnnAssign)) \
                and isinstance(n.value, (ast.Call, ast.Dict, ast.DictComp, ast.Subscript)) \
                and any(isinstance(t, ast.Name) and t.id == name
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])):
            return True
        if isinstance(n, ast.Call) and _last_name(n.func) == "save_file" and any(
                isinstance(x, ast.Name) and x.id == name for x in n.args):
            return True
    return False


def declared_torch(path: str) -> tuple[int, int] | None:
    """The oldest torch the project of ``path`` declares it needs (``torch>=2.6`` in its
    requirements, pyproject.toml or setup.py, "PyTorch 2.6 or later" in its README), looked
    for from the file's folder up to the project's root (a folder with pyproject.toml,
    setup.py, setup.cfg or .git); the lowest such release when several are named; None when
    none is (or the path is not a file)."""
    folder = _file_folder(path)
    return None if folder is None else _declared_in(folder)


def _file_folder(path: str) -> str | None:
    """The folder of the checked file ``path``; None for source given with a name only (an
    excerpt, a test: no project around it) or a path that is not a file."""
    if not path or path.startswith("<"):
        return None
    try:
        return os.path.dirname(os.path.abspath(path)) if os.path.isfile(path) else None
    except (OSError, ValueError):
        return None


def pinned_torch(path: str) -> tuple[int, int] | None:
    """The newest torch release the project of ``path`` pins exactly (``torch==1.10.0`` in its
    requirements, ``pytorch=1.10.0`` in a conda environment file, ``pip install torch==1.9.0``
    in an install script; an exact torchvision or torchaudio pin pins the torch release it is
    built for; such files in an install folder of a folder, ``scripts/install.bat``,
    ``docker/Dockerfile``, count as that folder's), from the file's folder up to the project's
    root, where the nearest folder whose files pin torch decides (an example's own
    ``torch==2.1.0`` over the root's ``torch>=1.13``); None when none pins it, when a file of
    that folder or a nearer one gives torch an open range (``torch>=1.9``), or a README gives
    one ("PyTorch >= 1.12") or names a newer torch: then the project may run on a newer torch."""
    folder = _file_folder(path)
    return None if folder is None else _pinned_up(folder)


def _is_root(folder: str, names: set[str]) -> bool:
    """``folder`` (whose entries are ``names``) is a project's root: it holds pyproject.toml,
    setup.cfg, .git or a setup.py. A setup.py that only builds a torch extension
    (``torch.utils.cpp_extension``, no ``install_requires``) inside a Python package (its
    folder's parent has an ``__init__.py``), as a repository's vendored CUDA op keeps beside
    its sources, is no root: the op runs on the torch of the code around it, so the walk for
    that code's requirements goes on up. (A repository whose own setup.py builds its
    extensions is not inside a package: its setup.py is its root.)"""
    if names & _ROOT_MARKERS:
        return True
    return "setup.py" in names and not (
        _extension_build(os.path.join(folder, "setup.py"))
        and os.path.isfile(os.path.join(os.path.dirname(folder), "__init__.py")))


@functools.lru_cache(maxsize=256)
def _extension_build(setup_py: str) -> bool:
    """The setup.py only builds a torch extension: it names cpp_extension, not install_requires."""
    folder, name = os.path.split(setup_py)
    return any("cpp_extension" in text and "install_requires" not in text
               for _, text in _small_texts(folder, {name}, lambda n: True))


def _docker_args(body: str) -> str:
    """A Dockerfile's text with each ``${NAME}`` or ``$NAME`` of a build argument replaced by the
    default its ``ARG NAME=value`` line gives (the image a plain ``docker build`` pulls)."""
    args = dict(_DOCKER_ARG.findall(body))
    if not args:
        return body
    return re.sub(r"\$(?:\{(\w+)\}|(\w+))",
                  lambda m: args.get(m.group(1) or m.group(2), m.group(0)), body)


def _listing(folder: str) -> set[str]:
    try:
        return set(os.listdir(folder))
    except OSError:
        return set()


def _small_texts(folder: str, names: set[str], wanted) -> Iterable[tuple[str, str]]:
    """(name, text) of each file of ``folder`` that ``wanted`` accepts, in name order: regular
    files under 1 MB only (a project file, never data), unreadable ones skipped."""
    for name in sorted(names):
        if not wanted(name):
            continue
        file = os.path.join(folder, name)
        try:
            if not os.path.isfile(file) or os.path.getsize(file) > 1_000_000:
                continue
            with open(file, encoding="utf-8", errors="replace") as f:
                yield name, f.read()
        except OSError:
            continue


@functools.lru_cache(maxsize=256)
def _pinned_up(folder: str) -> tuple[int, int] | None:
    pins: list[tuple[int, int]] = []
    named: list[tuple[int, int]] = []  # torch releases a README names
    decided = False
    while True:
        names = _listing(folder)
        texts = list(_small_texts(folder, names, lambda n: n in _REQ_FILES or _PIN_FILE.search(n)
                                  or n in _READMES or _DOCKERFILE.match(n)))
        texts += ((name, text) for _, name, text in install_texts(folder, names))  # scripts/install.bat
        for name, text in texts:
            if name in _READMES:
                # "a higher version of PyTorch also works", "PyTorch >= 1.12", "pip install
                # torch==2.4.0": the README names a way onto a newer torch, and a pin is one
                # way to install
                if _NEWER_TORCH.search(text) or _TORCH_MIN.search(text) or _TORCH_PROSE.search(text):
                    return None  # "PyTorch >= 1.12", "PyTorch 1.12 or later": an open range
                named += [(int(m.group(1)), int(m.group(2))) for m in _TORCH_NAMED.finditer(text)]
                continue
            if decided:
                continue  # a nearer folder's files already name torch: they decide
            body = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
            if _TORCH_OPEN.search(body):
                return None  # an open range: no ceiling
            pins += [(int(m.group(1)), int(m.group(2))) for m in _TORCH_PIN.finditer(body)]
            if "pytorch/pytorch:" in body:
                if "pytorch/pytorch:$" in body:  # FROM pytorch/pytorch:${PYTORCH}-cuda... (ARG PYTORCH="1.6.0")
                    body = _docker_args(body)
                pins += [(int(m.group(1)), int(m.group(2))) for m in _TORCH_IMAGE.finditer(body)]
            pins += [t for m in _COMPANION_PIN.finditer(body) if (t := _companion_torch(
                m.group(1), int(m.group(2)), int(m.group(3)))) is not None]
        # the nearest folder whose files pin torch decides: an example's own requirements pin
        # its torch, whatever range the repository's root gives (its READMEs are still read)
        decided = bool(pins)
        parent = os.path.dirname(folder)
        if parent == folder or _is_root(folder, names):
            break
        folder = parent
    if not pins or (named and max(named) > max(pins)):
        return None
    return max(pins)


def _serves_checkpoints(path: str) -> bool:
    """The Python files of the folder of ``path`` (the checked file with its siblings) call
    ``load_state_dict`` and none trains (no ``backward()`` or ``.step()``): an inference app
    or a deployment of released weights, whose models must keep the layers the weights hold."""
    folder = _file_folder(path)
    return folder is not None and _folder_serves_checkpoints(folder)


_LOADS_STATE = re.compile(r"load_state_dict\(")


@functools.lru_cache(maxsize=256)
def _folder_serves_checkpoints(folder: str) -> bool:
    loads = False
    for _, text in _small_texts(folder, _listing(folder), lambda n: n.endswith(".py")):
        if _in_code(_TRAINS, text):
            return False
        loads = loads or ("load_state_dict(" in text and _in_code(_LOADS_STATE, text))
    return loads


# PTT032: code or configuration that computes in reduced precision, where Tensor Cores run:
# autocast/AMP, .half(), fp16/bf16 dtypes or flags, a mixed-precision setting, TF32 on
_TOKEN = r"(?<![A-Za-z0-9+/]){}(?![A-Za-z0-9+/])"  # a word, not inside base64 (a notebook's images)
_REDUCED = re.compile("|".join([r"autocast|GradScaler|float16|mixed[_ -]?precision|16-mixed",
                                r"\bprecision\s*[=:]|allow_tf32|float32_matmul_precision",
                                r"\.half\b|\bhalf\(|[\"']half[\"']|half_precision",  # not num_half
                                *(_TOKEN.format(w) for w in ("amp", "fp16", "bf16"))]),
                      re.IGNORECASE)
_PRECISION_FILES = (".py", ".yaml", ".yml", ".json", ".toml", ".cfg", ".sh", ".ipynb")
_SKIP_DIRS = {"node_modules", "site-packages", "__pycache__", "venv", "build", "dist"}
_MAX_SCANNED = 5000  # files read for a project's precision; beyond that it is assumed mixed


def _reduced_precision(path: str, text: str) -> bool:
    """The file, or any code or configuration file of its project (the tree under the nearest
    folder above it with pyproject.toml, setup.py, setup.cfg or .git; the file's own folder
    when there is none), computes in reduced precision somewhere (PTT032); comments do not
    count. A project too large to read is taken to (the rule then speaks as before)."""
    if _in_code(_REDUCED, text):
        return True
    folder = _file_folder(path)
    return folder is not None and _tree_reduced(_project_root(folder))


# PTT030: bases that make a class an nn.Module: torch.nn's classes (but Parameter, Buffer), a
# TorchScript module, Lightning's LightningModule, transformers' PreTrainedModel
_TORCH_MODULE = re.compile(r"^torch\.nn\.(\w+\.)*(?!Parameter$|Buffer$|UninitializedParameter$)[A-Z]\w*$"
                           r"|^torch\.jit\.ScriptModule$|(^|\.)LightningModule$|^transformers\.\w*PreTrainedModel$")
_MAX_BASE_DEPTH = 6  # files followed from a class to the nn.Module it derives from


def _base_dotted(node: ast.expr) -> str | None:
    """A class base as written (``nn.Module``); ``Base[T]`` -> ``Base``."""
    return _dotted(node.value if isinstance(node, ast.Subscript) else node)


@functools.lru_cache(maxsize=512)
def _parsed_classes(path: str) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[int, str]]] | None:
    """The top-level classes of a file (name -> its bases, dotted as written) and its imports
    (name -> (level, dotted origin)); None where it cannot be read or parsed."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        return _classes_of(ast.parse(text))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None


def _statement_nodes(tree: ast.Module):
    """``ast.walk``'s nodes in its order, but statements only (and the except and case clauses
    that hold them): a class or an import is never inside an expression, and the expressions
    are most of a tree's nodes."""
    queue = collections.deque([tree])
    while queue:
        node = queue.popleft()
        yield node
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                queue.extend(v for v in value if isinstance(v, (ast.stmt, ast.excepthandler, ast.match_case)))


def _classes_of(tree: ast.Module) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[int, str]]]:
    classes: dict[str, tuple[str, ...]] = {}
    imports: dict[str, tuple[int, str]] = {}
    for node in _statement_nodes(tree):
        if isinstance(node, ast.ClassDef):
            classes.setdefault(node.name, tuple(d for d in map(_base_dotted, node.bases) if d))
        elif isinstance(node, ast.Import):
            for a in node.names:
                imports[a.asname or a.name.split(".")[0]] = (0, a.name if a.asname else a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name != "*":
                    imports[a.asname or a.name] = (node.level, f"{node.module or ''}.{a.name}".lstrip("."))
    return classes, imports


def _module_file(folder: str, level: int, dotted: str) -> str | None:
    """The file of the project that ``from <dotted> import`` (``level`` dots) names: relative to
    ``folder``, or from the project's root (or its src/) for an absolute import."""
    parts = dotted.split(".")
    if level:
        base = folder
        for _ in range(level - 1):
            base = os.path.dirname(base)
        roots = [base]
    else:
        root = _project_root(folder)
        roots = [root, os.path.join(root, "src")]
    for base in roots:
        stem = os.path.join(base, *parts)
        for cand in (stem + ".py", os.path.join(stem, "__init__.py")):
            if os.path.isfile(cand):
                return cand
    return None


def _is_nn_module(dotted: str, folder: str | None, classes: dict[str, tuple[str, ...]],
                  imports: dict[str, tuple[int, str]], depth: int, seen: set) -> bool:
    """Whether the base ``dotted`` (as written in a file of ``folder``) is an nn.Module class."""
    head, _, rest = dotted.partition(".")
    if head in imports and not imports[head][0]:
        full = imports[head][1] + (f".{rest}" if rest else "")
    elif head in ("nn", "torch") and head not in imports:
        full = ("torch." if head == "nn" else "") + dotted  # an excerpt: nn as torch names it
    else:
        full = dotted
    if _TORCH_MODULE.search(full):
        return True
    if depth > _MAX_BASE_DEPTH or rest:
        return False
    if dotted in classes:  # a class of the same file
        key = (folder, dotted)
        if key in seen:
            return False
        seen.add(key)
        return any(_is_nn_module(b, folder, classes, imports, depth + 1, seen) for b in classes[dotted])
    if dotted in imports and folder is not None:  # a class of the project, imported
        level, origin = imports[dotted]
        module, _, name = origin.rpartition(".")
        target = _module_file(folder, level, module) if module or level else None
        parsed = _parsed_classes(target) if target else None
        if parsed is None or (target, name) in seen:
            return False
        seen.add((target, name))
        other_classes, other_imports = parsed
        tfolder = os.path.dirname(target)
        if name in other_classes:
            return any(_is_nn_module(b, tfolder, other_classes, other_imports, depth + 1, seen)
                       for b in other_classes[name])
        if name in other_imports:  # re-exported (an __init__.py's from .x import Name)
            return _is_nn_module(name, tfolder, other_classes, other_imports, depth + 1, seen)
    return False


def nn_module_classes(tree: ast.Module, path: str | None) -> frozenset[str]:
    """PTT030: the names of the classes of a file that derive from an nn.Module (followed through
    the file's classes and the project's files it imports them from)."""
    classes, imports = _classes_of(tree)
    folder = _file_folder(path) if path else None
    return frozenset(c for c, bases in classes.items()
                     if any(_is_nn_module(b, folder, classes, imports, 0, {(folder, c)}) for b in bases))


def _project_root(folder: str) -> str:
    start = folder
    while True:
        if _is_root(folder, _listing(folder)):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return start
        folder = parent


def _project_folders(root: str):
    """``os.walk`` of a project's root; of a folder that is no project's root (no
    pyproject.toml, setup.py, setup.cfg or .git up to the file system's root: a loose script
    in /tmp or a home folder), that folder alone, not every folder below it."""
    walk = os.walk(root)
    if not _is_root(root, _listing(root)):
        walk = ((folder, [], files) for folder, _, files in [next(walk, (root, [], []))])
    return walk


def _precision_files(root: str):
    """(folder, names) of the project's code and configuration files that may set a precision
    (PTT032), folder by folder as :func:`_project_folders` walks them (hidden and build folders
    left out)."""
    for folder, dirs, files in _project_folders(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        yield folder, {n for n in files if n.endswith(_PRECISION_FILES)}


@functools.lru_cache(maxsize=64)
def _tree_reduced(root: str) -> bool:
    scanned = 0
    for folder, names in _precision_files(root):
        scanned += len(names)
        if scanned > _MAX_SCANNED:
            return True
        if any(_in_code(_REDUCED, t) for _, t in _small_texts(folder, names, lambda n: True)):
            return True
    return False


# PTT031: a complex dtype or constructor; fused Adam/AdamW raise a RuntimeError at step() on a
# complex parameter ("`fused=True` requires all the params to be floating point Tensors")
_COMPLEX = re.compile(r"\b(cfloat|cdouble|chalf|complex32|complex64|complex128|view_as_complex)\b"
                      r"|torch\.(complex|polar)\(")
_COMPLEX_NAMES = frozenset({"cfloat", "cdouble", "chalf", "complex32", "complex64", "complex128",
                            "view_as_complex", "complex", "polar"})


def _complex_in(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in _COMPLEX_NAMES
               or isinstance(n, ast.Name) and n.id in _COMPLEX_NAMES for n in ast.walk(node))


def _makes_complex_params(text: str) -> bool:
    """The code creates complex parameters: ``nn.Parameter(...)`` (or ``register_parameter``)
    of a complex tensor, or a weight of a complex dtype bound to ``self.<name>`` in an
    ``__init__`` (``self.weight = FactorizedTensor.new(shape, dtype=torch.cfloat)``). Complex
    activations (an FFT's output in a forward) and buffers are no parameters."""
    if not _in_code(_COMPLEX, text):
        return False
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (_dotted(node.func) or "").rsplit(".", 1)[-1] in (
                "Parameter", "register_parameter") and _complex_in(node):
            return True
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            for n in ast.walk(node):
                if (isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                        and any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                                and t.value.id == "self" for t in n.targets)
                        and any(k.arg == "dtype" and _complex_in(k.value) for k in n.value.keywords)):
                    return True
    return False


def _complex_params(path: str, text: str) -> bool:
    """The file, or any Python file of its project (as :func:`_reduced_precision` finds it) but
    its tests, creates complex parameters (PTT031). A project too large to read is taken not to."""
    if _makes_complex_params(text):
        return True
    folder = _file_folder(path)
    return folder is not None and _tree_complex(_project_root(folder))


_TEST_DIRS = frozenset({"test", "tests", "testing"})


def _test_file(name: str) -> bool:
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def _project_code(root: str, loose: bool = False):
    """(folder, names) of the project's Python files that are not tests, folder by folder as
    :func:`_project_folders` walks them (hidden, build and test folders left out); ``loose``:
    every folder under ``root``, whether or not it is marked a project's root."""
    for folder, dirs, files in (os.walk(root) if loose else _project_folders(root)):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS
                         and d not in _TEST_DIRS)
        yield folder, {n for n in files if n.endswith(".py") and not _test_file(n)}


# The advised APIs whose unguarded use in a project's own code shows the torch it runs on in
# practice: a project that calls torch.load(..., weights_only=True) unguarded fails on a torch
# before 1.13 whatever floor it declares, so its declared floor (a stale torch>=1.1) does not
# keep advice that needs 1.13 or older from it (RuleVisitor.supports_before). Each spelling and
# the first release that has it: (qualified name, keyword or None) -> release.
_PROVES: dict[tuple[str, str | None], tuple[int, int]] = {
    ("torch.load", "weights_only"): V.RULES["PTT001"].needs_torch,  # PTT001's advice (1.13)
    ("torch.load", "mmap"): V.RULES["PTT003"].needs_torch,  # PTT003's (2.1)
    ("torch.inference_mode", None): V.RULES["PTT019"].needs_torch,  # PTT019's (1.9)
    ("torch.autograd.inference_mode", None): V.RULES["PTT019"].needs_torch,
    ("torch.autograd.grad_mode.inference_mode", None): V.RULES["PTT019"].needs_torch,
    # PTT028's: torch.cuda.OutOfMemoryError 1.13, torch.OutOfMemoryError 2.4 (registry.py)
    ("torch.cuda.OutOfMemoryError", None): V.RULES["PTT028"].needs_torch,
    ("torch.OutOfMemoryError", None): (2, 4),
    # PTT005's advised spellings, each from its release (visitors._AMP_SINCE)
    **{(f"torch.amp.{n}", None): r for n, r in V._AMP_SINCE.items()},
    # PTT031's: fused= on the optimizer, from its first release on any device (FUSED_SINCE)
    **{(n, "fused"): min(by_device.values()) for n, by_device in V.FUSED_SINCE.items()},
}
_PROOF_WORDS = ("weights_only", "mmap", "inference_mode", "OutOfMemoryError", "fused")
_AMP_WORD = re.compile(r"\bamp\b")
# a test of torch's release, or of what torch has: the names and words it reads
_RELEASE_TEST = re.compile(r"version|hasattr|getattr|signature|torch\w*\d|\d_\d|greater|newer|older"
                           r"|(^|_)(new|old)(_|$)|supports?_|weights_only|inference_mode|fused", re.IGNORECASE)
# the exceptions an old torch raises at such a call (an unknown argument, name or module), and
# the handlers that catch them too
_OLD_TORCH_ERRORS = frozenset({"TypeError", "AttributeError", "ImportError", "ModuleNotFoundError",
                               "Exception", "BaseException"})


def _tests_release(test: ast.AST) -> bool:
    for n in ast.walk(test):
        word = (n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute)
                else n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) else None)
        if word and _RELEASE_TEST.search(word):
            return True
    return False


def _catches_old_torch(node: ast.Try) -> bool:
    for h in node.handlers:
        if h.type is None:
            return True
        types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
        if any((_dotted(t) or "").rsplit(".", 1)[-1] in _OLD_TORCH_ERRORS for t in types):
            return True
    return False


def proves_torch(text: str) -> tuple[int, int] | None:
    """The newest release an advised API (_PROVES) that ``text`` uses without a guard needs:
    not inside an ``if`` (or a conditional expression, an ``and``/``or``) that tests torch's
    release or what it has (``torch.__version__``, ``hasattr``, a flag like ``TORCH_1_13``),
    nor after such an ``if`` in the same block (an early return for the old torch), nor inside
    a ``try`` that catches TypeError, AttributeError or ImportError (or Exception): there the
    project keeps its old-torch path alive. None where it uses none."""
    if not (any(w in text for w in _PROOF_WORDS) or ("amp" in text and _AMP_WORD.search(text))):
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    aliases: dict[str, str] = {}  # a local name -> the module or name of torch it stands for
    skipped: set[str] = set()  # names imported under a guard: their uses are guarded too
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name.split(".")[0] == "torch":
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    best: list[tuple[int, int]] = []

    def resolve(node: ast.AST) -> str | None:
        name = _dotted(node)
        if name is None:
            return None
        root, _, rest = name.partition(".")
        if root in skipped or root not in aliases:
            return None
        return aliases[root] + ("." + rest if rest else "")

    def use(name: str | None, keywords=()) -> None:
        for key in (None, *keywords):
            release = _PROVES.get((name or "", key))
            if release is not None:
                best.append(release)

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full.split(".")[0] != "torch":
                    continue
                if guarded:
                    skipped.add(a.asname or a.name)
                else:
                    aliases[a.asname or a.name] = full
                    use(full)
            return
        if guarded:
            # inside a guard nothing counts: only the names it imports matter (above)
            for child in ast.iter_child_nodes(node):
                visit(child, True)
            return
        if isinstance(node, ast.Try | getattr(ast, "TryStar", ast.Try)) and _catches_old_torch(node):
            for child in ast.iter_child_nodes(node):
                visit(child, True)
            return
        if isinstance(node, ast.If | ast.IfExp | ast.While) and _tests_release(node.test):
            for child in ast.iter_child_nodes(node):
                visit(child, True)
            return
        if isinstance(node, ast.BoolOp) and any(_tests_release(v) for v in node.values):
            for child in ast.iter_child_nodes(node):
                visit(child, True)
            return
        if isinstance(node, ast.Call):
            use(resolve(node.func), [k.arg for k in node.keywords if k.arg])
        elif isinstance(node, ast.Attribute | ast.Name) and isinstance(node.ctx, ast.Load):
            use(resolve(node))
            if isinstance(node, ast.Attribute) and _dotted(node) is not None:
                return  # its parts are the same name, shorter
        for field, value in ast.iter_fields(node):
            if field in ("annotation", "returns"):
                continue  # an annotation is not run (or not where the call is)
            items = value if isinstance(value, list) else [value]
            after_test = False  # after an ``if`` that tests the release: the old torch returned
            for item in items:
                if isinstance(item, ast.AST):
                    visit(item, after_test)
                    if isinstance(item, ast.If) and _tests_release(item.test):
                        after_test = True

    # two passes: the guarded imports are known before any use is resolved
    visit(tree, False)
    best.clear()
    visit(tree, False)
    return max(best) if best else None


def proved_torch(path: str) -> tuple[int, int] | None:
    """The newest release that the project of ``path`` (its Python files but its tests, as
    :func:`_project_code` walks them) already needs by its own unguarded use of an advised API
    (:func:`proves_torch`); None where none, or the path is not a file."""
    folder = _file_folder(path)
    return None if folder is None else _tree_proves(_project_root(folder))


# PTT041: an entry of a container, ``x["model"]`` or ``x.get("model")``, used as a module: called,
# or asked for a method only a module has (after any .float()/.half()/.to(...) on the way):
# ``ckpt["model"].float().state_dict()``, ``ckpt.get("ema").eval()``, ``x["model"].parameters()``
_MODULE_ENTRY = re.compile(
    r"""(?:\[\s*["'](\w+)["']\s*\]|\.get\(\s*["'](\w+)["']\s*\))\s*"""
    r"""(?:\(|(?:\.\s*(?:float|half|double|bfloat16|cpu|cuda|to)\s*\([^()]*\)\s*)*"""
    r"""\.\s*(?:state_dict|eval|train|parameters|named_parameters|modules|named_modules|children|fuse)\s*\()""")
_NAME_BEFORE = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*$")


def _keys_read_as_modules(text: str) -> set[str]:
    """The keys ``k`` of ``x[k]`` (or ``x.get(k)``) used as a module in ``text`` (see
    _MODULE_ENTRY), where the text binds ``x`` to a loader's result (``x = torch.load(f)``,
    ``x = torch_load(f)``: a name of the callee with "load" in it)."""
    if "load" not in text or not ("]" in text or ".get(" in text):
        return set()
    found: set[str] = set()
    loaded: dict[str, bool] = {}
    for m in _MODULE_ENTRY.finditer(text):
        key = m.group(1) or m.group(2)
        if key in found:
            continue
        before = _NAME_BEFORE.search(text, max(0, m.start() - 80), m.start())
        if before is None:
            continue
        name = before.group(1)
        if name not in loaded:
            loaded[name] = bool(re.search(
                rf"(?<![\w.]){re.escape(name)}\s*=\s*[\w.]*load\w*\(", text))
        if loaded[name]:
            found.add(key)
    return found


def _modules_read_back(path: str, text: str) -> tuple[frozenset[str], bool]:
    """PTT041: the keys the file, or any Python file of its project but its tests, reads back
    from a loaded checkpoint as a module: its checkpoints pickle modules on purpose. PTT004:
    whether another file of its part of the project loads a whole module on purpose
    (``_loads_whole_module``): the part is the project's top folder that holds the file (a
    project of separate examples: the example's folder), or the whole project for a file at
    its root. Not the file itself: a script that saves a model and reads it back (its best
    epoch, a demonstration) is the round trip the advice is about, not a format other code
    of the project consumes."""
    keys = _keys_read_as_modules(text)
    folder = _file_folder(path)
    if folder is not None:
        keys |= _tree_read_back(_project_root(folder))[0]
    return frozenset(keys), bool(_readers_beside(path))


def _readers_beside(path: str) -> list[str]:
    """PTT004: the files of the part of ``path``'s project that holds it (its top folder under
    the root; the whole project for a file at the root), ``path`` itself aside, that load whole
    modules on purpose (:func:`_loads_whole_module`), in name order."""
    folder = _file_folder(path)
    if folder is None:
        return []
    root = _project_root(folder)
    readers = _tree_read_back(root)[1]
    if not readers:
        return []
    rel = os.path.relpath(folder, root)
    part = root if rel in (".", "") or rel.startswith("..") else os.path.join(root, rel.split(os.sep)[0])
    own = os.path.abspath(path)
    return sorted(r for r in readers if r.startswith(part + os.sep) and r != own)


# methods whose value holds no graph whatever they are called on (a read, a size)
_GRAPH_FREE_METHODS = frozenset({"item", "detach", "tolist", "numpy", "size", "numel", "dim"})
_CALLED = re.compile(r"(?<![\w])([A-Za-z_]\w*)[ \t]*\(")
_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)[ \t]*\(", re.MULTILINE)


def _ast_graph_free(node: ast.expr, free: set[str]) -> bool:
    """PTT012: the expression holds no autograd graph: a constant, a gradient or ``.data``
    (``p.grad.view(-1)``), a ``.detach()``/``.item()`` read, a name in ``free``, torch's
    functions and a tensor's methods of such values (``torch.cat(grads)``, ``g.clone()``),
    lists, tuples and arithmetic of them."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in free
    if isinstance(node, ast.Attribute):
        return node.attr in ("grad", "data") or _ast_graph_free(node.value, free)
    if isinstance(node, ast.Subscript):
        return _ast_graph_free(node.value, free)
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(_ast_graph_free(e, free) for e in node.elts)
    if isinstance(node, ast.BinOp):
        return _ast_graph_free(node.left, free) and _ast_graph_free(node.right, free)
    if isinstance(node, ast.UnaryOp):
        return _ast_graph_free(node.operand, free)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _GRAPH_FREE_METHODS:
            return True
        name = _dotted(func) or ""
        if name.startswith(("np.", "numpy.")):
            return True  # NumPy's value: it cannot take a tensor that requires grad
        if isinstance(func, ast.Name) and func.id in ("float", "int", "len"):
            return True  # a Python number, of whatever it is given
        args = [*node.args, *(k.value for k in node.keywords)]
        if not all(_ast_graph_free(a, free) for a in args):
            return False
        last = name.rsplit(".", 1)[-1]
        if last[:1].isupper() and any(c.islower() for c in last):
            return True  # an object built of such values (AverageMeter(), a record)
        if isinstance(func, ast.Name):
            return False
        if name.startswith("torch.") and not name.startswith("torch.nn."):
            return bool(node.args)
        return isinstance(func, ast.Attribute) and _ast_graph_free(func.value, free)
    return False


def _returns_graph_free(func: ast.FunctionDef | ast.AsyncFunctionDef,
                        values: list[ast.expr] | None = None) -> bool:
    """PTT012: every ``return`` of the function gives a value that holds no graph
    (:func:`_ast_graph_free`), a name bound (assigned, or a list appended to) only to such
    values: ``grads = []; for p in self.parameters(): grads.append(p.grad.view(-1)); return
    torch.cat(grads)``. False where a return is bare, the function yields or returns nothing."""
    bound: dict[str, list[ast.expr | None]] = {}
    returns: list[ast.expr] = []
    for n in ast.walk(func):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                for name in _names_bound(t):
                    bound.setdefault(name, []).append(n.value)
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)):
            for name in _names_bound(n.target):
                bound.setdefault(name, []).append(n.value)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name):
            if n.func.attr in ("append", "extend", "insert", "add", "update"):
                # every value handed in (meter.update(loss.item(), n): both; an index too)
                handed = [*n.args, *(k.value for k in n.keywords)]
                bound.setdefault(n.func.value.id, []).extend(handed or [None])
        elif isinstance(n, (ast.For, ast.comprehension, ast.withitem, ast.NamedExpr)):
            target = n.optional_vars if isinstance(n, ast.withitem) else n.target
            for name in _names_bound(target) if target is not None else ():
                bound.setdefault(name, []).append(None)
        elif isinstance(n, ast.arguments):  # parameters: whatever a caller passes
            for a in [*n.posonlyargs, *n.args, *n.kwonlyargs, n.vararg, n.kwarg]:
                if a is not None:
                    bound.setdefault(a.arg, []).append(None)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            for name in n.names:
                bound.setdefault(name, []).append(None)
        elif isinstance(n, (ast.ExceptHandler, ast.alias)):
            name = n.name if isinstance(n, ast.ExceptHandler) else (n.asname or n.name.split(".")[0])
            if name:
                bound.setdefault(name, []).append(None)
        elif isinstance(n, ast.Return):
            if n.value is None:
                return False
            returns.append(n.value)
        elif isinstance(n, (ast.Yield, ast.YieldFrom)):
            return False
    if not returns:
        return False
    # the names every binding of which holds no graph, given the others (``grads = g.detach();
    # grads = grads.unsqueeze(0)``): start from all and drop those shown otherwise, until none
    free = {name for name, values in bound.items() if None not in values}
    for _ in range(len(free) + 1):
        kept = {name for name in free if all(_ast_graph_free(v, free) for v in bound[name])}
        if kept == free:
            break
        free = kept
    checked = returns if values is None else values
    if all(_ast_graph_free(r, free) for r in checked):
        return True
    # a name bound again before the return, in the return's own block (``loss = criterion(...)``,
    # backpropagated, then ``loss = reduce(loss).item()``; ``return loss``): only the last value
    # reaches the return
    blocks: dict[int, tuple[list[ast.stmt], int]] = {}
    for n in ast.walk(func):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(n, field, None)
            if isinstance(block, list):
                for i, stmt in enumerate(block):
                    if isinstance(stmt, ast.Return) and stmt.value is not None:
                        blocks[id(stmt.value)] = (block, i)
                        if isinstance(stmt.value, ast.Tuple):
                            blocks.update((id(e), (block, i)) for e in stmt.value.elts)

    def reaching_free(node: ast.expr) -> bool:
        if _ast_graph_free(node, free):
            return True
        if isinstance(node, ast.Tuple):
            return all(reaching_free(e) for e in node.elts)
        place = blocks.get(id(node))
        if not isinstance(node, ast.Name) or place is None:
            return False
        value = _reaching_value(*place, node.id)
        return value is not None and _ast_graph_free(value, free)

    return all(reaching_free(r) for r in checked)


def _reaching_value(block: list[ast.stmt], index: int, name: str) -> ast.expr | None:
    """The value of the last plain assignment of ``name`` before ``block[index]`` in that block,
    no statement between binding it otherwise; None where the block shows none."""
    for stmt in reversed(block[:index]):
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            return stmt.value
        if any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) for n in ast.walk(stmt)):
            return None
        if any(isinstance(n, (ast.Global, ast.Nonlocal)) for n in ast.walk(stmt)):
            return None
    return None


def _returned_items(func: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> frozenset[int | None] | None:
    """PTT012/PTT013: what every ``return`` of the method gives that holds no graph
    (:func:`_returns_graph_free`): ``None`` in the set for the whole value, ``i`` for the
    ``i``-th item of the tuples it returns (``return loss.item(), meta``). ``None`` (no evidence
    either way: the other definitions decide) where it returns nothing (an abstract method, a
    ``pass``) or only passes on a call of the same name (``return self.model.update(x, opt)``);
    empty where it yields or has a bare ``return``."""
    returns: list[ast.expr] = []
    for n in ast.walk(func):
        if isinstance(n, ast.Return):
            if n.value is None:
                return frozenset()
            returns.append(n.value)
        elif isinstance(n, (ast.Yield, ast.YieldFrom)):
            return frozenset()
    returns = [r for r in returns if not (isinstance(r, ast.Call) and _last_name(r.func) == name)]
    if not returns:
        return None
    if _returns_graph_free(func, returns):
        return frozenset({None})
    if not all(isinstance(r, ast.Tuple) for r in returns) or len({len(r.elts) for r in returns}) != 1:
        return frozenset()
    return frozenset(i for i in range(len(returns[0].elts))
                     if _returns_graph_free(func, [r.elts[i] for r in returns]))


@functools.lru_cache(maxsize=256)
def _project_returns(root: str, name: str) -> frozenset[int | None] | None:
    """What every definition of ``name`` in the project returns that holds no graph (see
    :func:`_returned_items`); empty where one returns a graph; None where none shows what it
    returns."""
    pattern = re.compile(rf"\bdef[ \t]+{re.escape(name)}[ \t]*\(")
    found: frozenset[int | None] | None = None
    for _folder, _name, text in _project_texts(root):
        if name not in text or not pattern.search(text):
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            return frozenset()
        for f in ast.walk(tree):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == name:
                items = _returned_items(f, name)
                if items is not None:
                    found = items if found is None else found & items
                    if not found:
                        return frozenset()
    return found


def imported_returns(path: str, tree: ast.Module | None, name: str) -> frozenset[int | None] | None:
    """PTT012/PTT013: what the function ``name``, which the file imports from a module of its
    project (``from ..utils.functional import evaluate``), returns that holds no graph: its one
    definition at that module's top level (:func:`_returned_items`). None where the file does
    not import the name so, or that module does not define it (the project's other definitions
    of the name then decide)."""
    folder = _file_folder(path)
    if folder is None or tree is None:
        return None
    found = _imported_module(folder, tree, name)
    return None if found is None else _defined_returns(*found)


def _imported_module(folder: str, tree: ast.Module, name: str) -> tuple[str, str] | None:
    """(the project file, the name defined there) of ``name``, which the file in ``folder``
    imports from a module of its project (``from .utils import evaluate as ev``); None where
    it does not so import it, or the module is not a file of the project."""
    for node in _statement_nodes(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                if (a.asname or a.name) == name:
                    file = _module_file(folder, node.level, node.module)
                    return None if file is None else (file, a.name)
    return None


@functools.lru_cache(maxsize=256)
def _module_defs(file: str, name: str) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, ...]:
    """The top-level defs of ``name`` in the module ``file`` (none where it cannot be read or
    parsed)."""
    try:
        with open(file, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return ()
    if name not in text or not re.search(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(", text, re.MULTILINE):
        return ()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ()
    return tuple(f for f in tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == name)


def _defined_returns(file: str, name: str) -> frozenset[int | None] | None:
    """What the module's first def of ``name`` returns that holds no graph; None where it has none."""
    defs = _module_defs(file, name)
    if not defs:
        return None
    items = _returned_items(defs[0], name)
    return frozenset() if items is None else items


def dict_returns(path: str, tree: ast.Module | None, name: str) -> bool:
    """PTT004: the function ``name``, defined at the file's top level or imported by it from a
    module of its project (``from .utils import serialize_model``), returns only dict literals
    (``return {"class": ..., "state": ...}``, ``dict(...)``): its value is no module."""
    if tree is None:
        return False
    own = [node for node in _statement_nodes(tree)
           if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name]
    if own:
        return all(_returns_dicts(f) for f in own)
    folder = _file_folder(path)
    found = None if folder is None else _imported_module(folder, tree, name)
    return found is not None and _defined_dict_returns(*found)


def _defined_dict_returns(file: str, name: str) -> bool:
    """A top-level def of ``name`` in the module ``file`` returns only dict literals."""
    return any(_returns_dicts(f) for f in _module_defs(file, name))


def _returns_dicts(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Every ``return`` of the function (one at least, none bare, no ``yield``) gives a dict
    literal, a dict comprehension or a ``dict(...)`` call."""
    returns = []
    for n in ast.walk(func):
        if isinstance(n, (ast.Yield, ast.YieldFrom)):
            return False
        if isinstance(n, ast.Return):
            returns.append(n.value)
    return bool(returns) and all(
        isinstance(r, (ast.Dict, ast.DictComp)) or (
            isinstance(r, ast.Call) and isinstance(r.func, ast.Name) and r.func.id in ("dict", "OrderedDict"))
        for r in returns)


def project_returns(path: str, name: str) -> frozenset[int | None]:
    """PTT012/PTT013: what every definition of the method ``name`` in ``path``'s project
    returns that holds no graph (``return loss.item(), meta``: item 0); read only for a value a
    rule would report."""
    folder = _file_folder(path)
    return frozenset() if folder is None else _project_returns(_project_root(folder), name) or frozenset()


def returns_with_own(path: str, tree: ast.Module | None, name: str) -> frozenset[int | None]:
    """What the checked text's own definitions of ``name`` return that holds no graph, read
    from its tree (as a real run reads the file from disk; an excerpt's file is not there),
    where they show some; else :func:`project_returns` (every definition in the project)."""
    got = project_returns(path, name)
    own = None
    for f in ast.walk(tree) if tree is not None else ():
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == name:
            items = _returned_items(f, name)
            if items is not None:
                own = items if own is None else own & items
    if own is None:
        return got
    # the file's own definitions decide where they show what they return: a call of the name in
    # the file is most likely one of them (self._valid_epoch(...)); another class's override
    # returning a graph would go unreported, never the other way round
    return own or got


def _names_bound(target: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


def _graph_free_defs(text: str) -> set[str]:
    """PTT012: the names of the functions of ``text`` that return only values holding no graph
    (:func:`_returns_graph_free`); parsed only where the text reads a gradient or detaches."""
    if "return" not in text or not (".grad" in text or ".detach()" in text):
        return set()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return set()
    return {f.name for f in _defs_in(tree) if _returns_graph_free(f)}


def _defs_in(tree: ast.AST):
    """Every function definition under ``tree``, nested ones included, found through statements
    only (a def is a statement: no expression holds one), so a file's expressions are not walked."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield child
            if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                stack.append(child)


@dataclass(frozen=True)
class _ProjectCode:
    """What the rules read from a project's own Python files (tests aside), in one pass."""
    complex: bool  # PTT031: a file creates complex parameters (_makes_complex_params)
    proves: tuple[int, int] | None  # the newest release its unguarded API use needs (proves_torch)
    keys: frozenset[str]  # PTT041: the keys its files read back from a checkpoint as modules
    readers: frozenset[str]  # PTT004: its files that load whole modules on purpose
    # PTT037: the classes defined in its files that name BatchNorm, each with those files
    norm_classes: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    freezes_bn: bool = False  # PTT037: a file keeps BatchNorm layers frozen (_freezes_batchnorm)
    # PTT019: its files that turn gradients back on and differentiate (_reenables_grad)
    reenables: frozenset[str] = frozenset()
    # PTT037: the folders of its files that download released weights (_downloads_weights)
    weight_folders: frozenset[str] = frozenset()


@functools.lru_cache(maxsize=64)
def _tree_scan(root: str) -> _ProjectCode:
    """One read of the project's non-test Python files for every fact the rules take from
    them (:func:`_project_code`'s walk, up to _MAX_SCANNED files: a project too large to read
    keeps what was read before the cap)."""
    complex_params, best, keys, readers = False, None, set(), set()
    classes: dict[str, set[str]] = {}
    frozen = False
    reenables: set[str] = set()
    weights: set[str] = set()
    for folder, name, text in _project_texts(root):
        complex_params = complex_params or _makes_complex_params(text)
        frozen = frozen or _freezes_batchnorm(text)
        if _reenables_grad(text):
            reenables.add(os.path.join(folder, name))
        if _downloads_weights(text):
            weights.add(folder)
        found = proves_torch(text)
        if found is not None and (best is None or found > best):
            best = found
        keys |= _keys_read_as_modules(text)
        if _loads_whole_module(text):
            readers.add(os.path.join(folder, name))
        if "BatchNorm" in text:
            for cls in _CLASS_DEF.findall(text):
                classes.setdefault(cls, set()).add(os.path.join(folder, name))
    return _ProjectCode(complex_params, best, frozenset(keys), frozenset(readers),
                        {k: frozenset(v) for k, v in classes.items()}, frozen, frozenset(reenables),
                        frozenset(weights))


# PTT019: code that turns gradients back on (torch.enable_grad(), set_grad_enabled(True)) and
# differentiates (.backward(), autograd.grad(...)): an optimisation run inside an inference call
# (a predictor refining its output by gradient steps, an attack), which inference_mode breaks
_REENABLES = re.compile(r"enable_grad\(|set_grad_enabled\(\s*True")
_DIFFERENTIATES = re.compile(r"\.backward\(|autograd\.grad\(")


def _reenables_grad(text: str) -> bool:
    return (("enable_grad(" in text or "set_grad_enabled(" in text) and ("backward(" in text or "grad(" in text)
            and _in_code(_REENABLES, text) and _in_code(_DIFFERENTIATES, text))


def grad_reenabled_below(path: str, text: str) -> bool:
    """PTT019: the file, or a Python file of the project in its folder or a folder below it
    (its package: the predictors its functions are handed), turns gradients back on and
    differentiates (:func:`_reenables_grad`): a grad-free block around such a call cannot
    become inference_mode, where the tensors made stay inference tensors and backward raises."""
    if _reenables_grad(text):
        return True
    folder = _file_folder(path)
    if folder is None:
        return False
    return any(_within(os.path.dirname(f), folder) for f in _tree_scan(_project_root(folder)).reenables)


# PTT019: a call of a collective that updates its tensor in place (V.COLLECTIVES)
_COLLECTIVE_CALL = re.compile(r"\ball_reduce\(|\.reduce\(|\bbroadcast\(")


def _collective_callee(func: ast.expr) -> bool:
    """``dist.all_reduce``, ``torch.distributed.broadcast``, a bare ``all_reduce`` (not a bare
    ``reduce``: functools'); ``dist.reduce`` on a receiver."""
    if isinstance(func, ast.Attribute):
        return func.attr in V.COLLECTIVES
    return isinstance(func, ast.Name) and func.id in ("all_reduce", "broadcast")


def collective_defs(tree: ast.Module | None) -> frozenset[str]:
    """PTT019: the names of the functions and methods of ``tree`` that hand one of their
    parameters to an in-place collective (``def ddp_reduce(data): ... dist.all_reduce(data)``)."""
    if tree is None:
        return frozenset()
    found = set()
    for f in ast.walk(tree):
        if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        params = {a.arg for a in (*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs)}
        if any(isinstance(n, ast.Call) and _collective_callee(n.func) and n.args
               and isinstance(n.args[0], ast.Name) and n.args[0].id in params for n in ast.walk(f)):
            found.add(f.name)
    return frozenset(found)


@functools.lru_cache(maxsize=64)
def _tree_collectives(root: str) -> frozenset[str]:
    found: set[str] = set()
    for _, _, text in _project_texts(root):
        if ("all_reduce(" in text or "broadcast(" in text or ".reduce(" in text) and _in_code(_COLLECTIVE_CALL, text):
            try:
                found |= collective_defs(ast.parse(text))
            except (SyntaxError, ValueError):
                continue
    return frozenset(found)


def collective_functions(path: str, tree: ast.Module | None) -> frozenset[str]:
    """PTT019: the functions of the file, and of its project's Python files (tests aside), that
    hand a parameter to an in-place collective (:func:`collective_defs`): a helper that
    all-reduces the loss a grad-free block computed."""
    own = collective_defs(tree)
    folder = _file_folder(path)
    return own if folder is None else own | _tree_collectives(_project_root(folder))


def _within(folder: str, top: str) -> bool:
    """``folder`` is ``top`` or a folder below it."""
    return folder == top or folder.startswith(top + os.sep)


# PTT037: a file that downloads released checkpoints for the project's models: it calls
# load_state_dict_from_url (torch.hub's) or model_zoo's load_url, and holds a checkpoint's URL
_LOAD_URL = re.compile(r"\b(?:load_state_dict_from_url|load_url)\(")
_WEIGHT_URL = re.compile(r"[\"']https?://[^\s\"']+\.(?:pth?|ckpt|pth\.tar|bin|safetensors)[\"']")


def _downloads_weights(text: str) -> bool:
    return (("load_state_dict_from_url(" in text or "load_url(" in text) and "http" in text
            and _in_code(_LOAD_URL, text) and _WEIGHT_URL.search(text) is not None)


def releases_weights(path: str) -> bool:
    """PTT037: a file of the project in the file's folder or a folder above it, up to the
    project's root (the package of models it serves), downloads released checkpoints
    (:func:`_downloads_weights`): its models' weights are published, and a conv's bias is a key
    in them, so dropping it breaks their strict load."""
    folder = _file_folder(path)
    if folder is None:
        return False
    found = _tree_scan(_project_root(folder)).weight_folders
    return any(_within(folder, f) for f in found)


# PTT037: a README that documents released checkpoints of the project's models: a model zoo,
# a download or release of (pretrained) models, weights, networks or checkpoints, a link to a
# checkpoint file; with a link somewhere in it (where they are downloaded from)
_RELEASE_DOC = re.compile(
    r"model[ _-]?zoo"
    r"|\b(?:download\w*|release[sd]?)\b[^\n.]{0,60}?\b(?:models?|weights|networks?|checkpoints?|ckpts?)\b"
    r"|\b(?:pre-?trained|released)[ \t]+(?:[\w-]+[ \t]+){0,2}?(?:models?|weights|networks?|checkpoints?)\b"
    r"|https?://\S+\.(?:pth|pt|ckpt)(?:\.tar)?\b", re.IGNORECASE)
# a class name of the file that names one model in prose: CamelCase or with a digit (Conv64F,
# RelationNet), not a plain word (Model, Encoder) that any README uses
_MODEL_NAME = re.compile(r"^(?=\w{4,}$)(?:[A-Z]\w*[A-Z0-9]\w*)$")
_MAX_DOCS = 2000  # files listed in a walk for README files; beyond that the walk stops


@functools.lru_cache(maxsize=256)
def _readme_releases(folder: str) -> str | None:
    """PTT037: the README of ``folder`` that documents released checkpoints (_RELEASE_DOC) and
    links somewhere (``http``): its path; None where none does."""
    names = {n for n in _listing(folder) if n.upper() in _README_NAMES}
    return next((os.path.join(folder, name) for name, text in _small_texts(folder, names, lambda n: True)
                 if "http" in text and _RELEASE_DOC.search(text) is not None), None)


_README_NAMES = frozenset(n.upper() for n in _READMES)


@functools.lru_cache(maxsize=64)
def _readme_texts(root: str) -> tuple[tuple[str, str], ...]:
    """PTT037: (path, text) of the README files under ``root`` (hidden and build folders left
    out; a repository's per-method READMEs, reproduce/<Method>/README.md, with the rest)."""
    texts, listed = [], 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        listed += len(files)
        if listed > _MAX_DOCS:
            break
        names = {n for n in files if n.upper() in _README_NAMES}
        texts += [(os.path.join(folder, name), text) for name, text in _small_texts(folder, names, lambda n: True)]
    return tuple(texts)


# a model's load_state_dict(...) call (not an optimizer's, scheduler's or scaler's)
_MODEL_LOAD = re.compile(r"(?<!def )\b(?:\w+\.)*(\w*)\.load_state_dict\(")
_NOT_MODEL = re.compile(r"^opt$|optim|sched|scaler", re.IGNORECASE)


def _loads_strictly(text: str) -> bool:
    """PTT037: the text loads a state dict into a model strictly: a ``x.load_state_dict(...)``
    in code, on a receiver not named for an optimizer, scheduler or scaler, whose arguments do
    not say ``strict=False``."""
    if "load_state_dict(" not in text:
        return False
    for m in _MODEL_LOAD.finditer(text):
        start = m.start()
        if "#" in text[text.rfind("\n", 0, start) + 1:start]:
            continue
        if _NOT_MODEL.search(m.group(1)):
            continue
        depth, i = 1, m.end()
        while depth and i < len(text) and i < m.end() + 2000:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        if not re.search(r"\bstrict\s*=\s*False\b", text[m.end():i]):
            return True
    return False


@functools.lru_cache(maxsize=64)
def _strict_loader(root: str, loose: bool) -> str | None:
    """PTT037: the first Python file of the project (tests aside) that loads a state dict
    strictly; None where none does."""
    return next((os.path.join(folder, name) for folder, name, text in _project_texts(root, loose)
                 if _loads_strictly(text)), None)


def documents_released(path: str, text: str) -> bool:
    """PTT037: the project publishes trained checkpoints of the file's models, and its code
    loads checkpoints strictly (:func:`released_evidence`). Dropping a conv's bias there makes
    every published checkpoint fail its strict load (unexpected keys)."""
    return released_evidence(path, text) is not None


def released_evidence(path: str, text: str) -> tuple[str, str | None, str] | None:
    """PTT037: (the README documenting released checkpoints, the README naming one of the
    file's classes where that one is the root's, the first file loading a state dict
    strictly), where a README of a folder above the file, below the project's root (a
    package's own README: a vendored tracker's), documents released checkpoints with a link,
    or the root's README does and a README of the project names one of the file's classes (its
    CamelCase name: Conv64F in a method's results table with download links), and a Python
    file of the project loads a state dict strictly. In a checkout with no project marker, the
    root is its highest licensed folder or the folder its absolute imports resolve from. None
    where any is missing."""
    folder = _file_folder(path)
    if folder is None:
        return None
    root = _project_root(folder)
    loose = not _is_root(root, _listing(root))
    if loose:
        root = _licensed_base(folder) or _import_base(path, text)
        if root is None:
            return None
    if not _within(folder, root):
        return None
    documented, named, at = None, None, folder
    while at != root:
        documented = _readme_releases(at)
        if documented is not None:
            break
        at = os.path.dirname(at)
    if documented is None:
        documented = _readme_releases(root)
        if documented is None:
            return None
        names = [c for c in _CLASS_DEF.findall(text) if _MODEL_NAME.match(c)]
        words = [re.compile(r"\b" + re.escape(c) + r"\b") for c in names]
        named = next((doc for doc, body in _readme_texts(root) for c, w in zip(names, words)
                      if c in body and w.search(body)), None)
        if named is None:
            return None
    loader = _strict_loader(root, loose)
    return None if loader is None else (documented, named, loader)


def _project_texts(root: str, loose: bool = False):
    """(folder, name, text) of the project's non-test Python files, as :func:`_project_code`
    walks them (``loose``: under an unmarked ``root`` too), up to _MAX_SCANNED files."""
    scanned = 0
    for folder, names in _project_code(root, loose):
        scanned += len(names)
        if scanned > _MAX_SCANNED:
            break
        for name, text in _small_texts(folder, names, lambda n: True):
            yield folder, name, text


@dataclass(frozen=True)
class _ProjectFlow:
    """What three rules read of how a project's functions are used, from its own Python files
    (tests aside): a second cached pass beside :func:`_tree_scan`, made only where a rule asks
    (a file wrapping a module in DataParallel, a PTT012 candidate, a function called only under
    no_grad), so that the common scan stays as cheap as it was."""
    # PTT012: names of functions whose every definition in the project returns only values that
    # hold no graph (a gradient getter: torch.cat of p.grad; a reader of .detach() values)
    graph_free: frozenset[str]
    calls: dict[str, int]  # PTT023: name -> its calls in the project's files (name( and .name()
    # PTT035: the files that run a training step (backward(), step() in code), each with the
    # top-level names it imports; the functions that differentiate with create_graph= (MAML)
    trainers: dict[str, frozenset[str]]
    second_order: frozenset[str]
    inferers: frozenset[str]  # PTT035: its files that evaluate (no_grad, inference_mode, .eval())
    # PTT023: name -> its calls (as counted in ``calls``) that lie in a grad-free with block or
    # in a function decorated grad-free, read by indentation
    guarded: dict[str, int] = dataclasses.field(default_factory=dict)


@functools.lru_cache(maxsize=64)
def _tree_flow(root: str) -> _ProjectFlow:
    calls: dict[str, int] = {}  # name -> its calls (name( or .name(, not def name()
    trainers: dict[str, frozenset[str]] = {}
    second_order: set[str] = set()
    inferers: set[str] = set()
    free_defs: dict[str, int] = {}  # name -> its definitions that return no graph
    guarded: dict[str, int] = {}  # name -> its calls under a grad-free block or decorator
    all_defs: dict[str, int] = {}  # name -> its definitions
    for folder, name, text in _project_texts(root):
        for d in _graph_free_defs(text):
            free_defs[d] = free_defs.get(d, 0) + 1
        if "def" in text:
            for d in _DEF.findall(text):
                all_defs[d] = all_defs.get(d, 0) + 1
        code = _without_comments(text)  # (a commented-out call is no call: PTT023)
        for c in _CALLED.findall(code):
            calls[c] = calls.get(c, 0) + 1
        if _trains_in(text):
            trainers[os.path.join(folder, name)] = frozenset(_IMPORT_ROOT.findall(text))
        elif _in_code(_INFERS, text):
            inferers.add(os.path.join(folder, name))
        if "create_graph" in text:
            second_order |= _second_order_defs(text)
        if "no_grad" in text or "inference_mode" in text:
            for c in _guarded_calls(code):
                guarded[c] = guarded.get(c, 0) + 1
    for d, k in all_defs.items():
        if d in calls:
            calls[d] -= k
    graph_free = frozenset(d for d, k in free_defs.items() if all_defs.get(d) == k)
    return _ProjectFlow(graph_free, calls, trainers, frozenset(second_order), frozenset(inferers), guarded)


# a comment (``#`` to the line's end), or a one-line string literal, kept as it is (a ``#`` in it
# starts no comment)
_COMMENT_OR_STRING = re.compile(r"""("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')|#[^\n]*""")


def _without_comments(text: str) -> str:
    """The text with its comments blanked (lines kept), read without a parse: a ``#`` inside a
    one-line string literal starts none (a triple-quoted string is read as its quote pairs)."""
    if "#" not in text:
        return text
    return _COMMENT_OR_STRING.sub(lambda m: m.group(1) or "", text)


# PTT023: a line that opens a grad-free block: ``with torch.no_grad():`` or a grad-free decorator
_GRAD_FREE_OPENER = re.compile(r"^([ \t]*)(?:(?:async[ \t]+)?with[ \t][^\n#]*|@[^\n#]*)(?:no_grad|inference_mode)\(")


def _guarded_calls(text: str) -> list[str]:
    """PTT023: the names called (``name(`` / ``.name(``) on the lines inside a grad-free
    ``with`` block or in the body of a function under a grad-free decorator, read by indentation
    (the lines after the opener indented deeper than it; for a decorator, than its ``def``)."""
    found: list[str] = []
    lines = text.split("\n")
    i, n = 0, len(lines)
    while i < n:
        m = _GRAD_FREE_OPENER.match(lines[i])
        if not m:
            i += 1
            continue
        indent = len(m.group(1).expandtabs())
        i += 1
        if lines[i - 1].lstrip().startswith("@"):  # the decorator's def (other decorators between)
            while i < n and lines[i].lstrip().startswith("@"):
                i += 1
            if i >= n or not re.match(r"[ \t]*(?:async[ \t]+)?def[ \t]", lines[i]):
                continue
            i += 1
        while i < n:
            line = lines[i]
            body = line.strip()
            if body and len(line) - len(line.lstrip()) <= indent and not body.startswith("#"):
                break
            if body and not body.startswith("#"):  # (a def's own name is no call)
                found.extend(_CALLED.findall(line)[1 if _DEF.match(line) else 0:])
            i += 1
    return found


def project_guarded_calls(path: str) -> tuple[dict[str, int], dict[str, int]]:
    """PTT023: each name's calls in ``path``'s project's files (tests aside), and those of them
    inside a grad-free block (:func:`_guarded_calls`); empty where the path is not a file."""
    folder = _file_folder(path) if path else None
    if folder is None:
        return {}, {}
    flow = _tree_flow(_project_root(folder))
    return flow.calls, flow.guarded


_IMPORT_ROOT = re.compile(r"^[ \t]*(?:from|import)[ \t]+(\w+)", re.MULTILINE)


def _trains_in(text: str) -> bool:
    """A training step in the text's code (_TRAINS: backward(), step()), not in a comment, in
    a docstring's example (``>>> loss.backward()``) nor an autograd.Function's ``def backward(``."""
    for m in _TRAINS.finditer(text):
        prefix = text[text.rfind("\n", 0, m.start()) + 1:m.start()]
        if ("#" not in prefix and not prefix.lstrip().startswith((">>>", "..."))
                and not prefix.rstrip().endswith("def")):  # an autograd.Function's def backward(
            return True
    return False


def _second_order_defs(text: str) -> set[str]:
    """PTT035: the functions of ``text`` that call ``grad(...)`` (torch.autograd.grad) with a
    ``create_graph=`` that is not False: they differentiate through the gradient (MAML's
    adaptation), which DistributedDataParallel does not support."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return set()
    return {f.name for f in _defs_in(tree) if any(_second_order_call(c) for c in ast.walk(f))}


def _second_order_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _last_name(node.func) == "grad" and any(
        k.arg == "create_graph" and not (isinstance(k.value, ast.Constant) and not k.value.value)
        for k in node.keywords)


def trained_beside(path: str) -> tuple[bool, frozenset[str]]:
    """PTT035: whether a file of the project runs a training step in the part of the project
    that holds ``path`` (its top folder under the root; the whole project at the root), or
    outside it while importing that part's package, or no other file of the part shows that
    it evaluates a model (no evidence of inference code); and the project's functions that
    differentiate with create_graph (:func:`_second_order_defs`). (True, empty) where the path
    is not a file."""
    folder = _file_folder(path)
    if folder is None:
        return True, frozenset()
    root = _project_root(folder)
    scan = _tree_flow(root)
    rel = os.path.relpath(folder, root)
    if rel in (".", "") or rel.startswith(".."):
        return bool(scan.trainers) or not scan.inferers, scan.second_order
    top = rel.split(os.sep)[0]
    part = os.path.join(root, top)
    own = os.path.abspath(path)
    # no training step in the part, and evidence that it runs a model: another of its files
    # evaluates (no_grad, inference_mode, .eval()); without one, it is taken to train
    infers = any(f.startswith(part + os.sep) and f != own for f in scan.inferers)
    return not infers or any(f.startswith(part + os.sep) or top in roots
                             for f, roots in scan.trainers.items()), scan.second_order


def project_calls(path: str) -> dict[str, int]:
    """PTT023: how often each name is called (``name(``) in ``path``'s project's files, tests
    aside (see :func:`_tree_flow`); empty where the path is not a file."""
    folder = _file_folder(path) if path else None
    return {} if folder is None else _tree_flow(_project_root(folder)).calls


def project_graph_free(path: str) -> frozenset[str]:
    """PTT012: the names of ``path``'s project's functions that return only values holding no
    graph, every definition of the name (see :func:`_tree_flow`)."""
    folder = _file_folder(path)
    return frozenset() if folder is None else _tree_flow(_project_root(folder)).graph_free


# PTT004: LAMMPS's ML-IAP interface (MLIAPUnified, an *mliap* wrapper or file), which loads the
# artefact as a whole pickled module
_MLIAP = re.compile(r"mliap", re.IGNORECASE)
_CLASS_DEF = re.compile(r"^class\s+(\w+)", re.MULTILINE)
# PTT037: code that keeps BatchNorm layers frozen: a module found by isinstance(m, ...BatchNorm...)
# set to eval() or requires_grad_(False) on that line or within the next three; or a function
# named for it (def freeze_bn(...), fix_bn, set_bn_eval, frozen_batchnorm ...)
_BN_SET_EVAL = re.compile(r"isinstance\(\s*([\w.]+)\s*,[^\n]*BatchNorm[^\n]*(?:\n[^\n]*){0,3}?"
                          r"(?<![\w.])\1\.(?:eval\(\s*\)|requires_grad_\(\s*False\s*\))")
_BN_FREEZER = re.compile(r"\bdef[ \t]+_?(?:(?:freeze|fix|frozen)_?(?:bn|batch_?norm)\w*|\w*(?:bn|batch_?norm)_eval\w*)"
                         r"[ \t]*\(", re.IGNORECASE)


def _freezes_batchnorm(text: str) -> bool:
    """PTT037: the text keeps BatchNorm layers frozen (in eval mode, or without gradients): a
    module picked by ``isinstance(m, nn.BatchNorm2d)`` then set to ``m.eval()`` or
    ``m.requires_grad_(False)``, or a function named for it (``def freeze_bn``, ``def fix_bn``,
    ``def set_bn_eval``). Such layers normalise with their running statistics, so a conv bias
    before them is not subtracted out, and released weights hold it."""
    if "BatchNorm" in text and "isinstance" in text and (".eval(" in text or "requires_grad_(" in text):
        if _BN_SET_EVAL.search(text):
            return True
    low = text.lower()
    return ("bn" in low or "batch" in low) and ("fix" in low or "froze" in low or "freeze" in low
                                                or "_eval" in low) and _BN_FREEZER.search(text) is not None


def freezes_batchnorm(path: str, text: str) -> bool:
    """PTT037: the file or another Python file of its project keeps BatchNorm layers frozen."""
    if _freezes_batchnorm(text):
        return True
    folder = _file_folder(path)
    return folder is not None and _tree_scan(_project_root(folder)).freezes_bn


def _twin_classes(path: str, text: str) -> frozenset[str]:
    """PTT037: the classes of the file (which names BatchNorm) that another file of its project
    with the same file name, one that names BatchNorm too, also defines: a copy of the same
    model (a trainer's and a package's), whose checkpoints are shared, so a layer's state_dict
    keys must stay alike. (A class name alone, such as BasicBlock, recurs across unrelated models.)"""
    folder = _file_folder(path)
    if folder is None:
        return frozenset()
    mine = set(_CLASS_DEF.findall(text))
    if not mine:
        return frozenset()
    own = os.path.abspath(path)
    found = _tree_scan(_project_root(folder)).norm_classes
    base = os.path.basename(own)
    return frozenset(c for c in mine if any(f != own and os.path.basename(f) == base
                                            for f in found.get(c, ())))


# a class under a registry decorator (@MODELS.register_module()): built from a configuration
# by name, so the files that train it need not name it
_REGISTERED = re.compile(r"^@[^\n]*regist[^\n]*\n(?:@[^\n]*\n)*class\s+(\w+)", re.MULTILINE)


def evaluator_classes(path: str, text: str) -> frozenset[str]:
    """PTT037: the classes of a file whose models its project never trains but loads weights
    into: the file does not train; no file that trains (_tree_flow's trainers) lies in its part
    of the project (its top folder under the root; the whole project at the root); no training
    file anywhere names one of the file's classes or its module; and another file of the
    project that names one of them calls ``load_state_dict`` (then every class of the file, its
    blocks with the network they build). An evaluator's network (a recognition model that
    scores generated samples) built only to receive released weights: dropping a layer's bias
    breaks that strict load. Not a class under a registry decorator (trained by its name in
    a configuration)."""
    folder = _file_folder(path)
    if folder is None or _trains_in(text):
        return frozenset()
    mine = set(_CLASS_DEF.findall(text)) - set(_REGISTERED.findall(text))
    if not mine:
        return frozenset()
    found = _evaluator_root(folder, path, text)
    if found is None:
        return frozenset()
    root, whole = found
    trainers = _loose_trainers(root) if whole else frozenset(_tree_flow(root).trainers)
    rel = os.path.relpath(folder, root)
    if rel in (".", "") or rel.startswith(".."):
        if trainers:
            return frozenset()
    else:
        part = os.path.join(root, rel.split(os.sep)[0]) + os.sep
        if any(f.startswith(part) for f in trainers):
            return frozenset()
    stem = os.path.splitext(os.path.basename(path))[0]
    if _names_module(tuple(sorted(trainers)), stem):
        return frozenset()
    own, loaded = os.path.abspath(path), False
    every = _class_users(root, tuple(sorted(mine)), whole)
    for cls in sorted(mine):
        users = every[cls]
        if any(f in trainers for f, _ in users):
            return frozenset()
        loaded = loaded or any(loads for f, loads in users if f != own)
    # the file's blocks (a layer class its network builds) go with the network it serves
    return frozenset(mine) if loaded else frozenset()


def _evaluator_root(folder: str, path: str, text: str) -> tuple[str, bool] | None:
    """PTT037: the root :func:`evaluator_classes` reads the project from, and whether it is an
    unmarked checkout's (every Python file under it read): the project's root, or where it has
    no marker (no .git, no setup file) the file's import base or its highest licensed folder;
    None where neither is found."""
    root = _project_root(folder)
    if _is_root(root, _listing(root)):
        return root, False
    base = _import_base(path, text) or _licensed_base(folder)
    return None if base is None else (base, True)


_FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+(\w+(?:\.\w+)+)[ \t]+import\b", re.MULTILINE)


def _import_base(path: str, text: str) -> str | None:
    """PTT037, in a checkout with no project marker: the folder from which the file's own
    absolute imports of its project resolve (``from eval.models.utils import X`` in
    ``/c/eval/models/net.py``, where ``/c/eval/models/utils`` exists: ``/c``); None where none
    does."""
    if "from" not in text:
        return None
    parts = os.path.abspath(path).split(os.sep)
    best = None
    for dotted in _FROM_IMPORT.findall(text):
        names = dotted.split(".")
        for i in range(1, len(parts) - 1):
            if parts[i] != names[0]:
                continue
            base = os.sep.join(parts[:i]) or os.sep
            target = os.path.join(base, *names)
            if (os.path.isdir(target) or os.path.isfile(target + ".py")) and (
                    best is None or len(base) < len(best)):
                best = base
    return best


_LICENSES = ("LICENSE", "LICENSE.md", "LICENSE.txt", "LICENCE", "COPYING")


def _licensed_base(folder: str) -> str | None:
    """PTT037, in a checkout with no project marker: the highest folder above ``folder`` (or
    it) that holds a licence file, a repository's root; None where none does."""
    best = None
    while True:
        if _listing(folder) & set(_LICENSES):
            best = folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return best
        folder = parent


@functools.lru_cache(maxsize=64)
def _loose_trainers(root: str) -> frozenset[str]:
    """PTT037: the files under an unmarked checkout's import base that train (_trains_in)."""
    return frozenset(os.path.join(folder, name) for folder, name, text in _project_texts(root, True)
                     if _trains_in(text))


@functools.lru_cache(maxsize=256)
def _class_users(root: str, classes: tuple[str, ...], whole: bool = False) -> dict[str, tuple[tuple[str, bool], ...]]:
    """PTT037: for each of ``classes``, the project's files (tests aside) that name it as a
    word, each with whether it calls ``load_state_dict`` in code (``whole``: every Python file
    under ``root``), in one read of the files."""
    words = {cls: re.compile(r"\b" + re.escape(cls) + r"\b") for cls in classes}
    out: dict[str, list[tuple[str, bool]]] = {cls: [] for cls in classes}
    for folder, name, text in _project_texts(root, whole):
        named = [cls for cls, word in words.items() if cls in text and word.search(text)]
        if named:
            user = (os.path.abspath(os.path.join(folder, name)),
                    "load_state_dict(" in text and _in_code(_LOADS_STATE, text))
            for cls in named:
                out[cls].append(user)
    return {cls: tuple(users) for cls, users in out.items()}


@functools.lru_cache(maxsize=256)
def _names_module(files: tuple[str, ...], stem: str) -> bool:
    """PTT037: one of ``files`` (the training files) names the module ``stem`` as a word (an
    import of it, a reference through it)."""
    word = re.compile(r"\b" + re.escape(stem) + r"\b")
    for file in files:
        try:
            with open(file, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            return True
        if stem in text and word.search(text):
            return True
    return False


def _tree_complex(root: str) -> bool:
    """Tests are left out: a test's complex parameter is not the trained model's."""
    return _tree_scan(root).complex


def _tree_proves(root: str) -> tuple[int, int] | None:
    return _tree_scan(root).proves


def _tree_read_back(root: str) -> tuple[frozenset[str], frozenset[str]]:
    """The keys the project's files read back as modules, and the files that load whole modules."""
    scan = _tree_scan(root)
    return scan.keys, scan.readers


_UNSAFE_KWARG = re.compile(r"weights_only\s*=\s*False")
# casts a module and a tensor share: what a load's value goes through before it is used
_CASTS = frozenset({"to", "float", "double", "half", "bfloat16", "cpu", "cuda", "type"})
# a function whose name says it loads a model (load_model, _load_model, load_network)
_LOADS_MODEL = re.compile(r"load_?(model|module|net|network)", re.IGNORECASE)


def _loads_whole_module(text: str) -> bool:
    """PTT004: the text reads a whole pickled module back on purpose: a ``torch.load(...,
    weights_only=False)`` (the pickle loader, asked for by name, so the project's files still
    load on torch 2.6 and later) whose value (after casts such as ``.to(...)``, directly or
    through a name) is used as a module: called, asked for a method only a module has
    (``.eval()``, ``.parameters()``, ``.state_dict()``), or returned by a function named for
    loading a model (``load_model``) or annotated to return a Module."""
    if "load(" not in text or not _UNSAFE_KWARG.search(text):
        return False
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    scopes: list[ast.AST] = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
    for scope in scopes:
        loader = isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            bool(_LOADS_MODEL.search(scope.name))
            or (scope.returns is not None and "Module" in (_dotted(scope.returns) or "")))
        parents: dict[int, ast.AST] = {}
        for n in ast.walk(scope):
            for c in ast.iter_child_nodes(n):
                parents[id(c)] = n
        names: set[str] = set()
        for n in ast.walk(scope):
            if not (isinstance(n, ast.Call) and _dotted(n.func) == "torch.load" and any(
                    k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is False
                    for k in n.keywords)):
                continue
            node = n
            while True:  # torch.load(...).to(torch.float64)
                up = parents.get(id(node))
                call = parents.get(id(up)) if isinstance(up, ast.Attribute) else None
                if isinstance(call, ast.Call) and call.func is up and up.attr in _CASTS:
                    node = call
                else:
                    break
            up = parents.get(id(node))
            if _used_as_module(node, up, parents) or (isinstance(up, ast.Return) and loader):
                return True
            if isinstance(up, ast.Assign) and len(up.targets) == 1 and isinstance(up.targets[0], ast.Name):
                names.add(up.targets[0].id)
        if not names:
            continue
        for n in ast.walk(scope):
            if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load):
                up = parents.get(id(n))
                if _used_as_module(n, up, parents) or (isinstance(up, ast.Return) and loader):
                    return True
    return False


def _used_as_module(node: ast.AST, up: ast.AST | None, parents: dict[int, ast.AST]) -> bool:
    """``node(...)``, ``node.eval()``, ``node.parameters()``: a module's use."""
    if isinstance(up, ast.Call) and up.func is node:
        return True
    return (isinstance(up, ast.Attribute) and up.attr in V._MODULE_ONLY
            and isinstance(parents.get(id(up)), ast.Call) and parents[id(up)].func is up)


# a ``with`` item or a decorator that calls a plain name: ``with inference_context(cfg):``
_WITH_CALL = re.compile(r"^[ \t]*(?:with|async with|@)[ \t]+([A-Za-z_]\w*)[ \t]*\(", re.MULTILINE)
_GRAD_FREE_LAST = ("no_grad", "inference_mode")


# --- PTT020/PTT021: what the code shows about a loader's dataset and collate_fn ---------------

_HOST_CALLS = frozenset({"cpu", "numpy", "tolist", "item"})
_DEVICE_NAME = re.compile(r"(^|_)(device|dev|cuda|gpu|rank)$", re.IGNORECASE)
# methods that change a dataset in place (dataset.set_epoch(e), loader.dataset.set_probs(p))
_MUTATORS = re.compile(r"^(set_|update|reset|add|append|extend|insert|remove|pop|clear|resample|"
                       r"shuffle|refresh|reload|load|next_epoch|new_epoch)")


def _cpu_value(v: ast.expr) -> bool:
    if isinstance(v, ast.Call) and v.args and _last_name(v.func) == "device":
        v = v.args[0]
    return isinstance(v, ast.Constant) and (v.value is None or "cpu" in str(v.value).lower())


def _device_value(v: ast.expr) -> bool:
    """What ``.to()`` is given that names a device: "cuda", f"cuda:{rank}", torch.device(...),
    a name or attribute named for one (``device``, ``self.device``, ``local_rank``); not a dtype."""
    if isinstance(v, ast.JoinedStr):  # f"cuda:{gpu}": read its leading text
        v = v.values[0] if v.values else v
    if isinstance(v, ast.Constant):
        return isinstance(v.value, str) and v.value.lower().startswith(("cuda", "gpu"))
    if isinstance(v, ast.Call):
        return _last_name(v.func) == "device" and not _cpu_value(v)
    return bool(_DEVICE_NAME.search(_last_name(v) or ""))


def _moves_to_device(expr: ast.AST) -> bool:
    """``.cuda()``, ``.to(device)``, or a call given ``device=`` (not the CPU) in ``expr``."""
    for n in ast.walk(expr):
        if not isinstance(n, ast.Call):
            continue
        attr = n.func.attr if isinstance(n.func, ast.Attribute) else None
        if attr == "cuda" or (attr == "to" and n.args and _device_value(n.args[0])):
            return True
        if any(k.arg == "device" and not _cpu_value(k.value) for k in n.keywords):
            return True
    return False


# a keyword that asks a dataset (or what builds one) to keep its tensors on the GPU: gpu=,
# use_gpu=, on_gpu=, cuda=, use_cuda= (not gpus=, a count of devices for a trainer)
_GPU_FLAG = re.compile(r"^(use_|on_|to_|in_|is_)?(gpu|cuda)$", re.IGNORECASE)


def _says_gpu(call: ast.AST) -> bool:
    """``Dataset(x, gpu=not (device == -1))``, ``Data(use_cuda=args.cuda)``: a call given a GPU
    flag that is not plainly off (False, None, a negative id, "cpu"; gpu=0 may name cuda:0)."""
    if not isinstance(call, ast.Call):
        return False
    for k in call.keywords:
        if k.arg is None or not _GPU_FLAG.match(k.arg):
            continue
        v = k.value
        if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.USub) and isinstance(v.operand, ast.Constant):
            continue  # gpu=-1: the CPU
        if isinstance(v, ast.Constant) and (v.value is None or v.value is False or v.value == ""
                                            or "cpu" in str(v.value).lower()):
            continue
        return True
    return False


def _on_device_expr(expr: ast.AST, names: set[str], attrs: set[str]) -> bool:
    """``expr`` is shown to hold device tensors: it moves them there, or reads a name or
    ``self.`` attribute that does, or it is a call given a GPU flag (``IndexDataset(x, gpu=True)``),
    and nothing in it brings them back to the host."""
    hit = False
    for n in ast.walk(expr):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                n.func.attr in _HOST_CALLS or (n.func.attr == "to" and n.args and _cpu_value(n.args[0]))):
            return False
        if not hit:
            if isinstance(n, ast.Name) and n.id in names:
                hit = True
            elif (isinstance(n, ast.Attribute) and n.attr in attrs and isinstance(n.value, ast.Name)
                  and n.value.id == "self"):
                hit = True
    return hit or _moves_to_device(expr) or _says_gpu(expr)


def _scope_nodes(body: list[ast.stmt]) -> list[ast.AST]:
    """The nodes of a scope's statements, not entering the functions, lambdas and classes in it."""
    found: list[ast.AST] = []
    stack = [s for s in body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    while stack:
        n = stack.pop()
        found.append(n)
        stack.extend(c for c in ast.iter_child_nodes(n)
                     if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)))
    return found


def _targets(t: ast.expr) -> list[str]:
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [x for e in t.elts for x in _targets(e)]
    return []


def _placed_names(body: list[ast.stmt], attrs: set[str]) -> set[str]:
    """The names a scope binds to device tensors (directly, through a list it appends them
    to, a loop over them, a few hops deep)."""
    nodes = _scope_nodes(body)
    binds: list[tuple[list[str], ast.expr]] = []
    for n in nodes:
        if isinstance(n, ast.Assign):
            binds.append(([x for t in n.targets for x in _targets(t)], n.value))
        elif isinstance(n, (ast.AnnAssign, ast.AugAssign)) and n.value is not None:
            binds.append((_targets(n.target), n.value))
        elif isinstance(n, (ast.For, ast.comprehension)):
            target = n.target
            if (isinstance(n.iter, ast.Call) and _last_name(n.iter.func) == "enumerate"
                    and isinstance(target, ast.Tuple) and len(target.elts) == 2):
                target = target.elts[1]  # for i, x in enumerate(xs): i is a count
            binds.append((_targets(target), n.iter))
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
              and n.func.attr in ("append", "extend", "insert", "add") and isinstance(n.func.value, ast.Name)):
            binds += [([n.func.value.id], a) for a in n.args]
    found: set[str] = set()
    for _ in range(4):
        grew = {x for targets, value in binds if not set(targets) <= found
                and _on_device_expr(value, found, attrs) for x in targets}
        if grew <= found:
            break
        found |= grew
    return found


def _tensors_placed(nodes: list[ast.AST], data: ast.expr, placed: set[str], attrs: set[str]) -> bool:
    """The scope puts the loader's dataset's own tensors on a device (``train_set.data =
    train_set.data.cuda()``, ``ds.tensors = tuple(t.to(device) for t in ds.tensors)``)."""
    if not isinstance(data, ast.Name) or data.id in ("self", "cls"):
        return False
    for n in nodes:
        if isinstance(n, ast.Assign) and any(
                isinstance(t, (ast.Attribute, ast.Subscript)) and _root_name(t) == data.id for t in n.targets):
            if _on_device_expr(n.value, placed, attrs):
                return True
    return False


def _class_placed(cls: ast.ClassDef) -> set[str]:
    """``self.`` attributes a class binds to what it moves to a device (``self.dists =
    nn.ModuleList(...).to(self.device)``)."""
    attrs: set[str] = set()
    for n in ast.walk(cls):
        if isinstance(n, ast.Assign) and _moves_to_device(n.value):
            for t in n.targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    attrs.add(t.attr)
    return attrs


def _dataset_of(call: ast.Call) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == "dataset"), call.args[0] if call.args else None)


def _mutates(nodes: list[ast.AST], after: int, roots: set[str]) -> bool:
    """A statement after line ``after`` sets an attribute or item of, or calls a changing method
    (``set_probs``, ``update``) on, one of ``roots`` (``loader.dataset``, a dataset's name)."""
    for n in nodes:
        if getattr(n, "lineno", 0) <= after:
            continue
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                while isinstance(t, (ast.Attribute, ast.Subscript)):  # ds.labels[i] = y
                    t = t.value
                    if _dotted(t) in roots:
                        return True
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
              and _MUTATORS.match(n.func.attr) and _dotted(n.func.value) in roots):
            return True
    return False


def _loader_facts(tree: ast.Module, path: str, facts: V.Facts) -> None:
    """PTT020/PTT021: per DataLoader call, whether its dataset is built from values the code puts
    on a device, whether the code changes its dataset after building it, and whether its
    collate_fn is a function of the project shown to return NumPy arrays (not tensors)."""
    scopes: list[tuple[str, list[ast.stmt], set[str], ast.AST | None]] = [("", tree.body, set(), None)]
    for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        for f in cls.body:
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                scopes.append((f.name, f.body, set(), cls))
    class_attrs: dict[int, set[str]] = {}
    in_class = {id(f) for _, _, _, c in scopes if c is not None for f in c.body}
    for f in ast.walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(f) not in in_class:
            scopes.append((f.name, f.body, set(), None))
    for _name, body, attrs, cls in scopes:
        nodes = _scope_nodes(body)
        loaders = [(n, None) for n in nodes if isinstance(n, ast.Call) and _last_name(n.func) == "DataLoader"]
        if not loaders:
            continue
        if cls is not None:
            attrs = class_attrs[id(cls)] if id(cls) in class_attrs else class_attrs.setdefault(
                id(cls), _class_placed(cls))
        bound = {id(n.value): n.targets[0] for n in nodes if isinstance(n, ast.Assign) and len(n.targets) == 1}
        placed: set[str] | None = None
        for call, _ in loaders:
            data = _dataset_of(call)
            if data is None:
                continue
            quiet = facts.quiet_loaders.setdefault(call.lineno, set())
            if placed is None:
                placed = _placed_names(body, attrs)
            if _on_device_expr(data, placed, attrs) or _tensors_placed(nodes, data, placed, attrs):
                quiet |= {"PTT020", "PTT021"}  # workers would touch CUDA; pinning raises
            target = bound.get(id(call))
            roots = {_dotted(data)} - {None}
            where = nodes
            if target is not None and _dotted(target):
                roots.add(_dotted(target) + ".dataset")
                if cls is not None and _dotted(target).startswith("self."):
                    where = list(ast.walk(cls))  # self.loader.dataset.set_epoch(e) in another method
            if _mutates(nodes, call.lineno, roots) or (where is not nodes and _mutates(where, 0, roots - {_dotted(data)})):
                quiet.add("PTT020")  # persistent workers would keep stale copies of it
            collate = next((k.value for k in call.keywords if k.arg == "collate_fn"),
                           call.args[6] if len(call.args) > 6 else None)
            if collate is not None and _numpy_collate(tree, nodes, collate, path, facts.aliases, cls):
                quiet.add("PTT021")  # NumPy batches: pin_memory leaves them as they are


_BUILTIN_CALLS = frozenset(dir(__import__("builtins")))


def _imports_of(tree: ast.Module) -> dict[str, str]:
    """name -> the dotted module (and name) a module's top-level imports bind it to."""
    found: dict[str, str] = {}
    for n in tree.body:
        if isinstance(n, ast.Import):
            for a in n.names:
                found[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            for a in n.names:
                found[a.asname or a.name] = f"{n.module}.{a.name}"
    return found


@functools.lru_cache(maxsize=64)
def _parsed(file: str) -> ast.Module | None:
    if not file:
        return None
    try:
        if os.path.getsize(file) > 1_000_000:
            return None
        with open(file, encoding="utf-8", errors="replace") as f:
            return ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None


def _project_def(path: str, dotted: str, kind) -> tuple[ast.AST, ast.Module, str] | None:
    """The class or function ``pkg.mod.Name`` of the project of ``path``: (its def, its module,
    the module's path)."""
    module, _, name = dotted.rpartition(".")
    folder = _file_folder(path) if path else None
    if not module or not folder or module.split(".")[0] in ("torch", "numpy", "builtins"):
        return None
    file = _project_module_file(folder, module)
    tree = _parsed(file)
    if tree is None:
        return None
    d = next((n for n in tree.body if isinstance(n, kind) and n.name == name), None)
    return (d, tree, file) if d is not None else None


def _numpy_only(func: ast.AST, cls: ast.ClassDef | None, tree: ast.Module, path: str,
                seen: set[int], budget: list[int]) -> bool | None:
    """The function (with the methods of ``cls`` and the project functions it calls) calls no
    torch and nothing unknown: True if it calls NumPy, None if not, False if it is not shown."""
    if id(func) in seen:
        return None
    seen.add(id(func))
    budget[0] -= 1
    if budget[0] < 0:
        return False
    imports = _imports_of(tree)
    torch_names = {k for k, v in imports.items() if v.split(".")[0] == "torch"}
    numpy_names = {k for k, v in imports.items() if v.split(".")[0] == "numpy"}
    nested = {n.name: n for n in ast.walk(func) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    methods = {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))} if cls else {}
    numpy = False
    for n in ast.walk(func):
        if isinstance(n, ast.Name) and n.id in torch_names:
            return False
        if not isinstance(n, ast.Call):
            continue
        root = n.func
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in numpy_names:
            numpy = True
            continue
        callee = None
        if isinstance(n.func, ast.Name):
            fn = n.func.id
            if fn in nested and nested[fn] is not func:
                continue  # walked with the function
            if fn in defs:
                callee = (defs[fn], None, tree, path)
            elif fn in imports:
                found = _project_def(path, imports[fn], (ast.FunctionDef, ast.AsyncFunctionDef))
                if found is None:
                    return False
                callee = (found[0], None, found[1], found[2])
            elif fn in _BUILTIN_CALLS:
                continue
            else:
                return False
        elif isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) and n.func.value.id == "self":
            if n.func.attr not in methods:
                return False
            callee = (methods[n.func.attr], cls, tree, path)
        if callee is not None:
            got = _numpy_only(*callee, seen, budget)
            if got is False:
                return False
            numpy = numpy or bool(got)
    return True if numpy else None


def _numpy_collate(tree: ast.Module, nodes: list[ast.AST], collate: ast.expr, path: str,
                   aliases: dict[str, str], cls: ast.ClassDef | None) -> bool:
    """PTT021: the collate_fn is a function or a dataset's method of the project (this file, or
    a project module it imports) that calls NumPy and no torch (the methods and project functions
    it calls included, its class mentioning no torch): its batches are NumPy arrays, which
    pin_memory leaves as they are."""
    if isinstance(collate, ast.Call) and _last_name(collate.func) == "partial" and collate.args:
        collate = collate.args[0]
    func = owner = None
    module, file = tree, path
    if isinstance(collate, ast.Name):
        func = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and n.name == collate.id), None)
        if func is None and collate.id in aliases:
            found = _project_def(path, aliases[collate.id], (ast.FunctionDef, ast.AsyncFunctionDef))
            if found is not None:
                func, module, file = found
    elif isinstance(collate, ast.Attribute) and isinstance(collate.value, ast.Name):
        var = collate.value.id
        if var == "self":
            owner = cls
        else:
            built = [n.value for n in nodes if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                     and any(isinstance(t, ast.Name) and t.id == var for t in n.targets)]
            kind = _last_name(built[-1].func) if built else None
            if kind is not None:
                owner = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == kind), None)
                if owner is None and kind in aliases and isinstance(built[-1].func, ast.Name):
                    found = _project_def(path, aliases[kind], ast.ClassDef)
                    if found is not None:
                        owner, module, file = found
        if owner is not None:
            func = next((n for n in owner.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                         and n.name == collate.attr), None)
            torch_names = {k for k, v in _imports_of(module).items() if v.split(".")[0] == "torch"}
            if any(isinstance(n, ast.Name) and n.id in torch_names for s in owner.body for n in ast.walk(s)):
                return False  # the dataset's own samples may be tensors
    if func is None:
        return False
    return bool(_numpy_only(func, owner, module, file, set(), [12]))


def _imported_grad_free(path: str, text: str, aliases: dict[str, str]) -> set[str]:
    """The names this file imports from its own project (``from pkg.utils import
    inference_context``) and calls in a ``with`` or a decorator, whose definition returns
    ``torch.no_grad()`` or ``torch.inference_mode()`` (a factory picking one by mode), or
    yields inside one (a ``@contextmanager``): context managers that turn autograd off."""
    wanted = {m.group(1) for m in _WITH_CALL.finditer(text)}
    found: set[str] = set()
    folder = None
    for name in wanted:
        target = aliases.get(name, "")
        module, _, func = target.rpartition(".")
        if not module or module.split(".")[0] in ("torch", "contextlib", "functools"):
            continue
        if folder is None:
            folder = _file_folder(path) or ""
        if folder and _defines_grad_free(_project_module_file(folder, module), func):
            found.add(name)
    return found


def _project_module_file(folder: str, module: str) -> str:
    """The project's file of the dotted ``module``, looked for from the checked file's folder up
    to its project's root (``pkg/utils.py`` or ``pkg/utils/__init__.py``); "" if none."""
    root = _project_root(folder)
    rel = module.replace(".", os.sep)
    while True:
        for file in (os.path.join(folder, rel + ".py"), os.path.join(folder, rel, "__init__.py")):
            if os.path.isfile(file):
                return file
        if folder == root or os.path.dirname(folder) == folder:
            return ""
        folder = os.path.dirname(folder)


@functools.lru_cache(maxsize=256)
def _defines_grad_free(file: str, func: str) -> bool:
    tree = _parsed(file)
    if tree is None:
        return False

    def grad_free_call(node: ast.AST | None) -> bool:
        return any(isinstance(n, ast.Call) and _last_name(n.func) in _GRAD_FREE_LAST
                   and (_dotted(n.func) or "").startswith(("torch.", "no_grad", "inference_mode"))
                   for n in ast.walk(node)) if node is not None else False

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func:
            for n in ast.walk(node):
                if isinstance(n, ast.Return) and grad_free_call(n.value):
                    return True
                if (isinstance(n, ast.With) and any(grad_free_call(i.context_expr) for i in n.items)
                        and any(isinstance(y, (ast.Yield, ast.YieldFrom)) for y in ast.walk(n))):
                    return True
    return False


def _companion_torch(package: str, major: int, minor: int) -> tuple[int, int] | None:
    """The torch release that release ``major.minor`` of torchvision or torchaudio is built for
    (PyTorch's published compatibility table): torchvision 0.5 to 0.14 go with torch 1.4 to
    1.13, 0.15 on with 2.0 on (0.N with 2.(N-15)); torchaudio 0.4 to 0.13 with torch 1.4 to
    1.13, 2.N with torch 2.N. Older or unknown releases: None (no pin read from them). Where
    one release went with two torch releases (torchvision 0.4: torch 1.2 and 1.3) the newer."""
    if package.lower() == "vision":
        if major != 0 or minor < 4:
            return None
        if minor == 4:
            return (1, 3)
        return (1, minor - 1) if minor <= 14 else (2, minor - 15)
    if major == 0 and 4 <= minor <= 13:
        return (1, minor)
    return (2, minor) if major == 2 else None


def _sets_force_unsafe(text: str) -> bool:
    """The code (not a comment or a read) sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD."""
    return _FORCE_UNSAFE in text and _in_code(_SETS_FORCE_UNSAFE, text)


def _package_forces_unsafe(path: str) -> bool:
    """The package ``path`` belongs to sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD in an
    ``__init__.py`` (its own folder's or one above, while the folders are a package)."""
    folder = _file_folder(path)
    try:
        return folder is not None and _init_forces_unsafe(folder)
    except (OSError, ValueError):
        return False


@functools.lru_cache(maxsize=256)
def _init_forces_unsafe(folder: str) -> bool:
    init = os.path.join(folder, "__init__.py")
    if not os.path.isfile(init):
        return False
    try:
        if os.path.getsize(init) < 1_000_000:
            with open(init, encoding="utf-8", errors="replace") as f:
                text = f.read()
            if _sets_force_unsafe(text):
                return True
    except OSError:
        return False
    parent = os.path.dirname(folder)
    return parent != folder and _init_forces_unsafe(parent)


@functools.lru_cache(maxsize=256)
def _declared_in(folder: str) -> tuple[int, int] | None:
    """The nearest requirement file's floor, from ``folder`` up to the project's root; a README's
    only where none names torch (a requirement is what installs: a README's "PyTorch >= 2.2 is
    recommended" beside a pyproject's torch>=2.7 is no floor)."""
    req, prose = _declared_up(folder)
    return req if req is not None else prose


@functools.lru_cache(maxsize=256)
def _declared_up(folder: str) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    found: list[tuple[int, int]] = []
    prose: list[tuple[int, int]] = []
    names = _listing(folder)
    for name, text in _small_texts(folder, names, lambda n: n in _REQ_FILES or n in _READMES or (
            n.startswith("requirements") and n.endswith(".txt")) or _INSTALL_DOC.match(n)):
        if _INSTALL_DOC.match(name):
            prose += _install_doc_torch(text)
            continue
        lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#") or name in _READMES]
        body = "\n".join(lines)
        patterns = (_TORCH_MIN, _TORCH_PROSE) if name in _READMES else (_TORCH_REQ,)
        if name in _READMES:
            prose += _worded_floors(body) + _named_releases(body)
        for pattern in patterns:
            (prose if name in _READMES else found).extend(
                (int(m.group(1)), int(m.group(2))) for m in pattern.finditer(body))
        if name in _READMES and "<" in body:
            prose += _ceilings(body)
        if name in _READMES and "torch" in body.lower():
            prose += [(int(m.group(1)), int(m.group(2))) for m in _TORCH_BULLET.finditer(body)]
    for _, text in _req_dir_texts(folder, names):  # requirements/requirements.txt
        body = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
        found += [(int(m.group(1)), int(m.group(2))) for m in _TORCH_REQ.finditer(body)]
    for docs in doc_folders(folder, names):  # docs/install.md, readme/INSTALL.md
        for _, text in _small_texts(docs, _listing(docs), _INSTALL_DOC.match):
            prose += _install_doc_torch(text)
    near = min(prose) if prose else None
    if found:
        return min(found), near
    parent = os.path.dirname(folder)
    if parent == folder or _is_root(folder, names):
        return None, near
    req, above = _declared_up(parent)
    return req, near if near is not None else above


def _req_dir_texts(folder: str, names: set[str]) -> list[tuple[str, str]]:
    """(name, text) of the requirement files (*.txt, the first _REQ_DIR_MAX by name) of the
    ``requirements`` folder of ``folder``, where it has one."""
    if _REQ_DIR not in names:
        return []
    sub = os.path.join(folder, _REQ_DIR)
    if not os.path.isdir(sub):
        return []
    txt = set(sorted(n for n in _listing(sub) if n.endswith(".txt"))[:_REQ_DIR_MAX])
    return list(_small_texts(sub, txt, lambda n: True))


def _install_doc_torch(text: str) -> list[tuple[int, int]]:
    """The torch releases an install document names (tested with, or required): "PyTorch 1.8.0",
    "torch>=1.8", "PyTorch 1.8 or later"."""
    if "torch" not in text.lower():
        return []
    return (_named_releases(text) + [(int(m.group(1)), int(m.group(2))) for m in _TORCH_MIN.finditer(text)]
            + (_ceilings(text) if "<" in text else []) + _worded_floors(text))


def _named_releases(text: str) -> list[tuple[int, int]]:
    """Every torch release a README or an install document names ("tested with PyTorch 1.7",
    "pip install torch==1.8.0", "conda install pytorch=1.6.0", a badge's "pytorch-1.8", "[torch
    1.8.1](url)"): the project documents that it runs there, so advice that needs a newer torch
    may break it (where no requirement file names torch, the oldest is its floor). Releases of
    torch before 2.6 only (0.1 to 0.4, 1.0 to 1.13, 2.0 to 2.5): a release named is one the
    project runs on, not one it requires, so a newer one says nothing of the weights-only
    default (a floor of 2.6 reads as requiring it: see _ceilings); "torch 1.81", a release
    missing its second dot, is 1.8."""
    if "torch" not in text.lower():
        return []
    out = []
    for m in _TORCH_NAMED.finditer(text):
        major, minor = int(m.group(1)), int(m.group(2))
        if major == 1 and minor > 13:
            minor = int(m.group(2)[0])  # 1.81: 1.8.1
        if (major, minor) < (2, 6) and not (major == 0 and minor > 4):
            out.append((major, minor))
    return out


def _worded_floors(text: str) -> list[tuple[int, int]]:
    """The torch floors a sentence of prose says in words ("PyTorch meeting your environment
    (at least 1.7)", "PyTorch version 1.7 or higher", "PyTorch (minimum 1.7)"); see _TORCH_LEAST."""
    low = text.lower()
    if "torch" not in low or not any(w in low for w in _FLOOR_WORDS):
        return []
    return [(int(m.group(1)), int(m.group(2))) for pattern in (_TORCH_LEAST, _TORCH_OR_LATER)
            for m in pattern.finditer(text)]


def _ceilings(text: str) -> list[tuple[int, int]]:
    """The newest torch each prose ceiling allows ("PyTorch <= 1.4": 1.4; "PyTorch < 1.0": an
    older one, 0.99 read as (0, 99)): a project that runs on nothing newer has its floor there
    or below, so a rule whose advice needs a newer torch breaks it. A ceiling at 2.6 or later
    is left out: it bounds the floor from above only, and a floor of 2.6 or later is read as
    the project requiring the weights-only default (PTT001), which a ceiling does not say."""
    out = []
    for m in _TORCH_CEIL.finditer(text):
        major, minor = int(m.group(2)), int(m.group(3))
        if m.group(1) == "<":
            major, minor = (major, minor - 1) if minor else (major - 1, 99)
        if 0 <= major and (major, minor) < (2, 6):
            out.append((major, minor))
    return out


def _subfolders(folder: str, names: set[str], kinds: tuple[str, ...]) -> list[str]:
    """The folders among the entry ``names`` of ``folder`` named one of ``kinds`` in any case."""
    return [os.path.join(folder, n) for n in sorted(names) if n.lower() in kinds
            and os.path.isdir(os.path.join(folder, n))]


def install_folders(folder: str, names: set[str]) -> list[str]:
    """The folders of ``folder`` where a project keeps install files (scripts/, docker/,
    install/, env/, conda/... in any case: _INSTALL_DIRS) among its entry ``names``."""
    return _subfolders(folder, names, _INSTALL_DIRS)


def install_texts(folder: str, names: set[str]) -> Iterable[tuple[str, str, str]]:
    """(install folder, name, text) of the pin files and Dockerfiles in the install folders of
    ``folder`` (scripts/install.bat, docker/Dockerfile): read as ``folder``'s own."""
    for sub in install_folders(folder, names):
        for name, text in _small_texts(sub, _listing(sub), lambda n: _PIN_FILE.search(n) or _DOCKERFILE.match(n)):
            yield sub, name, text


def doc_folders(folder: str, names: set[str]) -> list[str]:
    """The documents folders of ``folder`` (docs/, doc/, readme/ in any case) among its entry
    ``names``: where a project keeps its install document."""
    return _subfolders(folder, names, _DOC_DIRS)


class Checker:
    """Reusable: builds the visitors once; :meth:`check_source` per file.

    ``torch_release`` (``(2, 13)``; None: unknown) and ``device`` are the reader's: a few rules
    follow a default or an argument that changed between releases (see :mod:`tipsite.checker.visitors`).
    ``codes``: the rules to run (None: every rule); only their visitors are built and run.
    """

    def __init__(self, torch_release: tuple[int, ...] | None = None, device: str = "cpu",
                 codes: Iterable[str] | None = None) -> None:
        wanted = None if codes is None else set(codes)
        self.tracker = V.Tracker()
        self.own = [cls() for cls in V.OWN_VISITORS if wanted is None or cls.CODE in wanted]
        self.torchfix = {}
        for cls, mapping in V.TORCHFIX_RULES.items():
            mapping = {k: c for k, c in mapping.items() if wanted is None or c in wanted}
            if mapping:
                self.torchfix[cls()] = mapping
        self.visitors = [*self.own, *self.torchfix]
        for v in self.visitors:
            v.where = self.tracker
            v.torch = torch_release
            v.device = device
        self.walk = _Walk(self.visitors, self.tracker.push, self.tracker.pop)

    def check_source(self, text: str, path: str = "<string>", test: bool | None = None) -> list[Finding]:
        """Findings in one file's source, sorted; a file that does not parse raises SyntaxError.
        ``test``: the file is a test module (None: judged from ``path``); it gives no finding."""
        tree = ast.parse(text, filename=path)
        if test is None:
            test = is_test_path(path)
        if MARKER not in text or not self.visitors or test:
            return []
        scan = _Scan()
        scan.path = path
        scan.facts.mentions_cuda = _in_code(_ACCELERATOR, text)
        scan.facts.cuda_beyond_autocast_off = scan.facts.mentions_cuda and (
            "enabled" not in text or "DataLoader" not in text or _cuda_beyond_autocast_off(tree, text))
        scan.facts.cpu_path = _in_code(_CPU_PATH, text) and not (
            "accelerator" in text and _in_code(_CUDA_ONLY, text))
        scan.facts.inference_only = not _in_code(_TRAINS, text) and _in_code(_INFERS, text)
        scan.facts.evaluation_script = "DataParallel" in text and _evaluation_script(path, text)
        if "DataParallel" in text:  # PTT035: a part of the project that never trains; MAML's grads
            scan.facts.part_trains, scan.facts.second_order = trained_beside(path)
        # each regex only where a word it needs is in the text: an alternation of words is
        # searched position by position, a word alone at the speed of memchr
        scan.facts.has_ddp = any(w in text for w in _DDP_WORDS) and bool(_DDP.search(text))
        scan.facts.exports = any(w in text for w in _EXPORTS_WORDS)
        # PTT016: an ONNX export script, or a module written for one (named for ONNX)
        scan.facts.exports_onnx = "onnx.export(" in text or _named_for_onnx(path)
        # PTT030: which classes are nn.Modules (only a module's __init__ can hold its finding)
        scan.facts.nn_modules = nn_module_classes(tree, path) if "__init__" in text else frozenset()
        scan.facts.converts_weights = _named_for_conversion(path)
        if ".cpu()" in text:  # PTT015: a package named like a folder above the file is the project's
            scan.facts.path_folders = frozenset(os.path.dirname(os.path.abspath(path)).split(os.sep))
        scan.facts.loads_unsafely = "weights_only" in text and bool(_UNSAFE_LOAD.search(text))
        # PTT003: models too large for a second copy of their weights to be harmless
        scan.facts.large_models = "load_state_dict" in text and _in_code(V.LARGE_MODEL, text)
        # The project's declared floor and exact pin of torch: PTT001 reads the floor for a
        # torch.load (2.6+), and every rule whose advice needs a torch release (its needs_torch,
        # RuleVisitor.lacks_advice) reads both before it reports. Read lazily, the first time a
        # rule asks: no file system lookup for a file without a candidate finding.
        scan.facts.read_project = lambda: (declared_torch(path), pinned_torch(path))
        # ... and the release the project's own code already needs (an advised API it uses
        # unguarded): read only where a declared floor is older than a rule's advice needs
        scan.facts.read_proved = lambda: proved_torch(path)
        # PTT012: the project's functions that return only values holding no graph, read the
        # first time a running total would be reported
        scan.facts.read_graph_free = lambda: project_graph_free(path)
        # PTT012/PTT013: what every definition of a method of the project returns that holds no
        # graph (loss, meta = self.model.update(b) after return loss.item(), meta), read only for
        # a value that would be reported
        # (for a plain call of a function the file imports from a module of the project, that
        # module's definition alone: evaluate(...) after from .utils import evaluate)
        scan.facts.read_returns = lambda name, bare=False: (
            imported if bare and (imported := imported_returns(path, tree, name)) is not None
            else returns_with_own(path, tree, name))
        # PTT037: a model of an inference app, whose released checkpoints hold the biases
        scan.facts.serves_checkpoints = "BatchNorm" in text and "Conv" in text and _serves_checkpoints(path)
        # ... or a class another file of the project defines too (a twin sharing checkpoints)
        if "BatchNorm" in text and "Conv" in text:
            scan.facts.twin_classes = _twin_classes(path, text)
            # ... or a class the project never trains and only loads released weights into
            scan.facts.read_loaded_only = lambda: evaluator_classes(path, text)
            # ... or a project that keeps its BatchNorm layers frozen (eval(), no gradients)
            scan.facts.read_frozen_bn = lambda: freezes_batchnorm(path, text)
            # ... or a package whose files download its models' released weights
            # ... or a project whose READMEs publish its models' checkpoints, loaded strictly
            scan.facts.read_released = lambda: (_downloads_weights(text) or releases_weights(path)
                                                or documents_released(path, text))
        # PTT019: the file or its package turns gradients back on and differentiates
        if "no_grad" in text:
            scan.facts.read_reenables = lambda: grad_reenabled_below(path, text)
            # ... and the functions of the file or its project that all-reduce a parameter in place
            scan.facts.read_collectives = lambda: collective_functions(path, tree)
        # PTT041: the keys whose entry the file or its project reads back from a loaded
        # checkpoint as a module (ckpt["model"].float().state_dict()): a format of pickled modules
        # PTT004: whether the file or its project reads a whole module back on purpose
        if "save(" in text:
            scan.facts.builds_mliap = _MLIAP.search(text) is not None
            scan.facts.modules_read_back, scan.facts.reads_whole_modules = _modules_read_back(path, text)
            # ... and the project's functions that return dict literals (a serialized package)
            scan.facts.read_dict_returns = lambda name: dict_returns(path, tree, name)
        # PTT031: fused Adam raises on the complex parameters the file or its project creates
        scan.facts.complex_params = "Adam" in text and _complex_params(path, text)
        if "load(" in text or "save(" in text:  # PTT001 and PTT004 read them
            scan.facts.forces_unsafe_load = _sets_force_unsafe(text) or _package_forces_unsafe(path)
            scan.facts.allow_lists = "safe_globals" in text and _in_code(_ALLOW_LISTS, text)
        scan.text = scan.facts.source = text
        scan.facts.tree = tree
        scan.formats = scan.facts.mentions_cuda and "backward" in text
        scan.numpy = "numpy" in text
        scan.grad_text = "no_grad" in text or "inference_mode" in text
        # PTT021: datasets built on a device are read only where a loader and one may be
        scan.device_text = "DataLoader" in text and ("device=" in text or "ondevice" in text.lower())
        scan.walk(tree, [])
        if scan.facts.aliases and ("with " in text or "@" in text):
            # a grad-free context manager of the project's own, imported from another file
            scan.facts.grad_free_factories |= _imported_grad_free(path, text, scan.facts.aliases)
        scan.finish()
        scan.facts.function_names = {f.name for f in scan.functions}
        if "DataLoader(" in text:  # PTT020/PTT021: the loaders' datasets and collate functions
            _loader_facts(tree, path, scan.facts)
        # PTT032: only a candidate width (a hidden size of 64 or more, not a multiple of 8) has
        # the file's project read for reduced precision
        scan.facts.reduced_precision = not any(
            n >= 64 and n % 8 for n in scan.facts.linear_inputs & scan.facts.linear_outputs) or (
            _reduced_precision(path, text))
        # PTT016: data transforms whose forward reads its input with .numpy(): run on the CPU
        # (the scan has listed every def: no second walk of the tree for them)
        scan.facts.cpu_transforms = ".numpy()" in text and "def forward" in text and any(
            f.name == "forward" and _numpy_of_input(f) for f in scan.functions)
        # PTT001: a function put in place of one of torch's own keeps torch's load mode
        scan.facts.torch_replacements = frozenset(
            m.group(1) for m in _TORCH_REPLACED.finditer(text)) if "torch." in text else frozenset()
        qn = self.qn = _QualifiedNames(scan.facts.aliases)
        for v in self.visitors:
            v.metadata = {QualifiedNameProvider: qn, WhitespaceInclusivePositionProvider: _NoPositions()}
            v.facts = scan.facts
            v.violations = []
        lines = text.splitlines(keepends=True)
        found: dict[tuple[int, str], Finding] = {}
        if scan.whole:
            kept, blanked = _blank_unmarked(tree, scan.pieces.values(), lines)
            spots = scan.spots
            if blanked:  # the ast's positions of the nodes libcst no longer sees are dropped
                scan.spots = {k: [s for s in v if not any(a <= s[0] <= b for a, b in blanked)]
                              for k, v in spots.items()}
            try:
                results = self._whole(scan, kept, path)
            except cst.ParserSyntaxError:
                if not blanked:
                    raise
                scan.spots = spots  # the file as it is: slower, never a crash of the blanking's
                results = self._whole(scan, lines, path)
        else:
            results = [f for piece in _outermost(scan.pieces.values())
                       for f in self._check_piece(piece, scan, lines, path)]
        for f in sorted(results, key=lambda f: (f.line, f.col, f.code)):
            found.setdefault((f.line, f.code), f)  # one finding per rule and line
        out = list(found.values())  # still in that order
        if scan.facts.quiet_loaders:  # PTT020/PTT021: what the whole file shows of a loader
            quiet = scan.facts.quiet_loaders
            out = [f for f in out if f.code not in quiet.get(f.line, ())]
        if out and "noqa" in text:
            comments, spans = _comments(text), _header_spans(tree)
            out = [f for f in out if not _silenced(spans, comments, f)]
        return out

    def _check_piece(self, piece: ast.AST, scan: _Scan, lines: list[str], path: str) -> list[Finding]:
        start = _first_line(piece)
        end = piece.end_lineno
        first = lines[start - 1]
        indent = first[: len(first) - len(first.lstrip())]
        if _CLAUSE.match(first):  # a clause's body on its header line: not a statement alone
            return self._whole(scan, lines, path)
        segment = "".join(lines[start - 1:end])
        if not segment.endswith("\n"):
            segment += "\n"
        offset = start - 1
        if indent:
            segment, offset = "if 1:\n" + segment, start - 2
        try:
            module = _parse(segment)
        except cst.ParserSyntaxError:
            return self._whole(scan, lines, path)
        return self._run(module, offset, (start, end), scan, lines, at_module_level=not indent, path=path)

    def _whole(self, scan: _Scan, lines: list[str], path: str) -> list[Finding]:
        module = _parse("".join(lines))
        return self._run(module, 0, (1, len(lines)), scan, lines, at_module_level=True, path=path)

    def _run(self, module: cst.Module, offset: int, span: tuple[int, int], scan: _Scan, lines: list[str],
             *, at_module_level: bool, path: str) -> list[Finding]:
        before = [len(v.violations) for v in self.visitors]
        for v in self.own:
            v.at_module_level = at_module_level
        self.tracker.stack.clear()
        self.walk.reset()
        self.qn.cache.clear()  # keyed by id(): a freed piece's ids are reused by the next one
        self.qn.names.clear()
        V.NAMES_IN.clear()
        self.walk(module)
        new = []
        for v, n in zip(self.visitors, before):
            for violation in v.violations[n:]:
                code = self.torchfix[v].get(violation.error_code) if v in self.torchfix else violation.error_code
                node = violation.node
                if code is None or (isinstance(node, cst.Call) and V._star_kwargs(node)):
                    continue
                new.append((code, violation, v in self.torchfix))
        out = []
        resolved = None
        for code, violation, from_torchfix in new:
            where = self._from_ast(violation.node, span, scan, lines)
            if where is None:  # libcst's own positions: a codegen pass over the piece
                if resolved is None:
                    resolved = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
                pos = resolved[violation.node].start
                where = (pos.line + offset, pos.column + 1)
            out.append(Finding(path, where[0], where[1], code, V.RULES[code].finding,
                               violation.error_code if from_torchfix else None))
        return out

    def _from_ast(self, node: cst.CSTNode, span: tuple[int, int], scan: _Scan,
                  lines: list[str]) -> tuple[int, int] | None:
        """The node's (line, column) from the ast: the k-th node of its kind in the piece is the
        k-th ast node of that kind in the piece's lines, when both count the same number."""
        kind = type(node).__name__
        if kind not in POSITIONED or id(node) not in self.walk.ordinal:
            return None
        spots = scan.spots[kind]
        lo = bisect.bisect_left(spots, (span[0], -1, -10**9, -10**9))
        hi = bisect.bisect_left(spots, (span[1] + 1, -1, -10**9, -10**9))
        if hi - lo != self.walk.count.get(kind, 0):
            return None
        line, col = spots[lo + self.walk.ordinal[id(node)]][:2]
        text = lines[line - 1]
        if not text.isascii():  # ast columns count UTF-8 bytes
            col = len(text.encode("utf-8")[:col].decode("utf-8", errors="replace"))
        return line, col + 1


def _first_line(node: ast.AST) -> int:
    """The line a statement starts on, its decorators included."""
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


# PTT001: ``torch.storage._load_from_bytes = _mine`` on a line of its own
_TORCH_REPLACED = re.compile(r"^[ \t]*torch(?:\.\w+)+[ \t]*=[ \t]*([A-Za-z_]\w*)[ \t]*(?:#.*)?$", re.M)


def _blank_unmarked(tree: ast.Module, pieces: Iterable[ast.AST],
                    lines: list[str]) -> tuple[list[str], list[tuple[int, int]]]:
    """The file's lines with the body of each function or class that holds no piece (at the top
    level, or a method of a class that holds one) replaced by ``pass`` and empty lines: top-level
    code needs the whole file parsed, but no rule judges it by code it never marked, and libcst's
    parse and walk cost grows with the lines given. Line numbers and columns stay as they were.
    Also returns the blanked line ranges."""
    spans = [(_first_line(p), p.end_lineno) for p in pieces]
    out, blanked = list(lines), []

    def blank(body: list[ast.stmt]) -> None:
        for node in body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            head = node.body[0]  # its decorators, if any, start the body (a method's @staticmethod)
            first = _first_line(head)
            last = node.end_lineno
            if first == node.lineno:
                continue  # a body on the header's line
            if any(a <= last and b >= first for a, b in spans):
                if isinstance(node, ast.ClassDef):
                    blank(node.body)  # its other methods
                continue
            line = lines[first - 1]
            indent = line[:len(line) - len(line.lstrip())]
            if len(indent) <= node.col_offset:
                continue
            ending = "\r\n" if line.endswith("\r\n") else "\n"
            out[first - 1] = indent + "pass" + ending
            for i in range(first, last):
                out[i] = ending
            blanked.append((first, last))

    blank(tree.body)
    return (out if blanked else lines), blanked


def _outermost(pieces: Iterable[ast.AST]) -> list[ast.AST]:
    spans = sorted(((_first_line(p), p.end_lineno, p) for p in pieces), key=lambda s: (s[0], -s[1]))
    kept: list[tuple[int, int, ast.AST]] = []
    for s in spans:
        if kept and s[0] >= kept[-1][0] and s[1] <= kept[-1][1]:
            continue
        kept.append(s)
    return [s[2] for s in kept]


def _comments(text: str) -> dict[int, str]:
    found: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                found[tok.start[0]] = tok.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return found


def _header_spans(tree: ast.AST) -> dict[int, list[tuple[int, int]]]:
    """For each line, the statement spans holding it (in ``ast.walk`` order): all of a simple
    statement, the header of a compound one (``for ...:`` up to its body; decorators included).
    One walk per file, however many findings ask."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        first = _first_line(node)
        body = getattr(node, "body", None)
        last = (body[0].lineno - 1 if body and isinstance(body, list) and body[0].lineno > node.lineno
                else node.end_lineno if not body else node.lineno)
        for line in range(first, last + 1):
            spans.setdefault(line, []).append((first, last))
    return spans


def _innermost(spans: dict[int, list[tuple[int, int]]], line: int) -> tuple[int, int]:
    best = (line, line)
    for first, last in spans.get(line, ()):
        if best == (line, line) or last - first <= best[1] - best[0]:
            best = (first, last)
    return best


def statement_lines(tree: ast.AST, line: int) -> tuple[int, int]:
    """The lines of the innermost statement holding ``line``: all of a simple statement, the
    header of a compound one (``for ...:`` up to its body; decorators included)."""
    return _innermost(_header_spans(tree), line)


def _silenced(spans: dict[int, list[tuple[int, int]]], comments: dict[int, str], f: Finding) -> bool:
    """A ``# noqa`` (all rules) or ``# noqa: PTT012, PTT013`` on any line of the finding's statement
    (``spans``: :func:`_header_spans` of the file)."""
    first, last = _innermost(spans, f.line)
    for line in range(first, last + 1):
        m = _NOQA.search(comments.get(line, ""))
        if m and (m.group(1) is None or f.code in re.split(r"[,\s]+", m.group(1).upper())):
            return True
    return False
