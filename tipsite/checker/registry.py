"""The checker's rules: one stable code per pattern, the tip whose evidence judges it, examples.

Pure data, importable without libcst or torch (the tip validator, :mod:`tipsite.tipmeta`, checks
a tip's ``sphinx_gallery_tips_rules`` against :data:`RULES` in the docs build's environment).
The visitors that find each pattern live in :mod:`tipsite.checker.visitors`.

A rule's message has two halves. ``short`` (one line) and ``finding`` (the long form) say what
the code does, whatever any tip found. ``fix`` and ``advice`` say what to do instead; they are
printed only where the tip's verdict for the reader's device and torch is "holds". Elsewhere the
finding is a note that says what the evidence is instead (:mod:`tipsite.checker.evidence`).
``scope`` says what the rule leaves alone, so that it flags only code where its advice applies.
Rules are stable or in preview, as ruff has them. A stable rule runs by default; a preview rule
runs only with ``--preview`` or when selected by its full code (``--select PTT019``), and its
findings say so. A rule is stable only where its labelled findings show it (``status.json``: at
least 5 findings, at least 90% useful, none wrong, on the held-out codebases once they are
labelled); ``default=False`` keeps a rule in preview whatever the labels say (its static signal
is too weak for a default run: see its ``scope``).

``example`` is a small snippet the rule flags (exactly once, at ``example_at``: line, column);
``clean`` is the recommended form of the same code, which no rule may flag. The tests run both.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Rule:
    code: str
    tip: str  # the tip whose verdict the finding quotes, e.g. "tip_weights_only_load"
    title: str  # a few words, for tables
    finding: str  # what the flagged code does (neutral)
    advice: str  # what the tip recommends (shown only where its verdict holds)
    example: str
    example_at: tuple[int, int]  # (line, column), 1-based, of the finding in ``example``
    clean: str
    short: str = ""  # ``finding`` in a few words, for the one-line report
    fix: str = ""  # ``advice`` in a few words
    scope: str = ""  # what the rule does not flag, and why
    default: bool = True  # may be stable (status.json decides); False: always preview
    unlike_tip: str = ""  # why the rule does not flag its tip's own anti-pattern (it is narrower)
    torchfix: str | None = None  # the TorchFix error code this rule reports, where TorchFix has it
    # The first torch release that has what ``advice`` uses, where an older torch lacks it (the
    # advice would raise there); None: the advice works on every torch. The rule is silent where
    # the reader's torch, the project's exact pin or its declared floor is older (one place does
    # it for every rule: visitors.RuleVisitor.lacks_advice), and its scope says so (_OLDER_TORCH).
    # PTT005 and PTT031 give the release per advised name instead (their visitors' advice_needs).
    needs_torch: tuple[int, int] | None = None


def _snippet(text: str) -> str:
    return text.strip("\n") + "\n"


_RULES = [
    Rule(
        "PTT001", "tip_weights_only_load", "torch.load can run code",
        "torch.load that unpickles arbitrary objects (weights_only=False, or no weights_only before "
        "torch 2.6, when False was the default): a checkpoint can run code",
        "state the choice in the call: weights_only=True where the file holds only tensors (a "
        "state_dict); where it also holds objects, allow their classes with "
        "torch.serialization.add_safe_globals, or write weights_only=False only for files you trust, "
        "with a comment saying why (it keeps them loading on torch 2.6+, where the default became "
        "True)",
        _snippet("""
import torch
state = torch.load("ckpt.pt", weights_only=False)
"""), (2, 9),
        _snippet("""
import torch
state = torch.load("ckpt.pt", weights_only=True)
"""),
        short="torch.load may unpickle arbitrary objects: a checkpoint can run code",
        fix="choose weights_only in the call: True for a file of tensors, else allow-list its "
            "classes, or False with a comment for a trusted file",
        scope="The advice follows what the code shows: weights_only=True only for a file of tensors; "
              "nothing for a load that passes its own pickle_module= (torch refuses weights_only=True "
              "with one, and from 2.6 such a load defaults to False); "
              "for a file whose content the code does not show, stating the choice (allow-listed "
              "classes, or False for a trusted file) so that nothing stops loading. "
              "A torch.load without weights_only only for a torch older than 2.6 (weights_only=True is "
              "the default since 2.6), and not inside torch.serialization.safe_globals(...). Nothing "
              "where the project already decided how it loads: it sets "
              "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD (in the file or its package's __init__.py), or the "
              "file allow-lists classes with safe_globals/add_safe_globals or tests whether torch has "
              "them (its weights_only=False is the choice it made, or the branch for an older torch). "
              "Not a load into torch2trt's TRTModule (a TensorRT engine built locally for this GPU). "
              "Neither branch of an if (or a conditional expression) that tests torch's version "
              "(torch.__version__, a name bound to it or to a comparison of it, a flag named for torch "
              "2.6 or for weights_only) where a load in that if states weights_only: the project chose "
              "per release (False from 2.6, the argument left out for a torch that lacks it). "
              "Not a load in the except handler of a try that loaded where one of the two states "
              "weights_only (the fallback for an older torch or a refused payload; a retry with the "
              "same mode is reported like the first load). "
              "Not where "
              "the code shows the file holds more than tensors, so weights_only=True alone would "
              "raise: a Megatron/DeepSpeed per-rank model-state file (mp_rank_*: NumPy RNG state, the "
              "run's Namespace; named in the call, in a name or a path built from one, or by DeepSpeed's "
              "helpers get_model_state_file(s)/get_optim_files, each file of their list counting), a load whose function handles NumPy RNG state keys, a file that reads "
              "Namespaces out of what it loads, or one that reads back from a buffer a module or "
              "Namespace it pickled itself; a load whose value the function uses as a module (called, "
              "annotated Module, asked for .eval()/.state_dict()) or whose item it calls (a class "
              "stored in the file); a load reading keys of a dict that a torch.save of the same class "
              "or function writes with a setting (args, cfg), a .numpy() array or a get_...() object "
              "beside the tensors. Not a load of what the run just wrote: a child process's stdout, "
              "or a path that the function's training loop, before the load, hands to torch.save or, "
              "with the module, to a checkpoint callback; bytes the function pickled itself into a "
              "buffer (it torch.saves into an io.BytesIO and loads from a buffer or temporary file: "
              "objects passed between ranks), or a path with the same literal file name as one the "
              "function saved to before the load (a name rebound to the same file-name pattern, "
              "the rank's file then each rank's, counts), or a path (the same name or expression) that "
              "the function, before the load and not in another branch of an if, hands as the output "
              "file to DeepSpeed's or Lightning's convert_zero_checkpoint_to_fp32_state_dict(src, dst). "
              "Not a load, without weights_only, of a "
              "file its class writes itself (a dataset's processed cache: another method of the "
              "class saves to the same instance path, self.processed_paths[0], or to the same path "
              "expression built on the instance, os.path.join(self.processed_dir, f\"{split}.pt\"), "
              "or to a file with the same literal name beyond its extension, or to one that fits the "
              "load's file-name pattern: f\"{subset}_shuffle_split.pt\" written, "
              "f\"{subset}_{kind}_split.pt\" read), where no such save writes a state_dict (alone or in "
              "a dict: a checkpoint of weights, which weights_only=True loads as it is). Not a load, without "
              "weights_only, that the function reads only for a run's progress (int(sd[\"global_step\"]), "
              "ckpt.get(\"epoch\"); the reads after the load up to the next binding of its name): the "
              "run's own training checkpoint, resumed where it stopped. Nothing before 2.6 in a project whose requirements "
              "(pyproject.toml, requirements*.txt, setup.py; a README's \"torch>=\" or \"PyTorch 2.6 "
              "or later\" only where no requirement file names torch) need torch 2.6 or later. A load "
              "without weights_only not where the project's torch may lack the argument (1.13: see "
              "the last sentence); a load that states it already needs 1.13. An explicit weights_only=False only where the "
              "code does not show it deliberate: not under a comment that gives a reason about weights_only, pickling "
              "or the security risk (a purpose counts: \"to load the config too\"; one such comment "
              "covers a run of such loads on the lines below it), "
              "not in such a 2.6+ project "
              "(False was written to opt out), not where the function restores Python's or NumPy's "
              "RNG state, and not where the stated False is the advice's own choice for a file the "
              "program writes itself, with nothing in the code to show that True would load it: a "
              "resume (the function restores an optimizer's, scheduler's or scaler's state from the "
              "load: the run's own training checkpoint), or a cache (the function passes the path "
              "it loads to torch.save, or the path is the instance's, self.paths[0], and another "
              "method of the class saves to it or to the same path expression, or another method of "
              "the class saves to a path with the same literal file name, f\"{name}_state.pt\", or "
              "one that fits the load's file-name pattern); nor where the code uses the file as more than "
              "weights without showing what it holds (only a comment is missing): the function hands "
              "the whole load to another function (the project's loader, which knows its formats), "
              "probes it for format keys (\"state\" in ckpt: files of several formats) or reads only "
              "entries that are not weights out of it (ckpt[\"config\"] or ckpt.get(\"config\", {}): "
              "metrics, a config), or reads a Lightning checkpoint's hyper_parameters (or hparams: "
              "the run's config objects beside its weights). Not a load in a function the file puts "
              "in place of one of torch's own (torch.storage._load_from_bytes = f: it keeps torch's "
              "mode). Nothing in a branch no run "
              "takes (the else of `if 1:`, the body of `if 0:`).",
        torchfix="TOR102",
        # weights_only= came to torch.load in 1.13 (pytorch/pytorch#86812, "Add weights_only option to
        # torch.load"; the 1.13 docs are the first to list it)
        needs_torch=(1, 13),
    ),
    Rule(
        "PTT002", "tip_map_location", "torch.load without map_location",
        "torch.load without map_location restores every storage to the device it was saved from "
        "(e.g. cuda:0) before the .to() that follows can move it",
        "pass map_location=device to load straight onto the device you want",
        _snippet("""
import torch
state = torch.load("ckpt.pt", weights_only=True)
model.load_state_dict(state)
model.to("cuda")
"""), (2, 9),
        _snippet("""
import torch
state = torch.load("ckpt.pt", map_location="cuda", weights_only=True)
"""),
        short="torch.load without map_location, then moved: it first lands on the device it was saved from",
        fix="pass map_location=device",
        scope="Only a load whose result (or the module it is loaded into) is moved later in the same "
              "function (.to(), .cuda(), to_device(x, ...)): a load used where it lands needs no "
              "map_location; and not in a file that saves from the CPU (torch.save(x.cpu(), ...)), "
              "nor a load of a cache the same function writes (torch.save(x, path) to the same path) "
              "from values it never puts on a device, nor one in a branch that never runs (the else "
              "of if 1: / if True:, the body of if 0:). A checkpoint saved from the CPU by another "
              "file (a project's own save helper) is not seen: such loads are still flagged.",
    ),
    Rule(
        "PTT003", "tip_mmap_meta_load", "two copies of the weights while loading",
        "load_state_dict() of a torch.load() without mmap=True holds two full copies of the weights "
        "in memory (the module's and the loaded ones)",
        "torch.load(..., mmap=True), build the model under torch.device('meta') and call "
        "load_state_dict(sd, assign=True)",
        _snippet("""
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_config(config)
model.load_state_dict(torch.load("ckpt.pt", weights_only=True))
"""), (4, 1),
        _snippet("""
import torch
from transformers import AutoModelForCausalLM
sd = torch.load("ckpt.pt", weights_only=True, mmap=True)
with torch.device("meta"):
    model = AutoModelForCausalLM.from_config(config)
