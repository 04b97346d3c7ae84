"""Preview rules that need positive evidence before they speak (issue 33): an object built by a
constructor is no loss tensor (PTT013), a project that creates complex parameters cannot take
fused Adam (PTT031), a project's own grad-free context manager is followed into the file that
defines it (PTT023), and a file the same code wrote is its own (PTT001). Synthetic code only."""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch

from tipsite.checker import engine


def codes(source: str, torch_release=(2, 13), device="cuda", path: Path | None = None) -> list[str]:
    text = textwrap.dedent(source)
    checker = engine.Checker(torch_release, device)
    if path is None:
        return [f.code for f in checker.check_source(text)]
    path.write_text(text)
    return [f.code for f in checker.check_source(text, path=str(path))]


# --- PTT013: loss functions kept in a list are objects, not loss tensors ---------------------------

_CRITERIA = """\
    import torch
    from torch import nn
    class RelL2:
        def __call__(self, a, b):
            return ((a - b) ** 2).mean()
    first = SobolevNorm(order=1)
    second = RelL2()
    chosen = []
    scales = []
    for term in settings.terms:
        if term == "sobolev":
            chosen.append(first)
        elif term == "rel":
            chosen.append(second)
        else:
            chosen.append(nn.SmoothL1Loss())
        scales.append(settings.loss_scales.get(term, 1.0))
"""


def test_loss_functions_collected_in_a_list_are_objects_not_loss_tensors():
    """A constructor's value (a CamelCase class, a class of the file) and a setting read with a
    plain default hold no graph: appending them keeps nothing alive."""
    assert "PTT013" not in codes(_CRITERIA, (2, 13), "cpu")


def test_a_loss_tensor_appended_in_a_step_loop_is_still_reported():
    src = """\
        import torch
        crit = SobolevNorm(order=1)
        seen = []
        for xb, yb in loader:
            step_loss = crit(net(xb), yb)
            step_loss.backward()
            seen.append(step_loss)
    """
    assert "PTT013" in codes(src, (2, 13), "cpu")
    # the name rebound from an object to a tensor is a tensor again
    rebound = src.replace("            seen.append(step_loss)",
                          "            step_loss_value = SobolevNorm(order=2)\n"
                          "            step_loss_value = crit(net(xb), yb)\n"
                          "            seen.append(step_loss_value)")
    assert "PTT013" in codes(rebound, (2, 13), "cpu")


# --- PTT031: fused Adam raises on complex parameters ------------------------------------------------

def test_fused_adam_raises_on_a_complex_parameter():
    """What the rule relies on, checked on this torch (fused Adam runs on the CPU from 2.4): the
    complex parameter is refused at step(), the foreach path takes it."""
    weight = torch.nn.Parameter(torch.randn(3, dtype=torch.cfloat))
    weight.grad = torch.randn(3, dtype=torch.cfloat)
    torch.optim.Adam([weight], foreach=True).step()
    try:
        torch.optim.Adam([weight], fused=True).step()
    except RuntimeError as err:
        assert "floating point" in str(err)
    else:
        raise AssertionError("fused Adam took a complex parameter")


_TRAIN = """\
    import torch
    from spectral.layers import FourierBlock
    net = FourierBlock(8).cuda()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
"""


def _project(tmp_path: Path, layer: str) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'spectral'\n")
    pkg = tmp_path / "spectral"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "layers.py").write_text(textwrap.dedent(layer))
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    return scripts / "train.py"


def test_fused_is_not_advised_where_the_project_creates_complex_parameters(tmp_path):
    layer = """\
        import torch
        from torch import nn
        class FourierBlock(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.mix = nn.Parameter(torch.randn(width, width, 4, dtype=torch.cfloat))
    """
    assert "PTT031" not in codes(_TRAIN, path=_project(tmp_path, layer))


def test_a_complex_dtype_passed_to_a_weight_factory_in_init_counts(tmp_path):
    layer = """\
        import torch
        from torch import nn
        class FourierBlock(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.mix = LowRankWeight.new((width, width), rank=2, dtype=torch.complex64)
    """
    assert "PTT031" not in codes(_TRAIN, path=_project(tmp_path, layer))


def test_complex_activations_or_buffers_alone_keep_the_advice(tmp_path):
    """An FFT's output in a forward and a complex buffer are no parameters: fused=True works."""
    layer = """\
        import torch
        from torch import nn
        class FourierBlock(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.mix = nn.Parameter(torch.randn(width, width))
                self.register_buffer("phase", torch.polar(torch.ones(4), torch.zeros(4)))
            def forward(self, x):
                spec = torch.fft.rfft(x)
                out = torch.zeros(x.shape, dtype=torch.cfloat, device=x.device)
                return torch.fft.irfft(out + spec)
    """
    assert "PTT031" in codes(_TRAIN, path=_project(tmp_path, layer))
    # and in a single file: its own complex parameter silences it, real ones do not
    own = textwrap.dedent(_TRAIN).replace("from spectral.layers import FourierBlock\n", "") + \
        "w = torch.nn.Parameter(torch.randn(4, dtype=torch.cdouble))\n"
    assert "PTT031" not in codes(own)
    assert "PTT031" in codes(own.replace(", dtype=torch.cdouble", ""))


# --- PTT023: a project's own grad-free context manager --------------------------------------------

_HELPERS = """\
    import contextlib
    import torch
    def rollout_mode(shared):
        if shared:
            return torch.no_grad()
        return torch.inference_mode()
    @contextlib.contextmanager
    def quiet_grads():
        with torch.no_grad():
            yield
    def timed(label):
        return contextlib.nullcontext()
"""

