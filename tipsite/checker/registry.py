"""The checker's rules: one stable code per pattern, the tip whose evidence judges it, examples.

Pure data, importable without libcst or torch (the tip validator, :mod:`tipsite.tipmeta`, checks
a tip's ``sphinx_gallery_tips_rules`` against :data:`RULES` in the docs build's environment).
The visitors that find each pattern live in :mod:`tipsite.checker.visitors`.

A rule's message has two halves. ``finding`` says what the code does, whatever any tip found.
``advice`` says what to do instead; it is printed only where the tip's verdict for the reader's
device is "holds". Where the verdict is "depends", "wrong" or "outdated", or nothing was
measured there, the checker says that in its place (:mod:`tipsite.checker.evidence`).

``example`` is a small snippet the rule flags (exactly once, at ``example_at``: line, column);
``clean`` is the recommended form of the same code, which it must not flag. The tests run both.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    torchfix: str | None = None  # the TorchFix error code this rule reports, where TorchFix has it


def _snippet(text: str) -> str:
    return text.strip("\n") + "\n"


_RULES = [
    Rule(
        "PTT001", "tip_weights_only_load", "torch.load can run code",
        "torch.load without weights_only=True unpickles arbitrary objects: a checkpoint can run code",
        "pass weights_only=True (allow your own classes with torch.serialization.add_safe_globals)",
        _snippet("""
import torch
state = torch.load("ckpt.pt", weights_only=False)
"""), (2, 9),
        _snippet("""
import torch
state = torch.load("ckpt.pt", weights_only=True)
"""),
        torchfix="TOR102",
    ),
    Rule(
        "PTT002", "tip_map_location", "torch.load without map_location",
        "torch.load without map_location restores every storage to the device it was saved from "
        "(e.g. cuda:0) before any .to() can move it",
        "pass map_location=device to load straight onto the device you want",
        _snippet("""
import torch
state = torch.load("ckpt.pt", weights_only=True)
model.load_state_dict(state)
"""), (2, 9),
        _snippet("""
import torch
state = torch.load("ckpt.pt", map_location="cpu", weights_only=True)
"""),
    ),
    Rule(
        "PTT003", "tip_mmap_meta_load", "two copies of the weights while loading",
        "load_state_dict() of a torch.load() without mmap=True holds two full copies of the weights "
        "in memory (the module's and the loaded ones)",
        "torch.load(..., mmap=True), build the model under torch.device('meta') and call "
        "load_state_dict(sd, assign=True)",
        _snippet("""
import torch
model = Net()
model.load_state_dict(torch.load("ckpt.pt", weights_only=True))
"""), (3, 1),
        _snippet("""
import torch
sd = torch.load("ckpt.pt", weights_only=True, mmap=True)
with torch.device("meta"):
    model = Net()
model.load_state_dict(sd, assign=True)
"""),
    ),
    Rule(
        "PTT004", "tip_state_dict", "torch.save of a whole module",
        "torch.save(model) pickles the module object: loading it needs the same classes, importable "
        "under the same names",
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
    ),
    Rule(
        "PTT005", "tip_mixed_precision", "torch.cuda.amp",
        "torch.cuda.amp.autocast / GradScaler are deprecated (a FutureWarning since torch 2.4)",
        "use torch.amp.autocast('cuda', ...) and torch.amp.GradScaler('cuda'), around the forward "
        "pass and the loss only",
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
    ),
    Rule(
        "PTT007", "tip_variable_wrapping", "Variable(...)",
        "torch.autograd.Variable(t) is deprecated and returns t detached: harmless on input "
        "data, it silently cuts the graph on an intermediate result",
        "use the tensor itself (torch.tensor(..., requires_grad=True) for a leaf)",
        _snippet("""
from torch.autograd import Variable
x = Variable(torch.ones(3), requires_grad=True)
"""), (2, 5),
        _snippet("""
import torch
x = torch.ones(3, requires_grad=True)
"""),
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
    ),
    Rule(
        "PTT010", "tip_arange_indexing", "H[torch.arange(B), idx]",
        "H[torch.arange(B), idx] pairs batch element b with idx[b]; the advice to write H[:, idx] "
        "instead changes the result whenever idx has one entry per batch element",
        "for one index per batch element keep the pairing (or use torch.gather); H[:, idx] only for "
        "a scalar idx or one shared list of rows",
        _snippet("""
import torch
rows = H[torch.arange(H.shape[0]), idx]
"""), (2, 8),
        _snippet("""
import torch
rows = H[:, idx]
"""),
    ),
    Rule(
        "PTT011", "tip_sync_points", ".item() / .cpu() in a loop",
        "a .item() / .cpu() / .tolist() / .numpy() call inside a loop makes the host wait for the "
        "GPU on every iteration",
        "accumulate on the device and read the value once, after the loop",
        _snippet("""
import torch
total = 0.0
for batch in loader:
    loss = step(batch)
    total += loss.item()
"""), (5, 14),
        _snippet("""
total = torch.zeros(())
for batch in loader:
    loss = step(batch)
    total += loss.detach()