model.load_state_dict(sd, assign=True)
"""),
        short="load_state_dict(torch.load(...)) holds two copies of the weights",
        fix="load with mmap=True, build under torch.device('meta'), assign=True",
        scope="Off by default: it pays only for models whose weights are a large share of memory, "
              "so only in a file whose code shows them: it shards its models (FSDP, fully_shard), "
              "loads them the big-model way elsewhere (accelerate's init_empty_weights or "
              "load_checkpoint_and_dispatch, a device_map, low_cpu_mem_usage) or builds causal "
              "language models (a ...CausalLM class, from_config); a model of a few hundred MB "
              "loaded once holds its second copy only for a moment. Not in a branch no run takes "
              "(the else of `if 1:`). Not a load_state_dict of a "
              "data loader, sampler or batch generator (its position in the data, not weights); nor "
              "a partial load (strict=False, or a strict the code does not show True: the keys the "
              "file lacks would stay on the meta device), nor the .module of a wrapper (DDP, "
              "DataParallel), nor "
              "a module whose parameters something already holds, which assign=True would replace: "
              "moved or cast (.to(), .cuda(), .half(), .float()), handed to an optimizer "
              "(.parameters()) or wrapped (EMA, DDP, FSDP, torch.compile; under any alias) earlier in "
              "the function (or the file's top-level code), or, for self.x, anywhere in the class, "
              "or in an object that keeps an optimizer or EMA, or in a function that also loads an "
              "optimizer's or EMA's state (a resume: they hold these parameters). Not a load per "
              "file in a loop over the files (shards, one tensor per file: the memory-efficient path "
              "already), nor into torch2trt's TRTModule (an engine, no Parameters).",
        default=False,
        unlike_tip="The tip's model is a stack of layers sized to make the copy measurable; the "
                   "rule fires only where the file's code shows a large model (sharded, loaded the "
                   "big-model way, or a causal language model).",
        # torch.load(mmap=True) and load_state_dict(assign=True): the tutorial "Tips for Loading an
        # nn.Module from a Checkpoint" says "This recipe requires PyTorch 2.1.0 or later" (mmap:
        # pytorch/pytorch#102549)
        needs_torch=(2, 1),
    ),
    Rule(
        "PTT004", "tip_state_dict", "torch.save of a whole module",
        "torch.save(model) pickles the module object: loading it needs the same classes, importable "
        "under the same names (and weights_only=False)",
        "save model.state_dict() and load it into a freshly built model",
        _snippet("""
import torch
model = Net()
torch.save(model, "model.pt")
"""), (3, 1),
        _snippet("""
import torch
model = Net()
torch.save(model.state_dict(), "model.pt")
"""),
        short="torch.save(model) pickles the module object, not just its weights",
        fix="save model.state_dict()",
        scope="Only a first argument named like a model (model, net, module, network) or bound to an "
              "nn.Module built in the same file, and not one the function shows may be no module: a "
              "parameter not annotated as a Module, a name it binds to torch.load(...), a dict container "
              "({}, a dict comprehension, dict(), OrderedDict(), defaultdict(...): a state dict "
              "built by hand) or a state_dict(), or one it also hands to safetensors' save_file; at "
              "a script's top level, a name the module binds to such a dict container; nor a name "
              "bound to a plain call of a function the file defines or imports from its project that "
              "returns only dict literals (model = serialize_model(net)), or to an item of a dict the "
              "function builds (package = {}) under a key where it puts only dicts (package['model'] "
              "= serialize_model(net); model = package['model']). Not a save in a function whose "
              "docstring documents the whole pickled module as its format (names torch.save and says "
              "the file is a pickle, loads back with torch.load, or holds the full model): its users "
              "load it as a module. Not where the project's "
              "model files are whole pickled modules its own loaders read: the file or its package "
              "sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD, or the saving function torch.loads a module "
              "itself (asks it for .state_dict(), .parameters(), .eval()), or another file of its "
              "part of the project (its top folder; the whole project for a file at the root; not "
              "the saving file itself, whose own reload is the round trip the tip is about) loads one with torch.load(..., weights_only=False) and uses the value as a "
              "module (after casts such as .to(...): called, asked for .eval(), .parameters() or "
              ".state_dict(), or returned by a load_model-named function or one annotated to return "
              "a Module). A loader that leaves weights_only out fails on torch 2.6 and later: the "
              "save is still reported there. Not a save on one branch of an if whose other branch "
              "saves a state_dict() (a save_weights_only option: the user chose the whole module), "
              "nor in a file that names LAMMPS's ML-IAP interface (mliap), whose pair_style loads "
              "the artefact as a whole pickled module.",
    ),
    Rule(
        "PTT005", "tip_mixed_precision", "torch.cuda.amp",
        "torch.cuda.amp (autocast, GradScaler, custom_fwd/custom_bwd) is deprecated (a FutureWarning "
        "since torch 2.4)",
        "use torch.amp.autocast('cuda', ...) and torch.amp.GradScaler('cuda'), around the forward "
        "pass and the loss only; torch.amp.custom_fwd/custom_bwd(device_type='cuda') on a custom "
        "autograd Function",
        _snippet("""
import torch
with torch.cuda.amp.autocast():
    loss = model(x).sum()
"""), (2, 6),
        _snippet("""
import torch
with torch.amp.autocast("cuda"):
    loss = model(x).sum()
"""),
        short="torch.cuda.amp is deprecated (FutureWarning since torch 2.4)",
        fix="use torch.amp's autocast('cuda'), GradScaler('cuda'), custom_fwd(device_type='cuda')",
        scope="Not for a torch older than 2.4, where it is not deprecated, nor an older torch's "
              "fallback: code in an except AttributeError/TypeError/ImportError after the new API "
              "was tried, or under a version or hasattr check, and a name imported from "
              "torch.cuda.amp in the except ImportError (or AttributeError) of a try that imported "
              "the same name from torch's newer API (it keeps what the try bound it to); nor in a "
              "project that pins torch exactly to a release before 2.4 (requirements, a conda "
              "env*.yml, an install*.sh; an exact torchvision or torchaudio pin, e.g. torchvision=="
              "0.15.2, pins the torch it is built for, 2.0; none giving torch an open range): it runs "
              "there. Nor in a project whose declared torch floor (torch>=1.8 in the nearest "
              "requirement file, pyproject.toml or setup.py; a README's \"PyTorch 1.8 or later\" "
              "or \"install PyTorch (at least 1.8)\" only where none names torch, as for PTT001) is older than the release that has the "
              "advised spelling: torch.amp.autocast 1.12, torch.amp.GradScaler('cuda') 2.3, "
              "torch.amp.custom_fwd/custom_bwd (and any other name) 2.4; there the advice raises an "
              "AttributeError on a torch the project supports. Such a floor does not count where the "
              "project's own code (tests aside) already uses, unguarded (no test of torch's version "
              "or hasattr, no try catching TypeError, AttributeError or ImportError), an API of that "
              "release or later (weights_only= 1.13, torch.amp.GradScaler 2.3...): it needs that torch already.",
    ),
    Rule(
        "PTT006", "tip_zero_grad_set_to_none", "zero_grad(set_to_none=False)",
        "zero_grad(set_to_none=False) fills every .grad with zeros instead of dropping it",
        "call zero_grad() (set_to_none=True is the default since torch 2.0)",
        _snippet("""
import torch
optimizer.zero_grad(set_to_none=False)
"""), (2, 1),
        _snippet("""
import torch
optimizer.zero_grad()
"""),
        short="zero_grad(set_to_none=False) writes zeros into every .grad",
        fix="call zero_grad()",
        scope="Not in a file that adds into .grad by hand (p.grad += g, p.grad.add_(g)): that needs "
              "the zero tensors.",
    ),
    Rule(
        "PTT007", "tip_variable_wrapping", "Variable(...)",
        "torch.autograd.Variable(t) is deprecated and returns t detached: harmless on input "
        "data, it silently cuts the graph on an intermediate result",
        "use the tensor itself (x.detach() where the cut is meant); Variable(x, "
        "requires_grad=True), a leaf to differentiate against (a gradient penalty's input), is "
        "x.detach().requires_grad_(): keep the flag, or autograd.grad has nothing to reach "
        "(torch.tensor(..., requires_grad=True) for new data)",
        _snippet("""
from torch.autograd import Variable
x = Variable(torch.ones(3), requires_grad=True)
"""), (2, 5),
        _snippet("""
import torch
x = torch.ones(3, requires_grad=True)
"""),
        short="Variable() is deprecated and detaches an intermediate result",
        fix="use the tensor itself; Variable(x, requires_grad=True) is "
            "x.detach().requires_grad_()",
        scope="Not in an if __name__ == \"__main__\": block (a demo of the file), nor a "
              "Variable(x, requires_grad=True) made as a leaf to differentiate against (in a "
              "function that calls torch.autograd.grad or is named for a penalty): only a cosmetic "
              "x.detach().requires_grad_() rewrite remains there.",
        # Tensor and Variable merged in 0.4 (PyTorch 0.4.0 Migration Guide): before it, x.detach().
        # requires_grad_() and torch.tensor(..., requires_grad=True) do not do what Variable did
        needs_torch=(0, 4),
    ),
    Rule(
        "PTT008", "tip_module_list", "layers or parameters in a plain list",
        "a plain Python list of layers or Parameters assigned in __init__ hides them from the "
        "module: no parameters(), state_dict(), .to() or optimizer for them",
        "use nn.ModuleList for layers and nn.ParameterList for Parameters",
        _snippet("""
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(8, 8) for _ in range(3)]
"""), (5, 9),
        _snippet("""
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
"""),
        short="layers or Parameters in a plain list are invisible to the module",
        fix="use nn.ModuleList / nn.ParameterList",
        scope="Only a list, assigned to self in a module's __init__, built by calling a class of "
              "torch.nn (a layer, nn.Parameter): a list made by one of torch.nn's helper functions "
              "(_pair(p), init.*, functional.*) holds tuples or tensors, which ModuleList and "
              "ParameterList cannot hold. Not a list whose modules the class registers another way: "
              "it hands the list to a torch.nn container (nn.Sequential(*self.layers)) or adds its "
              "items with add_module/register_module in a loop over it (a ModuleList too would "
              "register them twice, under new state_dict keys). Not a list that a later statement of "
              "the same __init__ rebinds to a call taking it (self.stem = OpSequential(self.stem)): "
              "the list was a builder, and the call (a container of the project's) makes what the "
              "module keeps.",
    ),
    Rule(
        "PTT009", "tip_module_list", "nn.ModuleList of Parameters",
        "nn.ModuleList of Parameters raises TypeError: a Parameter is not a Module",
        "use nn.ParameterList for Parameters",
        _snippet("""
from torch import nn
params = [nn.Parameter(torch.ones(8)) for _ in range(3)]
scales = nn.ModuleList(params)
"""), (3, 10),
        _snippet("""
from torch import nn
params = [nn.Parameter(torch.ones(8)) for _ in range(3)]
scales = nn.ParameterList(params)
"""),
        short="nn.ModuleList of Parameters raises TypeError",
        fix="use nn.ParameterList",
    ),
    Rule(
        "PTT010", "tip_arange_indexing", "H[torch.arange(B), k] for a fixed k",
        "H[torch.arange(len(H)), k] with an integer k picks row k of every batch element, which is "
        "what H[:, k] returns",
        "write H[:, k]: the same rows, as a view of H, without an index tensor",
        _snippet("""
import torch
first = H[torch.arange(H.shape[0]), 0]
"""), (2, 9),
        _snippet("""