_WORKER = """\
    import torch
    from agentlib.utils import {name}
    class Worker:
        def act(self, policy, obs):
            with {name}(self.shared):
                policy.eval()
                out = policy(obs)
                self.buffer.append(out)
"""


def _worker(tmp_path: Path, name: str) -> list[str]:
    (tmp_path / "setup.py").write_text("")
    pkg = tmp_path / "agentlib"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "utils.py").write_text(textwrap.dedent(_HELPERS))
    return codes(_WORKER.replace("{name}", name), path=pkg / "worker.py")


def test_a_project_helper_returning_a_grad_free_mode_is_followed(tmp_path):
    assert "PTT023" not in _worker(tmp_path, "rollout_mode")


def test_a_project_contextmanager_yielding_under_no_grad_is_followed(tmp_path):
    assert "PTT023" not in _worker(tmp_path, "quiet_grads")


def test_a_project_helper_that_keeps_autograd_on_is_still_reported(tmp_path):
    assert "PTT023" in _worker(tmp_path, "timed")


# --- PTT001: files the same code writes ---------------------------------------------------------

_GATHER = """\
    import io
    import torch
    def share(obj, peers):
        buf = io.BytesIO()
        torch.save(obj, buf)
        payload = exchange(buf.getvalue(), peers)
        return [torch.load(io.BytesIO(p)) for p in payload]
    def spill(obj, folder, rank, world):
        mine = f"{folder}/spill_{rank}.pkl"
        torch.save(obj, mine)
        sync()
        out = []
        for r in range(world):
            theirs = f"{folder}/spill_{r}.pkl"
            out.append(torch.load(theirs))
        return out
"""


def test_loads_of_what_the_function_itself_pickled_are_its_own():
    """A payload pickled into a buffer by the same function (objects passed between ranks), and a
    file written under the same name pattern just before: nothing foreign is unpickled."""
    assert "PTT001" not in codes(_GATHER, (2, 5))
    foreign = _GATHER.replace('theirs = f"{folder}/spill_{r}.pkl"', 'theirs = downloaded[r]')
    assert codes(foreign, (2, 5)).count("PTT001") == 1
    no_save = _GATHER.replace("        torch.save(obj, buf)\n", "")
    assert codes(no_save, (2, 5)).count("PTT001") == 1


_MODEL = """\
    import torch
    from torch import nn
    class Net(nn.Module):
        def save_to(self, folder, tag):
            target = folder.joinpath(f"{tag}_weights.pt")
            torch.save(self.state_dict(), target)
            torch.save(self.settings, folder.joinpath(f"{tag}_settings.pkl"))
        def restore(self, folder, tag):
            target = folder.joinpath(f'{tag}_weights.pt')
            self.load_state_dict(torch.load(target, weights_only=False))
        @classmethod
        def build(cls, folder, tag):
            kwargs = torch.load(folder.joinpath(f"{tag}_settings.pkl"), weights_only=False)
            return cls(**kwargs)
"""


def test_an_explicit_false_on_a_file_another_method_of_the_class_writes_is_its_choice():
    """Both loads read what save_to writes (the same literal file names): neither is reported,
    the weights one no more than the settings one."""
    assert "PTT001" not in codes(_MODEL, (2, 5))
    other = _MODEL.replace("f'{tag}_weights.pt'", "f'{tag}_release.pt'")
    assert codes(other, (2, 5)).count("PTT001") == 1


_CALLERS = """\
    import torch
    class Scorer:
        def evaluate_batch(self, batch):
            self.net.eval()
            return self.net(batch)
        def reference_stats(self, loader):
            return [self.evaluate_batch(b) for b in loader]
        @torch.inference_mode()
        def score(self, loader):
            ref = self.reference_stats(loader)
            return self.evaluate_batch(loader.first()), ref
"""


def test_eval_in_a_helper_reached_only_from_a_grad_free_method_is_left_alone():
    """evaluate_batch() is called from score() (under inference_mode) and from reference_stats(),
    itself called only from score(): no graph on any path. A caller outside keeps it reported."""
    assert "PTT023" not in codes(_CALLERS)
    outside = textwrap.dedent(_CALLERS) + "def train_step(s, b):\n    return s.evaluate_batch(b)\n"
    assert "PTT023" in codes(outside)


def test_a_folder_that_is_no_project_is_read_alone_not_every_folder_below_it(tmp_path):
    """A loose script (no pyproject.toml, setup.py, setup.cfg or .git above it: a file in /tmp)
    has no project: the complex parameters of a folder below it are not its model's, and the
    folders below are not read (a script in /tmp read every Python file under /tmp, 6 s)."""
    layer = """\
        import torch
        from torch import nn
        class FourierBlock(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.mix = nn.Parameter(torch.randn(width, width, 4, dtype=torch.cfloat))
    """
    loose = tmp_path / "loose"
    (loose / "other").mkdir(parents=True)
    (loose / "other" / "layers.py").write_text(textwrap.dedent(layer))
    assert engine._project_root(str(loose)) == str(loose)  # nothing marks a project up to /
    assert "PTT031" in codes(_TRAIN, path=loose / "train.py")
    (loose / "pyproject.toml").write_text("[project]\nname = 'loose'\n")
    engine._tree_scan.cache_clear()
    assert "PTT031" not in codes(_TRAIN, path=loose / "train2.py")  # a project now: read whole