print(total.item())
"""),
    ),
    Rule(
        "PTT012", "tip_mean_loss_leak", "mean_loss += loss",
        "adding a loss tensor to a running total (x += loss) records the addition in autograd: the "
        "total keeps every step's graph alive",
        "add loss.item() (a Python float) or loss.detach()",
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
    ),
    Rule(
        "PTT013", "tip_detach_logged_values", "logging tensors that carry a graph",
        "appending a loss (or a value computed from it) to a list keeps its autograd graph alive "
        "as long as the list",
        "append loss.item() for a number or loss.detach() for a tensor",
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
    history.append(loss.item())
"""),
    ),
    Rule(
        "PTT014", "tip_from_numpy", "torch.tensor(ndarray)",
        "torch.tensor(ndarray) always copies the array's data",
        "torch.from_numpy(array) (or torch.as_tensor) shares the array's memory instead",
        _snippet("""
import numpy as np
import torch
array = np.zeros(1000, dtype=np.float32)
t = torch.tensor(array)
"""), (4, 5),
        _snippet("""
import numpy as np
import torch
array = np.zeros(1000, dtype=np.float32)
t = torch.from_numpy(array)
"""),
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
    ),
    Rule(
        "PTT019", "tip_inference_mode", "torch.no_grad() for inference",
        "torch.no_grad() for a forward pass still keeps version counters and view tracking on "
        "the tensors it creates",
        "use torch.inference_mode() when the outputs never meet autograd later",
        _snippet("""
import torch
with torch.no_grad():
    out = model(x)
"""), (2, 6),
        _snippet("""
import torch
with torch.inference_mode():
    out = model(x)
"""),
    ),
    Rule(
        "PTT020", "tip_dataloader_workers", "DataLoader without workers",
        "DataLoader without num_workers (or num_workers=0) loads every batch in the training "
        "process, between steps",
        "set num_workers > 0 (and persistent_workers=True) so loading overlaps training",
        _snippet("""
from torch.utils.data import DataLoader
loader = DataLoader(dataset, batch_size=32)
"""), (2, 10),
        _snippet("""
from torch.utils.data import DataLoader
loader = DataLoader(dataset, batch_size=32, num_workers=2, persistent_workers=True)
"""),
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
"""), (2, 10),
        _snippet("""
from torch.utils.data import DataLoader
loader = DataLoader(dataset, batch_size=32, num_workers=2, pin_memory=True)
"""),
    ),
    Rule(
        "PTT022", "tip_non_blocking", "blocking copies in the data loop",
        "a blocking .to(device) / .cuda() of each batch makes the host wait for the copy before it "
        "can queue the next kernel",
        "pin the batches (pin_memory=True) and copy with .to(device, non_blocking=True)",
        _snippet("""
import torch
for inputs, target in loader:
    inputs = inputs.to(device)
"""), (3, 14),
        _snippet("""
import torch
for inputs, target in loader:
    inputs = inputs.to(device, non_blocking=True)
"""),
    ),
    Rule(
        "PTT023", "tip_eval_and_no_grad", "eval() without no_grad()",
        "model.eval() alone still records the autograd graph of every forward pass: it only "
        "changes what dropout and batch norm compute",
        "evaluate under torch.no_grad() (or torch.inference_mode()) as well as model.eval()",
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
    with torch.no_grad():
        return model(x)
"""),
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
    ),
    Rule(
        "PTT026", "tip_closure_scope", "loop tensors outlive the training loop",
        "names bound in a training loop keep the last batch's tensors (inputs, outputs, loss) "
        "alive after the loop, until the function returns",
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
    ),
    Rule(
        "PTT027", "tip_memory_allocated", "torch.cuda.memory_allocated()",
        "torch.cuda.memory_allocated() counts only tensors in PyTorch's CUDA allocator: CPU memory "
        "reads as 0",
        "on CPU measure with torch.profiler (profile_memory=True) or the process's resident memory",
        _snippet("""
import torch
print(torch.cuda.memory_allocated(device))
"""), (2, 7),
        _snippet("""
import torch
if device.type == "cuda":
    print(torch.cuda.max_memory_allocated(device))
"""),
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
    ),
    Rule(
        "PTT030", "tip_register_buffer_parameter", "plain tensor attribute in a module",
        "a tensor assigned as a plain attribute in __init__ is not part of state_dict() and is "
        "not moved by .to() / .double()",
        "self.register_buffer(name, tensor) (persistent=False to keep it out of state_dict)",
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
        self.register_buffer("mask", torch.ones(16))
"""),
    ),
    Rule(
        "PTT031", "tip_foreach_fused_optimizers", "optimizer without fused=True",
        "an optimizer built without fused=True runs its update as a loop (or foreach ops) over "
        "the parameters",
        "pass fused=True where the optimizer and device support it",
        _snippet("""
import torch
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
"""), (2, 7),
        _snippet("""
import torch
opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
"""),
    ),
    Rule(
        "PTT032", "tip_tensor_core_multiples", "layer size not a multiple of 8",
        "an nn.Linear whose sizes are not multiples of 8 cannot use the fastest Tensor Core "
        "kernels",
        "pad the sizes to multiples of 8 (for fp16/bf16 on NVIDIA GPUs)",
        _snippet("""
from torch import nn
head = nn.Linear(4095, 1000)
"""), (2, 8),
        _snippet("""
from torch import nn
head = nn.Linear(4096, 1000)
"""),
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
    ),
]

RULES: dict[str, Rule] = {r.code: r for r in _RULES}
if len(RULES) != len(_RULES):  # pragma: no cover - a typo in the table above
    raise RuntimeError("two rules share a code")


def codes() -> list[str]:
    return sorted(RULES)


def rules_for_tip(tip_name: str) -> list[Rule]:
    """The rules whose findings quote ``tip_name``'s verdict."""
    return [r for r in RULES.values() if r.tip == tip_name]