import torch
first = H[:, 0]
"""),
        short="H[torch.arange(len(H)), k] with an integer k is H[:, k]",
        fix="write H[:, k]",
        scope="Only a torch.arange over all of H's first dimension (H.shape[0], H.size(0), len(H)) "
              "paired with an integer literal: with one index per batch element (idx of shape [B]) "
              "the arange form is already right and H[:, idx] would differ, an arange over other rows "
              "is not a colon, and np.arange or jnp.arange index NumPy or JAX arrays.",
        unlike_tip="The tip's idx is a parameter whose kind (scalar or one per row) the code does not "
                   "show; the rule flags only an integer literal.",
    ),
    Rule(
        "PTT011", "tip_sync_points", ".item() on every training step",
        "a .item() / .tolist() / .numpy() on every step of a training loop makes the host "
        "wait for the GPU's queue to drain before it can queue the next step",
        "accumulate on the device (loss.detach()) and read the value every N steps or after the loop",
        _snippet("""
import torch
total = 0.0
for batch in loader:
    loss = step(batch)
    loss.backward()
    total += loss.item()
"""), (6, 14),
        _snippet("""
total = torch.zeros(())
for batch in loader:
    loss = step(batch)
    loss.backward()
    total += loss.detach()
print(total.item())
"""),
        short=".item() on every training step makes the host wait for the GPU",
        fix="accumulate with .detach() on the device, read it every N steps",
        scope="Only in a loop whose own body calls backward() (itself, in a closure it defines, or through "
              "a loss scaler: one iteration is one step), or outside the loops of a function that itself "
              "calls backward() and an optimizer's step() outside its loops (one call is one step) and that "
              "a loop of the same file calls (not a loop that tests what it returns, nor a loop over "
              "epochs, range(...) naming an epoch, that calls it directly: one full-batch step per "
              "epoch), or in a method a trainer "
              "calls after every step (after_step, after_train_step, after_train_iter, on_train_batch_end) "
              "of a class deriving from a hook or callback class, in a file that names CUDA, under no if "
              "but a test of what the trainer holds (\"loss\" in out, x is not None, isinstance) or a rank "
              "guard; not under an if inside the loop or function (logging every N steps; a rank or distributed guard is no such if), not under no_grad (an evaluation inside the "
              "loop), and not in a loop or function that already reads a value every step to decide something (if not "
              "math.isfinite(loss.item()), or a tensor tested as a bool in the loop: if torch.isnan(loss):, "
              "if not mask.any():), where one more read costs nothing, nor a read whose value the "
              "test of its own while loop reads (value = -out.item() under while value < 0.99: the "
              "loop needs it to stop). Not the .item() of a NumPy value (np.finfo(np.float32).eps.item(), "
              "calls and attributes from np or numpy): no tensor. Reads are .item(), .tolist() "
              "and .numpy(), and float(loss) of a name the loop itself calls backward() on: a bare "
              ".cpu() also moves modules (for RPC, for saving). Not a read of a name that the function "
              "only ever binds to a value on the CPU: moved to a device bound to the CPU (loss_device = "
              "torch.device('cpu'); e = embeds.to(loss_device), or .cpu()), or computed by a call whose "
              "arguments are all such names or constants (loss = model.loss(e)): a host value, whose "
              "read waits for no GPU. Not a read of the batch a for loop takes from torch's own "
              "DataLoader bound in the file (through enumerate, tqdm, zip; not one over a "
              "TensorDataset, whose tensors may be on the GPU, nor one whose collate_fn is not a plain "
              "function name or names one of the file's functions that puts tensors on CUDA, nor one "
              "handed to a prepare() call such as accelerate's; every binding of the loader's name "
              "such a DataLoader), or of its .data, an item or a cast of it (points.data.numpy(), "
              "labels.tolist()), where nothing in the loop binds the name again before the read (no "
              "points = points.cuda() earlier): the loader's tensor is on the host.",
        unlike_tip="The tip sweeps the log spacing (a read under `if step % every == 0`); the rule flags "
                   "only reads on every step, where the tip measured the cost.",
    ),
    Rule(
        "PTT012", "tip_mean_loss_leak", "mean_loss += loss",
        "adding a loss tensor to a running total (x += loss) records the addition in autograd: the "
        "total keeps every step's graph alive",
        "add loss.detach() (it stays on the device: read the total once, after the loop)",
        _snippet("""
import torch
mean_loss = 0
for inputs, target in loader:
    loss = criterion(model(inputs), target)
    loss.backward()
    mean_loss += loss
"""), (6, 5),
        _snippet("""
import torch
mean_loss = 0
for inputs, target in loader:
    loss = criterion(model(inputs), target)
    loss.backward()
    mean_loss += loss.detach()
"""),
        short="a loss tensor added to a running total keeps every step's graph alive",
        fix="add loss.detach()",
        scope="Not a total that is itself differentiated later (style_loss += ...; (content + "
              "style_loss).backward(), or an engine's accelerator.backward(loss) / "
              "booster.backward(loss=loss / k), Lightning's self.manual_backward(loss) after loss += term), "
              "nor one returned by a forward() or a function named after a loss, "
              "nor one returned by any function unless its terms were backpropagated already or the loop "
              "runs over batches: the caller may backpropagate it (.detach() on a term would stop that "
              "branch training); not under no_grad/inference_mode (a decorator of the project's own "
              "that returns one included, or a context manager given no_grad=True); not a string that "
              "formats a loss (log += \"{}\".format(loss), "
              "an f-string, %); not a value that holds no graph: .detach() or .item() anywhere in its "
              "chain (loss.detach().float()), or a name bound (last, in the same function) to such a "
              "value or to one computed under no_grad (out = model(x) under no_grad; loss = out.loss), "
              "or to what a function or method defined in the file (f(x), self.f(x)) returns when each "
              "of its returns holds no graph (return loss.item(); a name it binds only to such values; a "
              "collective such as all_reduce_mean(loss.detach())), or to the item of the tuples it "
              "returns that holds none (loss, acc = self.eval_step(b) after return loss.detach(), acc); "
              "not a gradient or .data (p.grad), nor torch's function of values that hold no graph "
              "(torch.exp(loss.detach())), nor a call of a function of the project (in any file, any "
              "receiver: self.net.get_grads()) whose every definition returns only such values "
              "(torch.cat of the parameters' .grad), unless a name bound to a loss with its graph is "
              "added beside it, nor a name bound to the tuple item that every definition of a method "
              "of the project returns as a number (loss, meta = self.model.update(b) where each update "
              "returns loss.item(), meta; one that passes the call on or returns nothing leaves it to "
              "the others; a name a method binds again before it returns it counts by its last "
              "binding: loss = reduce(loss).item() after the backward, then return loss, n), nor a total "
              "that holds only numbers (total = 0, then total += batch_loss of such a number: "
              "epoch_loss += total is a float too). What a name holds is kept across a function defined inside the loop (a "
              "total of .item() values stays a number). Not a value that is a number as far as its "
              "function shows: a conditional that converts a name in one branch and gives it bare in "
              "the other (total += x.item() if cond else x) where the function also binds that name "
              "to a number (x = 0.0) or the condition tests its type (torch.is_tensor(x), "
              "isinstance(x, torch.Tensor)); nor Python's or NumPy's functions (sum, len, np.mean, "
              "statistics.mean) or arithmetic of names the function binds only to numbers or to "
              "lists filled only with them.",
    ),
    Rule(
        "PTT013", "tip_detach_logged_values", "logging tensors that carry a graph",
        "appending a loss (or a value computed from it) to a list keeps its autograd graph alive "
        "as long as the list",
        "append loss.detach() (read the values once, after the loop)",
        _snippet("""
import torch
history = []
for inputs, target in loader:
    loss = loss_fn(model(inputs), target)
    history.append(loss)
"""), (5, 5),
        _snippet("""
import torch
history = []
for inputs, target in loader:
    loss = loss_fn(model(inputs), target)
    history.append(loss.detach())
"""),
        short="a loss tensor appended to a list keeps its graph alive",
        fix="append loss.detach()",
        scope="Not a list that is differentiated later (torch.stack(losses).sum().backward()), nor one "
              "replaced by the tensor it joins in the same function (scores = torch.stack(scores), "
              "feats = torch.cat(feats)) after a loop that is not over batches (per-task scores, "
              "features: a tensor assembled, not a log), nor one "
              "returned by a forward() or a function named after a loss, nor one returned by any function "
              "unless its terms were backpropagated already or the loop runs over batches; not under "
              "no_grad/inference_mode, nor in a function called only from grad-free ones; not a Python "
              "number (round(), float()), an object a builder makes (build_loss(cfg)), an append in "
              "__init__, or what accelerator.backward(loss)'s engine returns, nor a value computed from "
              "outputs made under no_grad, followed through the names that hold it (a loss of "
              "logits computed under no_grad has no graph). A call's value carries a loss only when "
              "the call names a loss or its receiver or an argument holds one: a parameter or loop "
              "target that merely says loss (stats = self.step(batch, loss_info)) is no evidence, "
              "nor is an object a constructor makes (LpLoss(d=2), nn.MSELoss(), a class of the file: "
              "a loss function, not a loss) or a name bound to one, nor a setting read with a plain "
              "default (cfg.loss_weights.get(name, 1.0)). Not a value that holds no graph: one bound "
              "to what a function or method of the file (f(x), self.f(x)) returns detached or as a "
              "number (whole, or the tuple item each of its returns detaches: loss, acc = "
              "self.eval_step(b) after return loss.detach(), acc), nor a loop target that is a dict's key "
              "(for loss in d.keys(), the first of for loss, v in d.items()) or a string of a literal "
              "list (for loss in ['l1', 'mse']), nor a name bound to the tuple item that every "
              "definition of a method of the project returns as a number (loss, meta = "
              "self.model.update(b) where each update returns loss.item(), meta; one that passes the "
              "call on or returns nothing leaves it to the others), nor a name bound to what a function "
              "the file imports from a module of its project (from .utils import evaluate; loss, acc = "
              "evaluate(...)) returns as a number there (return meter.avg, where the meter, an object the "
              "function builds, is fed only loss.item() and the like), whatever the project's other "
              "functions of that name return; nor a NumPy call's value (np.mean(x): NumPy takes no "
              "tensor that requires grad), nor what a call returns that is handed only an object a "
              "constructor makes under a name that says loss (loss_ = AverageMeter(); pack = "
              "self.train(params, loader, loss_)). Not a local list the function "
              "never reads (only appends to) filled by a loop that is not over batches (a decoder's "
              "states over time steps): it dies with the function and keeps nothing its own values "
              "do not. Not a value computed from numbers as far as its function shows: Python's or "
              "NumPy's functions (np.mean, np.std, statistics.mean, sum(...) / len(...)) or arithmetic "
              "of a list the function fills only with numbers (losses = [] and only "
              "losses.append(loss.item()) or float(loss); an extend, insert, item assignment or += of "
              "a tensor, or a function defined inside that may fill it, makes it unknown), or of names the function binds only to such values "
              "(m = np.mean(losses)); nor a conditional that converts a name in one branch and gives "
              "it bare in the other (x.item() if cond else x) where the function also binds it to a "
              "number or the condition tests its type. Not a value computed only from tensors made "
              "new from data (torch.from_numpy(preds), torch.tensor(array), torch.ones(n), "
              "torch.zeros_like(x), without requires_grad=; not torch.as_tensor, which gives back a "
              "tensor as it is), detached or made under no_grad: a loss of such predictions, or a call "
              "named for a metric or score (metric(preds, targets, mask, weights)) whose every "
              "argument is one of them or None (m if m is not None else None counts as one).",
    ),
    Rule(
        "PTT014", "tip_from_numpy", "torch.tensor(ndarray)",
        "torch.tensor(ndarray) always copies the array's data",
        "torch.from_numpy(array) (or torch.as_tensor) shares the array's memory instead",
        _snippet("""
import numpy as np
import torch
for step in range(100):
    array = np.zeros(1000, dtype=np.float32)
    t = torch.tensor(array)
"""), (5, 9),
        _snippet("""
import numpy as np
import torch
for step in range(100):
    array = np.zeros(1000, dtype=np.float32)
    t = torch.from_numpy(array)
"""),
        short="torch.tensor(ndarray) copies the array",
        fix="use torch.from_numpy(array)",
        scope="Only a copy made again and again: in a loop, or in __getitem__, forward, a collate "
              "function or a step; a one-off copy at start-up saves nothing that matters, nor does a "
              "loop of a script named for converting weights (convert_x.py), run once over a "
              "checkpoint. Not a name "
              "the function binds itself (a parameter, a loop target) and never to a NumPy call, "
              "whatever the same name holds elsewhere in the file. Not a torch.tensor(array, dtype=..., "
              "device=...): converted or moved as it is made, it copies with from_numpy too.",
        unlike_tip="The tip copies one array at top level to time the copy; the rule flags only copies "
                   "made again and again, where the copy's cost adds up.",
    ),
    Rule(
        "PTT015", "tip_module_conventions", ".cuda() / .cpu() in forward",
        ".cuda() / .cpu() inside forward hard-codes a device: the model fails, or copies, wherever "
        "its weights live elsewhere",
        "create tensors on the input's device (device=x.device) or register them as buffers, and "
        "let the caller move the model with .to(device)",
        _snippet("""
import torch
class Net(torch.nn.Module):
    def forward(self, x):
        return self.lin(x.cpu())
"""), (4, 25),
        _snippet("""
import torch
class Net(torch.nn.Module):
    def forward(self, x):
        return self.lin(x)
"""),
        short=".cuda()/.cpu() inside forward hard-codes a device",
        fix="use the input's device (device=x.device)",
        scope="Only in a model's forward (not a loss, matcher or post-processor); not a .cpu() turned "
              "into numbers at once (.cpu().numpy(), .tolist(), also through .detach() and the like, "
              "and through torch's functions of it: torch.zeros_like(x.cpu()).numpy(), NumPy work), "
              "nor one handed, at once or through a local name, to a function that is not torch's (a "
              "kernel's batch sizes: its contract may need the CPU) or to pack_padded_sequence's "
              "lengths, or to a method of an object that another package (not torch, not one named "
              "like a folder above the file, not a class of the file) builds in the module "
              "(self.decoder = CTCBeamDecoder(...); self.decoder.decode(logits.cpu()): a CPU-only "
              "library's search), nor a CPU fallback (in an except handler, or on a branch for a device that "
              "lacks the operator, such as MPS), nor a .cpu() in the forward's evaluation-only branch "
              "(if not self.training:), whose outputs go to a host-side evaluator, nor in a forward "
              "that keeps its input's device in a name and moves tensors to it (device = x.device; "
              "out.to(device)): it offloads to the CPU on purpose (chunked inference gathering its "
              "outputs on the host) and returns, nor in a file that uses RPC, which sends CPU tensors. "
              "Not a .cpu() on a branch that parks tensors on the host on purpose (its test names a "
              "cpu, offload or cache: if self.cpu_cache:, if emb_cache is not None:), nor a .cuda() "
              "in a class that wraps its network in nn.DataParallel (CUDA only: moving the input is "
              "its job). Not a .cpu() on a path taken only where the CPU is the device (the else of "
              "if torch.cuda.is_available():, the body of if not torch.cuda.is_available(): or of "
              "if x.device.type == 'cpu':, or after an earlier if torch.cuda.is_available(): that "
              "returns): the CPU is the input's device there. Not a .cpu() bound to a name (or passed "
              "to a call that is: x = denorm(x.cpu())) whose value the forward then turns into a PIL "
              "image or NumPy (ToPILImage()(x[i]), to_pil_image, Image.fromarray, np.asarray, "
              "x[i].numpy()): the host-side consumer needs the host copy. Not a .cuda() given "
              "another tensor's device (.cuda(x.get_device()), .cuda(x.device)): the input's own "
              "device (a bare .cuda() under if x.is_cuda: is still flagged: it moves to the current "
              "device, not x's).",
    ),
    Rule(
        "PTT016", "tip_module_conventions", "tensor created in forward without device=",
        "a tensor created inside forward without device= lands on the default device (the CPU), "
        "not on the input's",
        "pass device=x.device (or use torch.*_like, or a registered buffer)",
        _snippet("""
import torch
class Net(torch.nn.Module):
    def forward(self, x):
        mask = torch.ones(16)
        return self.lin(x) * mask
"""), (4, 16),
        _snippet("""
import torch
class Net(torch.nn.Module):
    def forward(self, x):
        mask = torch.ones(16, device=x.device)
        return self.lin(x) * mask
"""),
        short="tensor created in forward without device= lands on the CPU",
        fix="pass device=x.device",
        scope="Only in a model's forward; not a factory moved at once, itself or what is computed "
              "from it on the way (torch.zeros(n).to(x.device), torch.empty(n).uniform_().cuda(), "
              "(torch.arange(n) % k).to(device), torch.eye(n).type(x.type()), whose type string names "
              "x's device; through indexing, views and attribute reads on the way too: "
              "torch.linspace(0, 1, h)[None, :, None].expand(b, h, w).to(x), torch.eye(n).T.type_as(x); "
              "a hard-coded .cuda() is PTT015's), nor one bound to "
              "a name that is only ever moved, itself or through names computed from it (mask = "
              "torch.zeros(n, n); padded = F.pad(mask, p); torch.cat([padded, m]).to(x.device)), nor a "
              "placeholder for a name that the other branch of the if computes from .cpu() inputs "
              "(it mirrors that branch's device), nor one bound to a name read only on the way to "
              "pack_padded_sequence's lengths (which must be on the CPU: mask = torch.ones(b, t); "
              "lengths = mask.sum(1)), nor "
              "torch.tensor of anything but a list, tuple or comprehension written there (a number "
              "is a 0-d tensor used as a scalar; shapes, lengths and sizes are metadata meant for "
              "the CPU), nor one handed, at once or through a local name, to a function that is not "
              "torch's (an extension kernel's output buffer: its contract may need the CPU), nor one "
              "random number (torch.rand(1), torch.randint(0, n, ())) read on the host for a branch "
              "or a slice; not a default value or decorator of the method (evaluated once, when the "
              "class is defined), nor an empty tensor (a literal 0 in its shape: a placeholder such "
              "as torch.zeros(0, 0, 0) for 'no cache' holds no data), nor in an ONNX export script, or "
              "a file named for ONNX (models_onnx.py), that never names a GPU. Not a factory read on the "
              "host at once (torch.empty(1).uniform_(a, b).item(), through in-place random fills and "
              "methods without arguments: a number, where device= would only add a sync), nor in a file "
              "whose modules are data transforms run on the CPU (a forward in it calls .numpy() on its "
              "input, its first argument, with no .cpu() on the way, which only a CPU tensor allows), "
              "nor one built in the branch of an if that tests a cache and stores the result in a "
              "self attribute named for a cache (self.cached_bias = b): once per miss, not per call. "
              "Not a factory on a path taken only where the CPU is the device (the else of if "
              "torch.cuda.is_available():, the body of if not torch.cuda.is_available(): or of if "
              "x.device.type == 'cpu':, or after an earlier if torch.cuda.is_available(): that "
              "returns): the CPU is the input's device there; an elif after the CUDA test, or the "
              "else of x.device.type == 'cuda', may be MPS and is still read. Not a factory after "
              "a statement at the top of the forward that rebinds its input from the input's own "
              ".cpu() copy (x = self.denorm(x.cpu())): the CPU is the input's device from there on; "
              "nor one bound to names that the statements right after rebind, each from itself "
              "moved to a device taken from elsewhere (a, b = torch.meshgrid(torch.arange(h), "
              "torch.arange(w)); a = a.float().to(x.device)).",
        unlike_tip="The tip's model moves its factory to the GPU at once (torch.ones(16).cuda()), "
                   "which is PTT015's finding; the rule flags factories left on the default device.",
    ),
    Rule(
        "PTT017", "tip_module_conventions", "torch.no_grad() in forward",
        "torch.no_grad() inside forward decides for every user that this part gets no gradient: "
        "fine-tuning it silently does nothing",
        "leave gradient mode to the caller; freeze from outside with requires_grad_(False)",
        _snippet("""
import torch
class Net(torch.nn.Module):
    def forward(self, x):
        with torch.no_grad():
            h = self.encoder(x)
        return self.head(h)
"""), (4, 14),
        _snippet("""
import torch
class Net(torch.nn.Module):
    def forward(self, x):
        return self.head(self.encoder(x))
"""),
        short="torch.no_grad() in forward stops gradients for every caller",
        fix="leave gradient mode to the caller",
        scope="Only in a model's forward (a loss, such as a distillation teacher's, a matcher or a "
              "post-processor computes without gradients on purpose), and only a block that runs a "
              "submodule (self.encoder(x), an attribute that is no method of the class, nor one only "
              "ever bound to an instance of a plain class of the file, such as a resize-and-normalise "
              "object, or to a lambda: no parameters to freeze) and writes nothing in place. It leaves "
              "alone what it cannot tell from a deliberate choice: a "
              "block that writes in place (a weight renormalised with copy_, a buffer of counts), "
              "one that computes with functions or the class's own methods (hard alignments, "
              "sampled points, routing indices), a submodule the same forward also calls with "
              "gradients (a self-conditioning pass), files that export a model (a wrapper for "
              "tracing), and a momentum (EMA) encoder or a teacher (a submodule named momentum_..., "
              "ema_... or teacher, or a forward that calls a momentum or EMA update, as MoCo's "
              "does): updated by a moving average, never by gradients, its no_grad is the "
              "algorithm; nor a submodule named for corrupting the input (noise, corrupt, augment, "
              "perturb): data preparation, no parameters to freeze. Nor a block whose submodules the "
              "class itself fixes: it turns their gradients off (self.f.requires_grad_(False), "
              "self.f.weight.requires_grad = False, for p in self.f.parameters(): p.requires_grad = "
              "False), or those of the local it builds them from (vgg = vgg19(...); its parameters "
              "frozen; self.features = nn.Sequential(*layers) over vgg's modules), or the submodule is "
              "a convolution whose kernel the class writes by hand (self.blur.weight.data.copy_(gauss), "
              ".weight.data.fill_(1)): a fixed filter, such as a blur or a dilation computing a loss "
              "weight from a mask, with nothing to fine-tune. A kernel set with nn.init, a layer that "
              "is no convolution given weights by hand (pretrained vectors copied into an embedding "
              "may be fine-tuned), or a module frozen only in part is still reported.",
    ),
    Rule(
        "PTT018", "tip_module_conventions", "self.eval() / self.train() in forward",
        "self.eval() / self.train() inside forward overrides the mode the caller set: dropout and "
        "batch norm behave as the model decides, not as the user asked",
        "let the caller call model.train() / model.eval()",
        _snippet("""
import torch
class Net(torch.nn.Module):
    def forward(self, x):
        self.eval()
        return self.drop(self.lin(x))
"""), (4, 9),
        _snippet("""
import torch
class Net(torch.nn.Module):
    def forward(self, x):
        return self.drop(self.lin(x))
"""),
        short="self.eval()/self.train() in forward overrides the caller's mode",
        fix="let the caller set the mode",
    ),
    Rule(
        "PTT019", "tip_inference_mode", "torch.no_grad() for inference",
        "torch.no_grad() for a forward pass still keeps version counters and view tracking on "
        "the tensors it creates",
        "use torch.inference_mode() when the outputs never meet autograd later",
        _snippet("""
import torch
def evaluate(model, x):
    with torch.no_grad():
        return model(x)
"""), (3, 10),
        _snippet("""
import torch
def evaluate(model, x):
    with torch.inference_mode():
        return model(x)
"""),
        short="torch.no_grad() for pure inference",
        fix="use torch.inference_mode()",
        scope="Off by default: a tensor created under inference_mode() breaks autograd wherever it "
              "meets it later (a cached buffer, an index used in a loss), which the code rarely shows. "
              "Selected, only in evaluation functions (named eval/valid/test/infer/predict), not in a "
              "class's methods (a predict_... method may run in training, feeding the losses), not "
              "around updates that outlive the block, nor around code that builds or loads the model "
              "(a load, from_pretrained, build_model, initialize_from_...: its parameters would be "
              "inference tensors), nor around a loop that breaks after its "
              "first batch (a sample for a log: nothing to gain), nor in a function handed a training "
              "framework's handle (a fabric or accelerator parameter, or under accelerator.autocast()): "
              "it runs the model being trained, wrapped for training (FSDP, DeepSpeed), where "
              "inference tensors can leak into the next step; nor in a file that exports its model; "
              "nor around a block whose results the same function later makes a leaf to optimise "
              "(x.requires_grad = True, x.requires_grad_(), or handed to a torch.optim optimizer, "
              "directly or through what is computed from them): an inference tensor there raises; "
              "nor where the file, or a Python file in its folder or a folder below it (its package: "
              "the predictors its functions are handed), turns gradients back on and differentiates "
              "(torch.enable_grad() or set_grad_enabled(True), with backward() or autograd.grad): "
              "a refinement run inside the inference call, which inference_mode breaks; nor a warm-up "
              "(its function named for one, warmup_..., or a comment on the block saying warm up, or a "
              "block that calls torch.compile or a name the file binds to torch.compile(...)): it primes "
              "compiled code for the grad mode it runs under; nor where a value the block computes (or a view of "
              "it) is handed, outside the block, to a collective that updates it in place "
              "(dist.all_reduce, dist.reduce, dist.broadcast), directly or through a function of the file "
              "or its project that hands a parameter to one (a ddp_reduce helper): an inference tensor "
              "rejects that in-place update outside inference_mode, so distributed validation breaks.",
        unlike_tip="The tip times a generic run_no_grad(fn, x); the rule looks only in functions named "
                   "for evaluation.",
        default=False,
        # torch.inference_mode is new in 1.9 (the PyTorch 1.9 release blog, "(Beta) Inference Mode API";
        # the docs for 1.9.0 are the first to have torch.inference_mode)
        needs_torch=(1, 9),
    ),
    Rule(
        "PTT020", "tip_dataloader_workers", "DataLoader without workers",
        "DataLoader without num_workers (or num_workers=0) decodes every sample in the training "
        "process, between steps",
        "set num_workers > 0 (and persistent_workers=True, from torch 1.7) so loading overlaps training",
        _snippet("""
from torch.utils.data import DataLoader
from torchvision import datasets
dataset = datasets.ImageFolder("data/train", transform=transform)
loader = DataLoader(dataset, batch_size=32)
"""), (4, 10),
        _snippet("""
from torch.utils.data import DataLoader
from torchvision import datasets
dataset = datasets.ImageFolder("data/train", transform=transform)
loader = DataLoader(dataset, batch_size=32, num_workers=2, persistent_workers=True)
"""),
        short="DataLoader decodes every sample in the training process",
        fix="set num_workers > 0",
        scope="Only a dataset that decodes or transforms each sample as it is read (an image folder, a "
              "torchvision dataset, anything built with transform=): an in-memory dataset gains nothing "
              "from workers and an iterable one is read once per worker. Not a dataset on a device "
              "(built with device= other than the CPU, or, in the same function, from values the "
              "code moves there with .to(device) or .cuda()): workers would touch CUDA in forked "
              "processes, which fails. Not a loader whose dataset the code changes after building "
              "it (an attribute or item set through loader.dataset or the dataset's name, or a "
              "changing method such as set_probs(...), set_epoch(...), update(...)): the advised "
              "persistent_workers=True would keep the workers' stale copies of it and train on old "
              "values; the rule stays silent there rather than advise workers without it.",
        unlike_tip="The tip's loader takes its dataset as a parameter, whose kind the code does not show.",
        torchfix="TOR401",
    ),
    Rule(
        "PTT021", "tip_pin_memory", "DataLoader without pin_memory",
        "DataLoader without pin_memory=True hands out pageable batches: each host-to-GPU copy is "
        "staged through a bounce buffer and cannot run asynchronously",
        "set pin_memory=True when the batches go to a GPU",
        _snippet("""
from torch.utils.data import DataLoader
loader = DataLoader(dataset, batch_size=32, num_workers=2)
for x, y in loader:
    x = x.to("cuda")
"""), (2, 10),
        _snippet("""
from torch.utils.data import DataLoader
loader = DataLoader(dataset, batch_size=32, num_workers=2, pin_memory=True)
for x, y in loader:
    x = x.to("cuda", non_blocking=True)
"""),
        short="DataLoader without pin_memory=True: every copy to the GPU is staged",
        fix="set pin_memory=True",
        scope="Only a loader that omits pin_memory (an explicit pin_memory=False is a stated choice), "
              "in a file that names CUDA or an accelerator (an autocast(..., enabled=False) that keeps a "
              "function in full precision does not count); not a loader over a TensorDataset (its "
              "tensors may be on the GPU, where pin_memory=True raises), nor one over a dataset built "
              "on a device: what a call given device= other than the CPU builds, directly, unpacked "
              "or an attribute or item of it (tasks = get_tasksets(..., device=device); "
              "DataLoader(tasks.dataset)), or a class named for living there (OnDeviceDataset(...)), "
              "for the same reason; nor one whose loops in the file "
              "hand the batches to NumPy (an ONNX runtime's inputs) and never move them with torch, nor "
              "one over range(n) or an index tensor (torch.arange, torch.randperm): its batches are "
              "small index tensors that gather rows already placed; nor, in a file that imports "
              "accelerate, one handed to prepare(), by a local name or as an attribute of self "
              "(self.loader = DataLoader(...); accelerator.prepare(self.loader)) (accelerate copies the prepared loader's batches "
              "itself, blocking, so pinning alone overlaps nothing; the change that does is "
              "accelerate's DataLoaderConfiguration(non_blocking=True), and a file that sets it is "
              "flagged); nor one read only by next(iter(loader)) outside a loop: one batch, copied "
              "once; nor one that only loops read whose batches they never use and that call nothing "
              "but counting and timing (a benchmark of loading: pinning would only add work); nor one "
              "whose collate_fn is a function of the file (by name, in a lambda, or through "
              "functools.partial) that puts tensors on CUDA itself (.to('cuda'), .cuda(): "
              "pin_memory=True raises on a CUDA batch), or that returns the batch as it is (def "
              "collate(batch): return batch, lambda b: b: no tensor is stacked, and the samples may "
              "be paths and annotations); nor one over a dataset built, in the same function, from "
              "values the code puts on a device (moved with .to(device), .to(f'cuda:{gpu}') or .cuda(), "
              "even on one path only, such as a mode that keeps the data in GPU memory; made with "
              "device=, or produced by a self. attribute the class moves there, gathered through "
              "lists and loops, unless a .cpu() or .numpy() brings them back), nor one over a "
              "dataset built with a flag that asks for the GPU and is not plainly off "
              "(Windows(x, gpu=device_id != -1), use_cuda=args.cuda; not gpu=False, gpu=-1 or a "
              "count such as gpus=2), nor one whose dataset's own tensors the function moves to a "
              "device after building it (ds.data = ds.data.cuda()): its tensors may be on "
              "the GPU, where pin_memory=True raises; nor one whose collate_fn is a function or a "
              "dataset's method of the project (this file, or a project module it imports) that "
              "builds the batch with NumPy and never touches torch (the methods and project "
              "functions it calls included, the dataset's class making no tensors): its batches "
              "are NumPy arrays, which pin_memory leaves as they are (the copy is made later, "
              "from torch.from_numpy). The "
              "size of a batch is not read: a small one (batch_size=1, a few token ids, a loader "
              "feeding generation under no_grad) gains little from pinning and is still flagged: "
              "nothing in the code shows what the batches hold.",
    ),
    Rule(
        "PTT022", "tip_non_blocking", "blocking copies of pinned batches",
        "a blocking .to(device) / .cuda() of each pinned batch makes the host wait for the copy "
        "before it can queue the next kernel",
        "copy with .to(device, non_blocking=True)",
        _snippet("""
import torch
loader = torch.utils.data.DataLoader(dataset, batch_size=32, pin_memory=True)
for inputs, target in loader:
    inputs = inputs.to(device)
"""), (4, 14),
        _snippet("""
import torch
loader = torch.utils.data.DataLoader(dataset, batch_size=32, pin_memory=True)
for inputs, target in loader:
    inputs = inputs.to(device, non_blocking=True)
"""),
        short="blocking .to(device) of a pinned batch makes the host wait for the copy",
        fix="copy with non_blocking=True",
        scope="Only the batch variables of a loop over a DataLoader built with pin_memory in the same "
              "file (from pageable memory the copy is staged either way); one finding per statement; "
              "not a copy on a branch where the device cannot be CUDA (the else of "
              "if torch.cuda.is_available():, if device == 'cpu':, or after an earlier "
              "if torch.cuda.is_available(): that leaves), nor one followed in the loop's body, "
              "with no work between but casts and reshapes, by an if that reads the device to decide "
              "(if not mask.any(): continue): the host waits for the copies there anyway. A part of "
              "the batch taken in a comprehension ([x.to(device) for x in batch]) is the batch's. Not "
              "a batch variable the loop has rebound before the copy to a tensor torch makes "
              "(labels = torch.tensor(labels)): that tensor is pageable.",
        # .to(device, non_blocking=True) came with torch.device in 0.4 (PyTorch 0.4.0 Migration Guide,
        # "Writing device-agnostic code"); .cuda(async=True) before it
        needs_torch=(0, 4),
    ),
    Rule(
        "PTT023", "tip_eval_and_no_grad", "eval() without no_grad()",
        "model.eval() alone still records the autograd graph of every forward pass: it only "
        "changes what dropout and batch norm compute",
        "evaluate under torch.inference_mode() (or torch.no_grad()) as well as model.eval()",
        _snippet("""
import torch
def evaluate(model, x):
    model.eval()
    return model(x)
"""), (4, 12),
        _snippet("""
import torch
def evaluate(model, x):
    model.eval()
    with torch.inference_mode():
        return model(x)
"""),
        short="model.eval() without no_grad() still records the autograd graph",
        fix="evaluate under torch.inference_mode() or torch.no_grad()",
        scope="Only a call of the module after its .eval() in the same function, outside any grad-free "
              "block; not in unit tests (test_* functions), nor in a function that backpropagates or "
              "returns a value without an evaluation name (gradients may flow through the frozen "
              "module to trained ones: a ControlNet, LoRA weights, embeddings), nor a single warm-up call "
              "outside loops on a dummy input made by a factory whose output is dropped, nor a call "
              "outside loops in a function that traces or exports the model (torch.jit.trace, "
              "torch.onnx.export, torch.export.export): a one-shot check before the export. A with "
              "block (or decorator) of the project's own helper counts as grad-free when it returns "
              "torch.no_grad()/torch.inference_mode() or yields inside one: a function of the same "
              "file, or one imported from another file of the project (from pkg.utils import "
              "inference_context), read there. Not in a function of the file called only from "
              "grad-free ones (decorated @torch.inference_mode() or @torch.no_grad(), or helpers "
              "called only from those, a few calls deep), nor in one whose calls in the file all lie "
              "inside a with torch.no_grad() or torch.inference_mode() block (or in such functions) "
              "when no other file of the project (tests aside) calls a function of that name; nor in a "
              "function of a file with an .eval() every call of whose name in the project's files (tests "
              "aside) lies inside a with torch.no_grad()/torch.inference_mode() block or a function "
              "under such a decorator (a model's inference() called from a trainer's test loop), read "
              "by indentation, a call left in a comment (# err = evaluate(model, val)) being no "
              "call; forward(), dunder methods and *_step hooks, run without a call by name, "
              "are not followed so. A "
              "conditional context (with torch.no_grad() if not requires_grad else nullcontext():) "
              "counts as grad-free when either branch is: the graph is recorded only where the "
              "caller asks for gradients through the model.",
    ),
    Rule(
        "PTT024", "tip_gradient_accumulation", "accumulation without scaling the loss",
        "gradients accumulated over several backward() calls before each step() add up: with a "
        "mean-reduced loss that is k times the big batch's gradient",
        "divide each micro-batch loss by the number of accumulated batches",
        _snippet("""
import torch
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    if (i + 1) % 2 == 0:
        optimizer.step()
        optimizer.zero_grad()
"""), (4, 5),
        _snippet("""
import torch
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / 2
    loss.backward()
    if (i + 1) % 2 == 0:
        optimizer.step()
        optimizer.zero_grad()
"""),
        short="gradients summed over k backward() calls are k times too large",
        fix="divide each micro-batch loss by k",
        scope="Only a backward() of a loss not already divided (nor divided or multiplied inside "
              "the call: booster.backward(loss=loss / k), nor given to apex's amp.scale_loss(loss, opt) "
              "as the name it binds; nor bound from a call of a function of the file that divides by the "
              "step's interval, loss = loss / cfg.accumulation_steps before its return), in a loop whose step() runs under an "
              "if with a modulo that the backward is not under. Not a backward with a step() right "
              "after it or a zero_grad() right before it in the same block (one backward per step, "
              "as with separate optimizers each zeroed around its own loss), nor one in a block (a with, "
              "an if) that has a zero_grad() right before it and a step() right after it, nor one under the same "
              "interval as the step (an update every k environment steps), nor in a loop that "
              "scales the gradients by hand before the step (a call named like scale_grads, "
              "p.grad.div_/mul_, torch._foreach_mul_/_foreach_div_: a loss summed over tokens, "
              "divided by their total count), nor where the step's interval (the k of i % k) "
              "also rescales a weight decay of the code (hyp['weight_decay'] *= bs * k / nbs): "
              "accumulation to a nominal batch, tuned for the summed gradient of k batches.",
    ),
    Rule(
        "PTT025", "tip_unneeded_detach", "x = x.detach() before more layers",
        "x = x.detach() in code that calls backward() cuts the graph there: nothing before it "
        "gets a gradient from this loss",
        "drop the .detach() unless the layers before it are meant to stay frozen",
        _snippet("""
import torch
hidden = layer_1(data)
hidden = hidden.detach()
output = layer_2(hidden)
output.sum().backward()
"""), (3, 10),
        _snippet("""
import torch
hidden = layer_1(data)
output = layer_2(hidden)
output.sum().backward()
"""),
        short="x = x.detach() cuts the graph: the layers before it get no gradient",
        fix="drop the .detach()",
        scope="Only an x = x.detach() before a backward() of the same function (or top-level "
              "code): not one after its last backward (outputs detached for metrics after the "
              "step, activations recomputed by a hand-written reversible backward), not in a "
              "method named backward (an autograd.Function's), and not under a grad-free block; "
              "not one whose value is read after it only as a target: a loss call's second operand "
              "(F.mse_loss(q, target_q)) or a side of a difference (pred - teacher): a deliberate "
              "stop-gradient (a TD target from a target network, a teacher's output); a test of "
              "whether it is None (if ref is None: break) is no read of the value.",
    ),
    Rule(
        "PTT026", "tip_closure_scope", "loop tensors outlive the training loop",
        "names bound in a training loop keep the last batch's tensors (inputs, outputs, loss) "
        "alive after the loop, through the evaluation that follows it in the same function",
        "put the step in its own function (or del the names) so its tensors are freed when it "
        "returns",
        _snippet("""
import torch
def train(model, loader):
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
    validate(model)
"""), (3, 5),
        _snippet("""
import torch
def train(model, loader):
    def step(x, y):
        loss = loss_fn(model(x), y)
        loss.backward()
    for x, y in loader:
        step(x, y)
    validate(model)
"""),
        short="the training loop's last batch stays alive through the evaluation after it",
        fix="move the step into a function, or del its tensors",
        scope="Only where code after the loop needs memory of its own: an evaluation call (eval/valid/"
              "test in its name; not the .eval() mode switch, not a function of the file under a grad-free "
              "decorator) or another training loop; not when the function ends or deletes the names.",
        unlike_tip="The tip's loop is followed by probe(), a measurement standing where validation "
                   "would start; the rule waits for an evaluation call or another loop.",
    ),
    Rule(
        "PTT027", "tip_memory_allocated", "torch.cuda.memory_allocated()",
        "torch.cuda.memory_allocated() counts only tensors in PyTorch's CUDA allocator: CPU memory "
        "reads as 0",
        "on CPU measure with torch.profiler (profile_memory=True) or the process's resident memory",
        _snippet("""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
print(torch.cuda.memory_allocated(device))
"""), (3, 7),
        _snippet("""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    print(torch.cuda.max_memory_allocated(device))
"""),
        short="torch.cuda.memory_allocated() reads 0 on the CPU path",
        fix="read it only under a CUDA check",
        scope="Only in a file that can run on the CPU (it names the \"cpu\" device), outside an if that "
              "checks for CUDA, the else of one that checks for the CPU or the body of one that checks "
              "it is not the CPU (if device.type != \"cpu\":), or a function that also asks "
              "for CUDA device properties (CUDA-only) or is named for the GPU (print_cuda_usage, "
              "log_gpu_memory), or one that has already put a tensor on a CUDA device by name "
              "(device=\"cuda\", .cuda(), .to(\"cuda\")) in a plain statement before the call: it "
              "fails without a GPU; not on the CUDA side of a conditional expression (x if device.type "
              "== \"cuda\" else 0.0, print(...) if device == \"cuda\" else None), nor after a plain "
              "statement, or inside a with, that hands the device to a torch.cuda call which raises for "
              "a CPU device (torch.cuda.synchronize(device), reset_peak_memory_stats(device), with "
              "torch.cuda.device(device):): the code cannot reach the read on the CPU; not where the statement labels the figure as the GPU's in a "
              "string (\"GPU memory: ...\", a logged name \"GPU Memory (MB)\"): 0 is then the "
              "true figure.",
    ),
    Rule(
        "PTT028", "tip_oom_retry", "retry on any RuntimeError",
        "except RuntimeError in a retry loop catches every RuntimeError (shape, dtype, device "
        "errors), not only out-of-memory: a bug becomes a smaller batch",
        "catch torch.OutOfMemoryError (torch.cuda.OutOfMemoryError before 2.4) and retry after the "
        "except block",
        _snippet("""
import torch
while batch_size > 0:
    try:
        step(batch_size)
        break
    except RuntimeError:
        batch_size //= 2
"""), (6, 5),
        _snippet("""
while batch_size > 0:
    try:
        step(batch_size)
        break
    except torch.OutOfMemoryError:
        batch_size //= 2
"""),
        short="except RuntimeError in a retry loop retries on every error, not only OOM",
        fix="catch torch.OutOfMemoryError",
        scope="Only a handler that shows it deals with running out of memory: it (or the loop "
              "after the try) frees memory (torch.cuda.empty_cache(), gc.collect()) or shrinks a size "
              "(bs //= 2, bs -= 8, bs *= 0.5, bs = max(1, bs // 2)), or it names OOM; a handler that "
              "only skips or logs (a loop over parameters that passes over the ones without "
              "accessible storage) is no retry. Not a handler that checks the message for memory or "
              "re-raises, nor one that catches RuntimeError beside TypeError, AttributeError, "
              "ValueError or an unpickling error (a guard on decoding input, not an out-of-memory "
              "retry).",
        # torch.cuda.OutOfMemoryError is 1.13's (pytorch/pytorch#83146, Aug 2022), torch.OutOfMemoryError
        # 2.4's (pytorch/pytorch#121702, Apr 2024): before 1.13 an OOM is a plain RuntimeError, and
        # catching RuntimeError is the only way
        needs_torch=(1, 13),
    ),
    Rule(
        "PTT029", "tip_register_buffer_parameter", "register_parameter(name) without a value",
        "register_parameter(name) without the Parameter raises TypeError",
        "pass the value: register_parameter(name, nn.Parameter(tensor)) (or None)",
        _snippet("""
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_parameter("name_0")
"""), (5, 9),
        _snippet("""
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_parameter("name_0", nn.Parameter(torch.zeros(4)))
"""),
        short="register_parameter(name) without a value raises TypeError",
        fix="pass nn.Parameter(tensor) or None",
    ),
    Rule(
        "PTT030", "tip_register_buffer_parameter", "plain tensor attribute in a module",
        "a tensor assigned as a plain attribute in __init__ is not part of state_dict() and is "
        "not moved by .to() / .double()",
        "self.register_buffer(name, tensor, persistent=False): it moves with .to() and stays out of "
        "state_dict, so checkpoints saved before still load strictly",
        _snippet("""
import torch
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mask = torch.ones(16)
"""), (5, 9),
        _snippet("""
import torch
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.ones(16), persistent=False)
"""),
        short="a tensor attribute set in __init__ is not a buffer: .to() leaves it behind",
        fix="self.register_buffer(name, tensor, persistent=False)",
        scope="Only a tensor made by a torch factory in the __init__ of a class the code shows is an "
              "nn.Module (a torch.nn base, a LightningModule, a class of the file or of the project's "
              "files it imports from that derives from one; a base merely named ...Module, such as a "
              "LightningDataModule, which has no buffers, is no evidence), in a file that does not "
              "export the model (ONNX, TorchScript); not a name the class registers with "
              "register_buffer (a tensor assigned to it stays the buffer), nor one rebound as an "
              "nn.Parameter further down "
              "the same block (self.m = nn.Parameter(self.m, requires_grad=False): registered from "
              "then on), nor one a method of the class rebinds from itself to its input's device "
              "(self.m = self.m.type_as(x), .to(x), .to(x.device)) before use, nor one that only "
              "__init__ reads and uses up (itself or in a method it hands it to) and no other code of "
              "the file names: "
              "never read after construction, .to() leaving it behind is harmless; nor an empty or "
              "0-dim placeholder (torch.tensor([]), torch.tensor(0), torch.zeros(0)) for an attribute "
              "that __init__ makes an nn.Parameter on another branch: the parameter is what is used; "
              "nor one the file reads only at an int index (a literal, a parameter annotated int, a "
              "loop variable over range: self.ramp[step]), a 0-dim CPU tensor that mixes with CUDA "
              "tensors as a number does; nor an empty placeholder (torch.empty(0)) that another method "
              "replaces with a new value (a forward hook's output cache). Not one that a method other than __init__ rebinds to a value grown from itself (torch.cat([self.seen, y]).unique(): a changing shape, which a strict checkpoint load of a buffer rejects) or to a new factory tensor (a reset that picks its own device), nor one read only in methods that first bring their input to the CPU (x = self.prep(x.cpu())): kept on the CPU on purpose. "
              "Not one made with device= set from a parameter of __init__ (device=device, or "
              "self.device = device read back): the class takes its device when built and keeps it; "
              "nor one that a method other than __init__ rebinds (or its .data) to a value computed "
              "from something else (self.aux = loss * alpha): a starting value replaced as it runs; "
              "nor one the file never reads but to update it (every other use is a write, or the "
              "value of a write to itself: self.count[i] = self.count[i] + n) and no string names; "
              "nor one every method reading it combines (itself, a local computed from it, or the "
              "argument of a function of the file it is handed to) in a torch call or arithmetic with "
              "a tensor the code makes on the CPU (a factory without device=, .cpu()), or reads only at "
              "int literal indices: it is kept on the CPU on purpose, and as a buffer .to() would move "
              "it away from those tensors.",
        needs_torch=(1, 6),  # register_buffer(..., persistent=False) is new in torch 1.6
    ),
    Rule(
        "PTT031", "tip_foreach_fused_optimizers", "Adam/AdamW without fused=True",
        "Adam / AdamW built without fused=True runs its update as several kernels per group of "
        "parameters (foreach) or per parameter (for-loop) instead of one fused kernel",
        "pass fused=True (fused=device.type == 'cuda' where the script also runs elsewhere)",
        _snippet("""
import torch
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
"""), (2, 7),
        _snippet("""
import torch
opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
"""),
        short="Adam/AdamW without fused=True runs the unfused update",
        fix="pass fused=True",
        scope="Only Adam and AdamW (the optimizers the tip measures; RMSprop, Adamax, NAdam, RAdam and "
              "Adadelta have no fused implementation), only where the reader's torch accepts fused=True "
              "on their device (CUDA: Adam 1.13+, AdamW 2.0+; CPU: 2.4+), and not where the code already "
              "chose a fast implementation (foreach=True, fused=) or passes **kwargs; nor in a project that pins "
              "torch exactly (requirements, a conda env*.yml, an install*.sh, also in an install folder such as scripts/; an exact torchvision or "
              "torchaudio pin pins the torch it is built for) to a release without fused= there, nor in "
              "one whose declared torch floor (torch>=1.8 in the nearest requirement file, "
              "pyproject.toml or setup.py; a README's \"PyTorch 1.8 or later\" only where none names "
              "torch, as for PTT001) is such a release: it raises a TypeError (unless the project's own "
              "code, tests aside, already uses unguarded an API of the release that has it, as for "
              "PTT005: weights_only= 1.13, fused= itself...). For CUDA, only in a file that "
              "names CUDA or an accelerator: one that never does trains on the CPU. Not where the "
              "file or any Python file of its project (tests aside) creates complex parameters (nn.Parameter of a "
              "complex tensor, a weight of dtype torch.cfloat bound to self in an __init__: spectral "
              "FFT layers): fused=True raises a RuntimeError at step() on them (foreach, the CUDA "
              "default, handles them).",
    ),
    Rule(
        "PTT032", "tip_tensor_core_multiples", "layer size not a multiple of 8",
        "an nn.Linear whose sizes are not multiples of 8 cannot use the fastest Tensor Core "
        "kernels",
        "pad the sizes to multiples of 8 (for fp16/bf16 on NVIDIA GPUs)",
        _snippet("""
from torch import nn
mix = nn.Linear(4095, 4095).half()
"""), (2, 7),
        _snippet("""
from torch import nn
mix = nn.Linear(4096, 4096).half()
"""),
        short="nn.Linear size not a multiple of 8 misses the fastest Tensor Core kernels",
        fix="pad the sizes to multiples of 8",
        scope="Only literal sizes of 64 and more, and only a hidden width: a size one Linear of the "
              "file gives out and another (or the same) takes in, a free choice. A size only taken in "
              "or only given out is fixed by the data or by another tensor (features, classes, a "
              "vocabulary, the buckets of a value head): padding it breaks shapes. Nothing in a project "
              "that computes in fp32 only (no autocast, half, fp16/bf16, mixed precision or TF32 "
              "in its code or configuration files): Tensor Cores do not run its matmuls.",
    ),
    Rule(
        "PTT033", "tip_vectorize_loops", "Python loop over tensor rows",
        "a Python loop over a tensor's rows that writes one element per iteration pays Python and "
        "dispatch overhead on every row",
        "use one vectorised call on the whole tensor (e.g. torch.max(x, dim=1))",
        _snippet("""
max_x = torch.empty((x.size(0),))
for i in range(x.size(0)):
    max_x[i] = x[i, idx[i]]
"""), (2, 1),
        _snippet("""
max_x = torch.max(x, dim=1).values
"""),
        short="a Python loop writes a tensor one row at a time",
        fix="use one vectorised call",
        scope="Only a loop whose bound counts a tensor's rows (x.size(0), x.shape[1], x.numel(), "
              "len(t) of a tensor made in the file); not len() of a list of per-channel constants "
              "(range(len(mean))) nor x.shape[dim] of a dimension chosen at run time: a few "
              "channels, each one whole-slice op; nor a loop under an if that finds the written "
              "name is of another type (isinstance(x, list)): there it is no tensor; nor a loop whose "
              "writes also index another dimension with an index tensor (out[order[:, j], j] = v, "
              "out[perm, j] = v): each iteration scatters a whole row or column in one vectorised "
              "assignment, no single element. A plain slice (out[i, :] = ...) is still read: a "
              "row copied per iteration over thousands of rows. Not a recurrent loop: one whose body "
              "reads a name before the body binds it (output, state = step(it, state): the state of "
              "the step before), or that calls a recurrent cell (an LSTM, GRU or RNN cell): each "
              "iteration feeds on the one before, so no single call replaces it. Not a loop whose body "
              "saves a file or an image or draws a plot (img.save(...), save_image, plt.imshow, "
              "plt.savefig, imageio, cv2.imwrite, f.write): I/O per item, which no vectorised call "
              "replaces.",
    ),
    Rule(
        "PTT034", "tip_anomaly_detection_off", "anomaly detection left on",
        "autograd anomaly detection records a stack trace for every op and checks every backward "
        "output",
        "switch it on only while hunting a NaN, never in regular training",
        _snippet("""
import torch
torch.autograd.set_detect_anomaly(True)
"""), (2, 1),
        _snippet("""
import torch
torch.autograd.set_detect_anomaly(False)
"""),
        short="autograd anomaly detection is on: a stack trace for every op",
        fix="switch it on only while hunting a NaN",
        scope="Not under an if that tests a debugging option (if cfg.debug:, if args.detect_anomaly:, "
              "if self.config['debug']:): "
              "that is the advice, taken.",
    ),
    Rule(
        "PTT035", "tip_ddp_vs_dataparallel", "nn.DataParallel",
        "nn.DataParallel runs one process: every forward copies the model to each GPU, splits the "
        "batch, runs the copies in threads and gathers the outputs on the first GPU",
        "use DistributedDataParallel, one process per GPU (its documentation recommends it over "
        "DataParallel even on a single node)",
        _snippet("""
import torch
model = torch.nn.DataParallel(Net()).cuda()
"""), (2, 9),
        _snippet("""
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(Net().to(rank), device_ids=[rank])
"""),
        short="nn.DataParallel: one process copies the model to every GPU on every forward",
        fix="use DistributedDataParallel, one process per GPU",
        scope="Every nn.DataParallel(...) call, except a single-process fallback that the code warns "
              "about beside a DistributedDataParallel path (the advice is taken where it can be), or one "
              "in code that does not train: grad-free or eval() code, or a script named for evaluation "
              "or inference (test.py, eval_*.py, inference.py, predict.py) with no backward() nor step() "
              "(DDP's launcher, sampler and gathering do not pay for one pass), or one in a part of the "
              "project (its top folder) where no file runs a training step (backward() or step() in "
              "code, not a docstring's example nor an autograd.Function's def backward) and no "
              "training file elsewhere in the project imports that part: an inference package. Not "
              "one whose function adapts the wrapped module through autograd.grad(..., create_graph=...), "
              "itself or by a method of the wrapped object that the project defines with it (MAML's "
              "learner.adapt(loss)): DDP does not support double backward. The tip "
              "measures only a machine without a GPU, so on CUDA the finding is a note until a multi-GPU "
              "run measures it.",
        unlike_tip="The tip's DataParallel runs in a second process from code held in a string, which "
                   "the checker does not read as code.",
    ),
    Rule(
        "PTT036", "tip_empty_cache_every_step", "empty_cache() every step",
        "torch.cuda.empty_cache() on every training step hands the allocator's cached blocks back to "
        "the driver, and the next step allocates them again; the step's peak memory stays the same",
        "drop the call from the loop: the allocator frees its cache itself and retries before it "
        "reports out of memory",
        _snippet("""
import torch
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    torch.cuda.empty_cache()
"""), (6, 5),
        _snippet("""
import torch
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
"""),
        short="torch.cuda.empty_cache() on every training step",
        fix="drop it from the loop",
        scope="Only in a loop whose own body calls backward() (one iteration is one step), not under an "
              "if inside it: a call between phases, after deleting a model or every N steps is left alone. "
              "Not a loop whose steps are a function it defines and hands to another to run (ms = "
              "time_it(step), a timer or benchmark helper; not optimizer.step(closure)): that function "
              "runs the steps, and one iteration is one configuration.",
        unlike_tip="The tip calls empty_cache() in a step function that its timing loop calls; the rule "
                   "flags it only inside a loop that itself calls backward().",
    ),
    Rule(
        "PTT037", "tip_conv_bias_before_batchnorm", "conv bias before BatchNorm",
        "a convolution with a bias directly followed by a BatchNorm: the norm subtracts each "
        "channel's batch mean, and the bias with it, so the bias changes no output and gets no "
        "gradient",
        "build the convolution with bias=False",
        _snippet("""
from torch import nn
block = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())
"""), (2, 23),
        _snippet("""
from torch import nn
block = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
"""),
        short="conv bias directly before BatchNorm is subtracted back out",
        fix="pass bias=False",
        scope="Only a Conv/ConvTranspose (1d-3d) whose bias is left at its default or set to True, "
              "immediately followed by a BatchNorm in the same nn.Sequential(...) or list literal; not a "
              "bias given by a variable, and not with anything (an activation) between them; not in a folder "
              "whose Python files load state dicts (load_state_dict) and never train (no backward() or "
              ".step()): an inference app serving released weights, which hold the bias; nor in a "
              "class that another file of the project with the same file name also defines (where "
              "both name BatchNorm): a copy of one model, a trainer's beside its package's, whose "
              "checkpoints load strictly into both; nor in a file of a network the project never "
              "trains but loads weights into (an evaluator's recognition model): no file in its part "
              "of the project (its top folder) trains, no training file names one of the file's "
              "classes or its module, and a file naming one of them calls load_state_dict (in a "
              "checkout with no .git or setup file, the project is read from the folder its own "
              "absolute imports resolve from, or the highest one with a licence file); nor in a "
              "project that keeps its BatchNorm layers frozen (a file sets a module picked by "
              "isinstance(m, nn.BatchNorm2d) to m.eval() or m.requires_grad_(False), or defines a "
              "freeze_bn / fix_bn / set_bn_eval function): frozen BatchNorm normalises with its "
              "running statistics, so the bias is not subtracted out, and released weights hold it; "
              "nor in a class that initialises its convolutions' biases without testing them for "
              "None (a method that, under isinstance(m, nn.Conv2d) or a class-name test for Conv, "
              "reads or writes m.bias, itself, through a method or function of the file it hands m "
              "to, or by self.apply(fn)): with bias=False the bias is None and construction raises; "
              "nor in a package that downloads its models' released weights (a Python file in the "
              "file's folder or a folder above it, up to the project's root, calls "
              "load_state_dict_from_url or model_zoo's load_url and holds a URL to a .pt/.pth/.ckpt/"
              ".bin/.safetensors checkpoint): the published weights hold the bias, and their strict "
              "load fails without it; nor in a project whose READMEs publish trained checkpoints and "
              "whose code loads state dicts strictly (a load_state_dict(...) without strict=False): a "
              "README of the file's folder or a folder above it, below the project's root (a vendored "
              "package's own README), or the root's README where a README of the project names one of "
              "the file's classes (a CamelCase name, Conv64F in a method's results table), speaks of a "
              "model zoo, of downloading or releasing (pretrained) models, weights, networks or "
              "checkpoints, or links a .pth/.pt/.ckpt file, and links somewhere (in a checkout with no "
              ".git or setup file, the root is its highest licensed folder or the folder its absolute "
              "imports resolve from): every published checkpoint holds the bias and fails its strict "
              "load without it. "
              "Loading a "
              "checkpoint that holds the bias needs strict=False after the change (fold the bias into "
              "running_mean first).",
        unlike_tip="The tip builds its block with bias=bias, a parameter that is True for the "
                   "anti-pattern and False for the fix, which the code does not fix.",
    ),
    Rule(
        "PTT038", "tip_bf16_autocast_no_grad_scaler", "float16 autocast without a GradScaler",
        "backward() after a float16 autocast without a GradScaler: gradients too small for float16 "
        "flush to zero and their updates are lost",
        "scale the loss with torch.amp.GradScaler (torch.cuda.amp.GradScaler before torch 2.3), or "
        "autocast to bfloat16, which needs no scaler",
        _snippet("""
import torch
def train_step(model, x, y):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    loss.backward()
"""), (3, 10),
        _snippet("""
import torch
def train_step(model, x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()
"""),
        short="float16 autocast and backward() without a GradScaler: small gradients flush to zero",
        fix="use torch.amp.GradScaler, or bfloat16",
        scope="Only a with-block of autocast to float16 (dtype=torch.float16, or torch.cuda.amp.autocast() "
              "/ autocast(\"cuda\") without a dtype, whose default is float16), not disabled, in a "
              "function that itself calls backward() and never names a scaler (no name with 'scale' in it).",
    ),
    Rule(
        "PTT039", "tip_sync_points", "tensor formatted into text every step",
        "formatting a CUDA tensor into text (an f-string, %g, .format) on every training step reads "
        "its value: the host waits for the GPU's queue to drain before it can queue the next step",
        "format the value every N steps, or accumulate with .detach() and read it after the loop",
        _snippet("""
import torch
for x, y in loader:
    loss = loss_fn(model(x.cuda()), y.cuda())
    loss.backward()
    pbar.set_description(f"loss {loss:.3f}")
"""), (5, 26),
        _snippet("""
import torch
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x.cuda()), y.cuda())
    loss.backward()
    if step % 100 == 0:
        pbar.set_description(f"loss {loss:.3f}")
"""),
        short="a CUDA tensor formatted into text on every training step makes the host wait",
        fix="format it every N steps",
        scope="Only names with evidence of holding a tensor (what backward() is called on, a loss "
              "call's result, a torch call's), in a file that names CUDA, in a loop whose body calls "
              "backward(), not under an if that runs on some steps only (a rank guard is not one), nor in "
              "a step that reads a value on the host anyway (losses.append(loss.item()) outside any if "
              "but a rank guard: the step waits for the GPU already).",
        unlike_tip="The tip reads values with .item(); formatting reads them the same way.",
    ),
    Rule(
        "PTT040", "tip_sync_points", "torch.cuda.synchronize() every step",
        "torch.cuda.synchronize() on every step of a training loop that logs every N steps makes "
        "the host wait for the GPU each step for a value read every N",
        "synchronize (and read the clock) only in the steps that log",
        _snippet("""
import time
import torch
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.cuda.synchronize()
    if step % 100 == 0:
        print(time.perf_counter())
"""), (6, 5),
        _snippet("""
import time
import torch
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    if step % 100 == 0:
        torch.cuda.synchronize()
        print(time.perf_counter())
"""),
        short="torch.cuda.synchronize() on every step, for a value logged every N",
        fix="synchronize only in the steps that log",
        scope="Only in a loop whose body calls backward() (or a loss scaler) and has an if with % (a logging "
              "interval, or a loop over metric_logger.log_every()), not under an if itself, not in a "
              "function named for benchmarking or profiling, where waiting is the point, and not in a "
              "loop that already reads a value every step to decide something (if not "
              "math.isfinite(loss.item())), nor a synchronize followed (on its line or the next two) "
              "by a clock read (end = time.time()) whose value, or one computed from it, is handed to "
              "a call (print, a logger, append, a meter's update) or formatted into text outside the "
              "logging interval: that timing is used on every step, and the wait serves it.",
        unlike_tip="The tip measures .item() reads; synchronize() waits for the same queue.",
    ),
    Rule(
        "PTT041", "tip_state_dict", "checkpoint dict holding a whole module",
        "torch.save of a checkpoint dict with a whole module as a value (\"model\": model, or a deep "
        "copy) pickles the module object: loading needs the same classes and weights_only=False",
        "save the module's state_dict() in the dict",
        _snippet("""
import torch
torch.save({"epoch": 3, "model": model}, "last.pt")
"""), (2, 1),
        _snippet("""
import torch
torch.save({"epoch": 3, "model": model.state_dict()}, "last.pt")
"""),
        short="a checkpoint dict holding a whole module pickles the module object",
        fix="store model.state_dict() in the dict",
        scope="Only a value named like a model (model, net, module, network) or bound to an nn.Module "
              "built in the same file, itself or through deepcopy(), .half(), .module or de_parallel(); an "
              "attribute of self only where the file binds it to a module every time (an nn class or a "
              "module class of the file built, a class built into an attribute named like a model, or a "
              "module itself) or it is the .module of a wrapper: a name is no evidence for an attribute "
              "(self.elite_models set to a list of ensemble indices); not "
              "a name also bound to an entry read from a container or to a dict (weights averaged from "
              "checkpoints: a dict of tensors). Not where the file or any Python file of its project "
              "(tests aside) reads one of the dict's module keys back from a loaded checkpoint as a "
              "module (ckpt = torch.load(f) or a loader of its own, then ckpt[\"model\"] called or "
              "asked for .state_dict(), .eval(), .parameters(), .fuse(), after any .float()/.to()): its "
              "checkpoints pickle modules on purpose, and a state_dict there breaks its own readers. Not "
              "a save in one branch of an if/elif on flags or parameters (a test that calls nothing: "
              "elif not save_state_dict and save_optimizer) another branch of which saves a "
              "state_dict(): the code offers both formats, and this branch pickles the module on purpose.",
        unlike_tip="The tip saves the module itself (PTT004's case), not inside a dict.",
    ),
    Rule(
        "PTT042", "tip_weights_only_load", "argparse.Namespace in a checkpoint",
        "a checkpoint holding an argparse.Namespace cannot be loaded with weights_only=True, "
        "torch.load's default from torch 2.6: the load raises UnpicklingError",
        "save vars(args) (a plain dict) instead of the Namespace",
        _snippet("""
import argparse
import torch
args = argparse.ArgumentParser().parse_args()
torch.save({"model": model.state_dict(), "args": args}, "ckpt.pt")
"""), (4, 1),
        _snippet("""
import argparse
import torch
args = argparse.ArgumentParser().parse_args()
torch.save({"model": model.state_dict(), "args": vars(args)}, "ckpt.pt")
"""),
        short="a checkpoint holding an argparse.Namespace is refused by torch.load from 2.6",
        fix="save vars(args)",
        scope="Only a name bound to parse_args() or argparse.Namespace() in the same file, stored in the "
              "saved dict literal (or in a dict name of the file), and not also bound to an entry read from a "
              "container (opt = ckpt[\"opt\"]: a loaded checkpoint's own settings); not for a torch "
              "older than 2.6.",
        unlike_tip="The tip loads a checkpoint of tensors; the rule flags the save that a weights-only "
                   "load refuses.",
    ),
]

# Appended to the scope of each rule with a ``needs_torch``, with its release.
_OLDER_TORCH = (
    " Nothing where torch {release}, which the advice needs, may be missing: not for a reader's torch "
    "older than {release}, nor in a project that declares it runs on an older torch, by its floor "
    "(torch>=1.8 in the nearest requirement file, a requirements folder's *.txt files among them, "
    "pyproject.toml or setup.py; where none names torch, the oldest torch before 2.6 that a README or "
    "an install document (INSTALL.md, docs/installation.rst, docs/get_started.md, quickstart.md, "
    "readme/INSTALL.md: in the folder or its docs, doc or readme folder) names: a floor (\"PyTorch 1.8 or later\", \"torch>=1.8\", \"[PyTorch "
    "(>= 1.8)](https://pytorch.org)\", \"install PyTorch (at least 1.8)\", \"PyTorch (minimum 1.8)\"; "
    "not where the words between name another package such as CUDA, Python or torchvision), a "
    "ceiling (\"compatible with PyTorch <= 1.4\": the floor is no newer), or any release it names, "
    "one the project runs on (\"tested with PyTorch 1.8\", \"pip install torch==1.8.0\", \"conda "
    "install pytorch=1.8\", a badge's \"pytorch-1.8\", \"* pytorch 1.8.0\"; \"torch 1.81\" is 1.8.1; "
    "not a container tag such as pytorch:20.03)"
    ") or by an exact pin (torch==1.8 in its "
    "requirements, pytorch=1.8 in a conda env*.yml, torch==1.8 in an install*.sh, a Dockerfile or a Cog file's python_packages (cog.yaml), "
    "a pytorch/pytorch:1.8 base image (its tag written out or a build argument's default: ARG PYTORCH=1.8), or torchvision/"
    "torchaudio pinned exactly, which pins the torch it is built for; also in an install folder "
    "such as scripts/ or docker/: scripts/install.bat, scripts/requirements_conda.yaml; none, nor "
    "its README, giving torch an open range): the advice would raise on a torch the project runs. A torch named in a CI workflow's "
    "test matrix is not read as support."
    " "
    "A declared floor does not count where it is stale: where the project's own code (its "
    "Python files, tests aside) already uses an API of that release or later, outside an if that "
    "tests torch's version or hasattr (or after one) and outside a try that catches TypeError, "
    "AttributeError or ImportError (torch.load(..., weights_only=...) or torch.cuda.OutOfMemoryError "
    "1.13, torch.inference_mode 1.9, torch.load(mmap=) 2.1, torch.amp's autocast 1.12, GradScaler "
    "2.3, custom_fwd/custom_bwd 2.4, fused= on Adam 1.13 and AdamW 2.0): it needs that torch already.")


def _with_release(rule: Rule) -> Rule:
    if rule.needs_torch is None:
        return rule
    release = ".".join(map(str, rule.needs_torch))
    return dataclasses.replace(rule, scope=rule.scope + _OLDER_TORCH.format(release=release))


RULES: dict[str, Rule] = {r.code: _with_release(r) for r in _RULES}
if len(RULES) != len(_RULES):  # pragma: no cover - a typo in the table above
    raise RuntimeError("two rules share a code")


def codes() -> list[str]:
    return sorted(RULES)


STATUS_PATH = Path(__file__).with_name("status.json")


def _status() -> dict:
    try:
        return json.loads(STATUS_PATH.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # pragma: no cover - a broken install: every rule in preview
        return {"basis": "none", "rules": {}}


STATUS = _status()


def is_stable(code: str) -> bool:
    """On by default: the rule may be (``default``) and its labelled findings say so
    (``status.json``, written by ``python -m tipsite.checker.labels status --write`` from the
    held-out labels, or the tuning labels until those exist)."""
    return RULES[code].default and bool(STATUS["rules"].get(code, {}).get("stable"))


def default_codes() -> list[str]:
    """The stable rules: those that run without --preview or a selection by code."""
    return sorted(c for c in RULES if is_stable(c))


def preview_codes() -> list[str]:
    return sorted(c for c in RULES if not is_stable(c))


def rules_for_tip(tip_name: str) -> list[Rule]:
    """The rules whose findings quote ``tip_name``'s verdict."""
    return [r for r in RULES.values() if r.tip == tip_name]
