"""The code checker (tipsite/checker/): rules on snippets, on the tips and on labelled real code;
evidence; the command line's habits; speed; packaging."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("libcst", reason="the checker's requirements (conf/requirements/check.txt) are missing")

from conftest import ROOT, build_env  # noqa: E402

from tipsite import records, tipmeta  # noqa: E402
from tipsite.checker import bench, cli, config, engine, evidence, labels, runner, shipdata, tipcells  # noqa: E402
from tipsite.checker.registry import RULES, is_stable  # noqa: E402


@pytest.fixture(scope="module")
def checker() -> engine.Checker:
    return engine.Checker()


def codes_at(checker, source: str) -> list[tuple[int, int, str]]:
    return [(f.line, f.col, f.code) for f in checker.check_source(textwrap.dedent(source))]


def codes(source: str, torch: tuple[int, ...] | None = None, device: str = "cpu") -> list[str]:
    return [f.code for f in engine.Checker(torch, device).check_source(textwrap.dedent(source))]


# --- each rule on its own examples -------------------------------------------------------------

@pytest.mark.parametrize("code", sorted(RULES))
def test_rule_flags_its_example_once(checker, code):
    rule = RULES[code]
    found = [(line, col) for line, col, c in codes_at(checker, rule.example) if c == code]
    assert found == [rule.example_at], f"{code} on its example:\n{rule.example}"


@pytest.mark.parametrize("code", sorted(RULES))
def test_a_rules_recommended_fix_passes_every_rule(checker, code):
    """No rule recommends what another flags (the .item() PTT012 advised was PTT011's finding,
    the no_grad() PTT023 advised was PTT019's); the target torch and device change nothing."""
    for torch, device in ((None, "cpu"), ((2, 13), "cuda"), ((2, 5), "cuda")):
        found = engine.Checker(torch, device).check_source(RULES[code].clean)
        assert not found, f"{code}'s clean form is flagged by {[(f.code, f.line) for f in found]}"


POSITIVE = {
    "PTT001": "import torch\nx = torch.load(p, weights_only=False)\n",
    "PTT002": "import torch\nsd = torch.load(p)\nmodel.load_state_dict(sd['model'])\nmodel.cuda()\n",
    "PTT003": "import torch\nfrom accelerate import init_empty_weights\nsd = torch.load(p, weights_only=True)\n"
              "model.load_state_dict(sd['model'])\n",
    "PTT005": "from torch.cuda.amp import GradScaler\nscaler = GradScaler()\n",
    "PTT011": "import torch\nwhile True:\n    loss = f()\n    loss.backward()\n    log(loss.item())\n",
    "PTT012": "import torch\nfor b in loader:\n    out = criterion(model(b), y)\n    out.backward()\n    total += out\n",
    "PTT013": "import torch\nfor b in loader:\n    loss = f(b)\n    value = loss if c else loss * 2\n    h.append(value)\n",
    "PTT015": "import torch\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return x.to('cuda')\n",
    "PTT020": "import torch\nfrom torchvision.datasets import ImageFolder\n"
              "loader = torch.utils.data.DataLoader(ImageFolder(root), num_workers=0)\n",
    "PTT022": "import torch\nfrom torch.utils.data import DataLoader\nkw = {'pin_memory': True}\n"
              "train_loader = DataLoader(ds, **kw)\nfor i, (x, y) in enumerate(train_loader):\n    x = x.cuda()\n",
    "PTT026": "import torch\ndef fit():\n    for x in data:\n        loss = f(x)\n        loss.backward()\n"
              "    validate(model)\n",
    "PTT031": "import torch\nmodel.cuda()\nopt = torch.optim.AdamW(model.parameters(), foreach=False)\n",
    "PTT034": "import torch\nwith torch.autograd.detect_anomaly():\n    loss.backward()\n",
}
NEGATIVE = {
    "PTT001": "import torch\nx = torch.load(p, **options)\n",  # unknown keywords: no claim
    "PTT002": "import torch\nmodel.cuda()\nsd = torch.load(p)\nmodel.load_state_dict(sd)\n",  # moved before
    "PTT003": "import torch\nfrom accelerate import init_empty_weights\n"
              "sd = torch.load(p, weights_only=True, mmap=True)\nmodel.load_state_dict(sd)\n",
    "PTT004": "import torch\ntorch.save({'model': model.state_dict()}, p)\n",
    "PTT011": "import torch\nfor b in loader:\n    total += loss.detach()\nprint(total.item())\n",
    "PTT012": "import torch\nfor b in loader:\n    loss = criterion(model(b), y).item()\n    total += loss\n",
    "PTT013": "import torch\nfor b in loader:\n    loss = f(b)\n    h.append(loss.detach())\n",
    "PTT016": "import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x * torch.ones_like(x)\n",
    "PTT019": "import torch\nwith torch.no_grad():\n    for p in model.parameters():\n        p -= 0.1 * p.grad\n",
    "PTT020": "import torch\nloader = torch.utils.data.DataLoader(ds, **kw)\n",
    "PTT022": "import torch\nfor x in batches:\n    x = x.to(device)\n",  # not a DataLoader loop
    "PTT023": "import torch\n@torch.no_grad()\ndef ev(model, x):\n    model.eval()\n    return model(x)\n",
    "PTT026": "import torch\ndef fit():\n    for x in data:\n        loss = f(x)\n        loss.backward()\n    return model\n",
    "PTT027": "import torch\nif torch.cuda.is_available():\n    used = torch.cuda.memory_allocated()\n",
    "PTT028": "import torch\nwhile n:\n    try:\n        step(n)\n    except RuntimeError as e:\n        if 'out of memory' not in str(e):\n            raise\n        n //= 2\n",
    "PTT032": "from torch import nn\nhead = nn.Linear(768, 1)\n",
    "PTT034": "import torch\ntorch.autograd.set_detect_anomaly(mode=False)\n",
}


@pytest.mark.parametrize("code", sorted(POSITIVE))
def test_more_positive_snippets(code):
    assert code in codes(POSITIVE[code], (2, 13), "cuda"), POSITIVE[code]


@pytest.mark.parametrize("code", sorted(NEGATIVE))
def test_more_negative_snippets(code):
    assert code not in codes(NEGATIVE[code], (2, 13), "cuda"), NEGATIVE[code]


# --- no advice that breaks code (the cases of issue 26) ---------------------------------------------

def test_a_sum_or_list_that_reaches_backward_is_not_a_leak():
    style = """\
        import torch
        def train(model, loader):
            for x in loader:
                style_loss = 0.
                for ft_y, gm_s in zip(features(x), grams):
                    style_loss += mse_loss(gram(ft_y), gm_s)
                total_loss = content_loss + style_loss
                total_loss.backward()
        """
    assert "PTT012" not in codes(style)
    stacked = """\
        import torch
        def finish_episode():
            value_losses = []
            for (log_prob, value), R in zip(saved, returns):
                value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))
            loss = torch.stack(value_losses).sum()
            loss.backward()
        """
    assert "PTT013" not in codes(stacked)
    built = """\
        import torch
        class DINOLoss(torch.nn.Module):
            def forward(self, student, teacher):
                total_loss = 0
                for q in teacher:
                    loss = torch.sum(-q * student, dim=-1)
                    total_loss += loss.mean()
                return total_loss
        """
    assert "PTT012" not in codes(built)
    leak = """\
        import torch
        def train(model, loader):
            running = 0
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                running += loss
            return running / len(loader)
        """
    assert "PTT012" in codes(leak)


def test_manual_gradient_accumulation_keeps_set_to_none_false():
    src = """\
        import torch
        def update(self, grads):
            for p, g in zip(self.model.parameters(), grads):
                p.grad += g
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=False)
        """
    assert "PTT006" not in codes(src)
    assert "PTT006" in codes("import torch\noptimizer.zero_grad(set_to_none=False)\n")


@pytest.mark.parametrize("call, flagged", [
    ("optim.Adadelta(model.parameters(), lr=1.0)", False),
    ("optim.RMSprop(model.parameters())", False),
    ("optim.NAdam(model.parameters())", False),
    ("optim.AdamW(model.parameters(), lr=lr, foreach=True)", False),
    ("optim.AdamW(model.parameters(), lr=lr, fused=use_fused)", False),
    ("optim.Adam(model.parameters(), lr=lr)", True),
])
def test_fused_only_where_the_optimizer_and_release_take_it(call, flagged):
    src = f"import torch\nfrom torch import optim\ndevice = 'cuda'\nopt = {call}\n"
    assert ("PTT031" in codes(src, (2, 13), "cuda")) is flagged


def test_fused_follows_the_release_and_device():
    src = "import torch\ndevice = 'cuda'\nopt = torch.optim.AdamW(params)\n"
    assert "PTT031" in codes(src, (2, 0), "cuda") and "PTT031" not in codes(src, (1, 13), "cuda")
    assert "PTT031" in codes(src, (2, 4), "cpu") and "PTT031" not in codes(src, (2, 3), "cpu")
    cpu_only = "import torch\nopt = torch.optim.AdamW(params)\n"  # never names an accelerator
    assert "PTT031" not in codes(cpu_only, (2, 13), "cuda")


def test_torch_load_follows_the_releases_default_and_safe_globals():
    implicit = "import torch\nsd = torch.load(path)\n"
    assert "PTT001" not in codes(implicit, (2, 13)) and "PTT001" not in codes(implicit, None)
    assert "PTT001" in codes(implicit, (2, 5))
    guarded = "import torch\nwith torch.serialization.safe_globals([Net]):\n    model = torch.load(f)\n"
    assert "PTT001" not in codes(guarded, (2, 5))
    assert "PTT001" in codes("import torch\nsd = torch.load(path, weights_only=False)\n", (2, 13))
    found = engine.Checker((2, 5)).check_source(implicit)
    assert [(f.code, f.torchfix) for f in found if f.code == "PTT001"] == [("PTT001", "TOR102")]


def test_weights_only_false_in_a_function_put_in_place_of_torchs_own_is_torchs_choice():
    patched = """
        import io
        import torch

        def storages_on_host():
            kept = torch.storage._load_from_bytes
            def _from_bytes(raw):
                return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=False)
            torch.storage._load_from_bytes = _from_bytes
            return kept
    """
    assert "PTT001" not in codes(patched, (2, 13))
    # the same function, not put in torch's place: still a stated False without a reason
    assert "PTT001" in codes(patched.replace("torch.storage._load_from_bytes = ", "hook = "), (2, 13))


def test_weights_only_false_reading_a_lightning_checkpoints_hyper_parameters_is_the_choice():
    settings = """
        import torch

        def run_settings(path):
            blob = torch.load(path, map_location="cpu", weights_only=False)
            return blob["hyper_parameters"]["setup"]
    """
    assert "PTT001" not in codes(settings, (2, 13))
    resume = """
        import torch

        def restart(path):
            blob = torch.load(path, map_location="cpu", weights_only=False)
            step = blob["state_dict"]["counter"].item()
            return step, blob["hparams"]["stages"]
    """
    assert "PTT001" not in codes(resume, (2, 13))
    # weights alone, or a key named like parameters: still reported
    weights = settings.replace('["hyper_parameters"]["setup"]', '["params"]["setup"]')
    assert "PTT001" in codes(weights, (2, 13))


def test_a_rebound_path_with_one_file_name_pattern_is_the_functions_own_file():
    merge = """
        import os
        import torch

        def merge_parts(items, out, tag, world, me):
            part = os.path.join(out, "%s_piece%d.pt" % (tag, me))
            torch.save({"items": items}, part)
            merged = []
            for r in range(world):
                part = os.path.join(out, "%s_piece%d.pt" % (tag, r))
                merged += torch.load(part, map_location="cpu")["items"]
            return merged
    """
    assert "PTT001" not in codes(merge, (2, 5))
    # rebound to another file name than the one saved: not shown to be the function's own
    other = merge.replace('"%s_piece%d.pt" % (tag, r)', '"%s_other%d.pt" % (tag, r)')
    assert "PTT001" in codes(other, (2, 5))


def test_torch_load_in_branches_of_a_torch_version_test_is_the_projects_choice():
    """A project that tests torch's release and states weights_only in one branch (False from
    2.6 for its own files, left out for a torch that lacks the argument) chose per release: both
    branches are silent. A version test that never names weights_only, a test of another
    version, and a plain load stay reported."""
    compared = """\
        import torch
        def restore(fname):
            release = torch.__version__
            if release >= "2.6":
                return torch.load(fname, weights_only=False)
            else:
                return torch.load(fname)
        """
    bound = """\
        import torch
        from packaging import version
        PARSED = version.parse(torch.__version__)
        NEWER = PARSED >= version.parse("2.6")
        def restore(fname):
            if not NEWER:
                blob = torch.load(fname, map_location="cpu")
            elif NEWER:
                blob = torch.load(fname, map_location="cpu", weights_only=False)
            return blob
        """
    flagged = """\
        import torch
        def restore(fname):
            return torch.load(fname, weights_only=False) if IS_TORCH_2_6 else torch.load(fname)
        """
    for src in (compared, bound, flagged):
        for release in ((2, 5), (2, 13)):
            assert "PTT001" not in codes(src, release), (src, release)
    other = """\
        import sys
        import torch
        def restore(fname):
            if sys.version_info >= (3, 9):
                return torch.load(fname, weights_only=False)
            return torch.load(fname)
        """
    assert codes(other, (2, 5)).count("PTT001") == 2 and "PTT001" in codes(other, (2, 13))
    no_choice = """\
        import torch
        def restore(fname):
            if torch.__version__ >= "2.0":
                return torch.load(fname)
            return torch.load(fname, map_location="cpu")
        """
    assert codes(no_choice, (2, 5)).count("PTT001") == 2
    assert "PTT001" in codes("import torch\ndef restore(fname):\n    return torch.load(fname)\n", (2, 5))


def test_a_retry_load_in_an_except_is_a_fallback_only_where_weights_only_differs():
    """A second torch.load in the handler of a try that loaded is the fallback for an old torch
    or a refused payload only where one of the two states weights_only; a retry for another
    reason (renamed keys) with the same mode is as unsafe as the first, and reported too."""
    retry = """\
        import torch
        def restore(net, fname):
            try:
                net.load_state_dict(torch.load(fname))
            except KeyError:
                weights = torch.load(fname)
                net.load_state_dict({k.split(".", 1)[1]: v for k, v in weights.items()})
        """
    assert codes(retry, (2, 5)).count("PTT001") == 2
    for first, handler in (("torch.load(fname, weights_only=True)", "torch.load(fname)"),
                           ("torch.load(fname)", "torch.load(fname, weights_only=False)")):
        src = f"import torch\ndef restore(fname):\n    try:\n        return {first}\n" \
              f"    except Exception:\n        return {handler}\n"
        assert codes(src, (2, 5)).count("PTT001") == ("weights_only" not in first), src


def test_cuda_amp_is_deprecated_from_24():
    src = "import torch\nwith torch.cuda.amp.autocast():\n    y = model(x)\n"
    assert "PTT005" in codes(src, (2, 4)) and "PTT005" not in codes(src, (2, 3))


def test_cuda_amp_custom_fwd_as_a_bare_decorator_is_deprecated_too():
    # a held-out miss (gpt-neox's grouped-GEMM Functions): a decorator is no call
    for src in ("import torch\nclass F(torch.autograd.Function):\n    @staticmethod\n"
                "    @torch.cuda.amp.custom_fwd\n    def forward(ctx, x):\n        return x\n",
                "from torch.cuda.amp import custom_bwd\n@custom_bwd\ndef backward(ctx, g):\n"
                "    return g\n"):
        assert codes(src, (2, 4)).count("PTT005") == 1 and "PTT005" not in codes(src, (2, 3))
    called = "import torch\n@torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)\ndef f(ctx, x):\n    return x\n"
    assert codes(called, (2, 4)).count("PTT005") == 1  # once, by the call
    for imported in ("from torch.cuda.amp import custom_fwd\n", "from torch.cuda import amp\n"):
        use = "custom_fwd" if "custom_fwd" in imported else "amp.custom_fwd"
        for deco in (f"@{use}", f"@{use}(cast_inputs=torch.float32)"):
            src = f"import torch\n{imported}class F:\n    @staticmethod\n    {deco}\n    def forward(ctx, x):\n        return x\n"
            assert codes(src, (2, 4)).count("PTT005") == 1, src
    fallback = ("import torch\ntry:\n    from torch.amp import custom_fwd\nexcept ImportError:\n"
                "    from torch.cuda.amp import custom_fwd\n    @custom_fwd\n    def f(ctx, x):\n        return x\n")
    assert "PTT005" not in codes(fallback, (2, 4))  # the old API only where the new one is missing
    new = "import torch\n@torch.amp.custom_fwd(device_type='cuda')\ndef f(ctx, x):\n    return x\n"
    assert "PTT005" not in codes(new, (2, 4))


def test_host_reads_only_on_every_training_step():
    gated = """\
        import torch
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            loss.backward()
            if i % 10 == 0:
                print(loss.item())
        """
    assert "PTT011" not in codes(gated)
    decides = """\
        import math
        import torch
        for x, y in loader:
            loss = criterion(model(x), y)
            loss_value = loss.item()
            if not math.isfinite(loss_value):
                raise SystemExit(1)
            loss.backward()
            logger.update(acc=acc.item())
        """
    assert "PTT011" not in codes(decides)
    rpc = """\
        import torch
        for inputs, labels in batches():
            loss_fn(m(inputs), labels).backward()
            m = send([p.grad for p in m.cpu().parameters()])
        """
    assert "PTT011" not in codes(rpc)


def test_host_read_in_a_step_function_a_loop_calls(checker):
    """A function that runs backward() and an optimizer step is one training step: its read,
    outside its loops and ifs, happens every step when a loop of the file calls it."""
    step = """\
        import torch
        class Runner:
            def fit_one(self, batch):
                out = self.net(batch["x"].to(self.dev))
                err = self.crit(out, batch["y"].to(self.dev))
                self.sgd_opt.zero_grad()
                err.backward()
                self.sgd_opt.step()
                return {"err": err.detach().cpu().numpy()}

            def fit(self):
                for _ in range(self.iters):
                    self.history.append(self.fit_one(next(self.feed)))
        """
    assert [line for line, _, c in codes_at(checker, step) if c == "PTT011"] == [9]
    # never called in a loop here: one call may be the whole run
    once = step.replace("for _ in range(self.iters):\n                    ", "")
    once = once.replace("self.history.append", "return self.history.append")
    assert "PTT011" not in codes(once)
    # no optimizer step in it: a gradient for something else (an attack, a saliency map)
    grad_only = step.replace("self.sgd_opt.step()", "self.sched.step()")
    assert "PTT011" not in codes(grad_only)
    # the read after a loop of its own: the function is an epoch, read once per epoch
    epoch = """\
        import torch
        def run_epoch(net, opt, feed):
            total = torch.zeros(())
            for x, y in feed:
                err = crit(net(x), y)
                err.backward()
                opt.step()
                total += err.detach()
            return total.item()

        for epoch in range(9):
            print(run_epoch(net, opt, feed))
        """
    assert "PTT011" not in codes(epoch)
    # read under an if (every N calls), or to decide something (the step waits anyway)
    gated = step.replace("return {", "if self.n % 50 == 0:\n                    return {")
    assert "PTT011" not in codes(gated)
    decides = step.replace("err.backward()", "value = err.item()\n                assert value < 1e9\n"
                           "                err.backward()")
    assert decides.count("err.item()") == 1 and "PTT011" not in codes(decides)
    # the loop tests the value the step returns: the read is the one its decision needs
    caller_decides = step.replace(
        "self.history.append(self.fit_one(next(self.feed)))",
        "out = self.fit_one(next(self.feed))\n                    if out[\"err\"] > 1e9:\n"
        "                        break")
    assert "PTT011" not in codes(caller_decides)
    for variant in (once, grad_only, epoch, gated, caller_decides):
        assert variant != step


def test_host_read_in_a_step_function_a_loop_over_epochs_calls(checker):
    """Full-batch training: a step function called straight from a loop over epochs does one
    optimizer step per epoch, so its read is one per epoch; called from a loop over batches
    (nested in the epoch loop or not), it is one per step."""
    full = """\
        import torch
        def fit(net, opt, feats, target):
            opt.zero_grad()
            err = crit(net(feats), target)
            err.backward()
            opt.step()
            return err.item()

        for trial in range(cfg.trials):
            for ep in range(1, cfg.num_epochs + 1):
                print(fit(net, opt, feats, target))
        """
    assert "PTT011" not in codes(full)
    named = full.replace("for ep in range(1, cfg.num_epochs + 1)", "for epoch in range(200)")
    assert "PTT011" not in codes(named)
    batches = full.replace("print(fit(net, opt, feats, target))",
                           "for feats, target in feed:\n                    "
                           "print(fit(net, opt, feats, target))")
    assert [line for line, _, c in codes_at(checker, batches) if c == "PTT011"] == [7]
    steps = full.replace("for ep in range(1, cfg.num_epochs + 1)", "for it in range(cfg.iters)")
    assert [line for line, _, c in codes_at(checker, steps) if c == "PTT011"] == [7]
    per_epoch = full.replace("for ep in range(1, cfg.num_epochs + 1)", "for it in range(cfg.steps_per_epoch)")
    assert [line for line, _, c in codes_at(checker, per_epoch) if c == "PTT011"] == [7]


def test_float_of_the_backpropagated_loss_is_a_host_read(checker):
    """float(loss) of the loss the loop calls backward() on reads it on the host every step, as
    loss.item() does; float() of a name the loop never backpropagates is left alone."""
    src = """\
        import torch
        for xb, yb in feed:
            opt.zero_grad()
            err = crit(net(xb.cuda()), yb.cuda())
            err.backward()
            opt.step()
            seen += float(err) * len(xb)
            lr_now = float(sched_lr)
        """
    assert [line for line, _, c in codes_at(checker, src) if c == "PTT011"] == [7]
    gated = src.replace("seen += float(err)", "if k % 100 == 0:\n                seen += float(err)")
    assert "PTT011" not in codes(gated)


def test_loader_over_indices_needs_no_pinned_memory(checker):
    """A DataLoader over range(n) or an index tensor yields small index batches that gather rows
    of tensors already placed: PTT021 stays silent; a loader over a dataset is still flagged."""
    src = """\
        import torch
        from torch.utils.data import DataLoader
        feats = feats.to("cuda")
        for rows in DataLoader(range(feats.size(0)), 512, shuffle=True):
            step(feats[rows])
        for rows in DataLoader(torch.randperm(n), batch_size=512):
            step(feats[rows])
        for rows in DataLoader(torch.arange(n), batch_size=512):
            step(feats[rows])
        for x in DataLoader(images, batch_size=512):
            step(x.to("cuda"))
        """
    assert [line for line, _, c in codes_at(checker, src) if c == "PTT021"] == [10]


def test_loader_with_explicit_pin_memory_false_is_a_choice(checker):
    """pin_memory=False written out (a literal, or a value the caller passes) is a stated
    choice: PTT021 stays silent; a loader that omits pin_memory is still flagged."""
    src = """\
        import torch
        from torch.utils.data import DataLoader
        def make(items, pin=False):
            a = DataLoader(items, batch_size=16, pin_memory=False)
            b = DataLoader(items, batch_size=16, pin_memory=pin)
            c = DataLoader(items, batch_size=16, num_workers=2)
            return a, b, c
        for x in make(items)[0]:
            step(x.to("cuda"))
        """
    assert [line for line, _, c in codes_at(checker, src) if c == "PTT021"] == [6]


def test_loader_that_accelerate_prepares_copies_its_batches_itself(checker):
    """A loader handed to accelerate's prepare() (bound first, or built in the call) has its
    batches copied by accelerate, blocking: PTT021 stays silent. Flagged still: a loader of the
    same file that is not prepared, one prepared where no accelerate is imported, and any
    prepared one once the file asks accelerate for non-blocking copies."""
    src = """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        hub = Accelerator()
        feed = DataLoader(shards, batch_size=4, num_workers=3)
        net, opt, feed = hub.prepare(net, opt, feed)
        probe = hub.prepare(DataLoader(held, batch_size=4))
        extra = DataLoader(held, batch_size=4)
        for clip in extra:
            score(clip.to("cuda"))
        """
    assert [line for line, _, c in codes_at(checker, src) if c == "PTT021"] == [8]
    plain = src.replace("from accelerate import Accelerator", "from mylib import Accelerator")
    assert [line for line, _, c in codes_at(checker, plain) if c == "PTT021"] == [5, 7, 8]
    eager = src.replace("hub = Accelerator()", "from accelerate.utils import DataLoaderConfiguration\n"
                        "        conf = DataLoaderConfiguration(non_blocking=True)\n"
                        "        hub = Accelerator(dataloader_config=conf)")
    assert [line for line, _, c in codes_at(checker, eager) if c == "PTT021"] == [7, 9, 10]


def test_loader_read_once_for_one_batch_needs_no_pinned_memory(checker):
    """A loader read only by next(iter(loader)), outside any loop, yields one batch copied once:
    PTT021 stays silent. Flagged still: the same loader also looped over, or peeked each step."""
    src = """\
        import torch
        from torch.utils.data import DataLoader
        def preview(net, scans):
            one = DataLoader(scans, batch_size=2, num_workers=1)
            sample = next(iter(one))
            return net(sample["vol"].to("cuda"))
        """
    assert [c for _, _, c in codes_at(checker, src)].count("PTT021") == 0
    looped = src.replace('    return net(sample["vol"].to("cuda"))',
                         '    return [net(b.to("cuda")) for b in one]')
    assert [line for line, _, c in codes_at(checker, looped) if c == "PTT021"] == [4]
    stepped = src.replace("sample = next(iter(one))", "for _ in range(9):\n"
                          "                sample = next(iter(one))")
    assert [line for line, _, c in codes_at(checker, stepped) if c == "PTT021"] == [4]


def test_load_in_the_dead_branch_of_a_constant_test_is_left_alone(checker):
    """PTT002: a load in the else of ``if 1:`` / ``if True:`` (or the body of ``if 0:``) never
    runs: silent; the same load under a real test is flagged."""
    src = """\
        import torch
        def restore(net, where):
            if 1:
                my_restore(net, where)
            else:
                net.load_state_dict(torch.load(where))
            return net.cuda()
        """
    assert "PTT002" not in [c for _, _, c in codes_at(checker, src)]
    assert "PTT002" not in [c for _, _, c in codes_at(checker, src.replace("if 1:", "if True:"))]
    live = src.replace("if 1:", "if where is None:")
    assert [line for line, _, c in codes_at(checker, live) if c == "PTT002"] == [6]


def test_load_of_a_cache_the_same_scope_builds_on_the_cpu_is_left_alone(checker):
    """PTT002: ``if exists(path): x = torch.load(path) else: x = build(); torch.save(x, path)``,
    where nothing bound before the save names a device: the file was written from the CPU and
    loads there. Flagged still: a cache built on the GPU, and a save to another path."""
    src = """\
        import os
        import torch
        def graph(cache, edges):
            if os.path.exists(cache):
                adj = torch.load(cache)
            else:
                adj = torch.from_numpy(edges).t()
                adj = adj.coalesce()
                torch.save(adj, cache)
            return adj.to("cuda")
        """
    assert "PTT002" not in [c for _, _, c in codes_at(checker, src)]
    gpu = src.replace(".t()\n", ".t().cuda()\n")
    assert [line for line, _, c in codes_at(checker, gpu) if c == "PTT002"] == [5]
    named = src.replace("adj.coalesce()", "adj.coalesce(device)")
    assert [line for line, _, c in codes_at(checker, named) if c == "PTT002"] == [5]
    other = src.replace("torch.save(adj, cache)", "torch.save(adj, cache + '.new')")
    assert [line for line, _, c in codes_at(checker, other) if c == "PTT002"] == [5]


def test_tensor_attribute_used_only_while_building_the_module(checker):
    """A plain tensor attribute that only __init__ (or a helper it hands it to) consumes is
    never read after construction: PTT030 stays silent. One read in forward, aliased by a
    helper, handed to a submodule, closed over by a lambda or never read in the file (another
    file may read it) is still flagged."""
    src = """\
        import torch
        from torch import nn
        class Sampler(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.weights = torch.ones(n)
                self.width = torch.ones(n)
                self.cut = torch.zeros(n)
                self.keep = torch.ones(n)
                self.scale = torch.ones(n)
                self.shift = torch.ones(n)
                self.setup(self.weights, self.keep)
                self.proj = nn.Linear(n, len(self.width))
                self.inner = Inner(self.scale)
                self.fn = lambda x: x * self.shift
                self.spare = torch.zeros(n)  # never read here: another file may read it
            def setup(self, w, k):
                w.div_(w.sum())
                self.w = len(w)  # an attribute named like the parameter
                for i, p in enumerate(w):
                    self.cut[i] = p * len(w)
                self.kept = k
            def forward(self, x):
                return self.fn(x[self.cut > 0])
        """
    assert [line for line, _, c in codes_at(checker, src) if c == "PTT030"] == [8, 9, 10, 11, 16]


def test_host_read_in_a_per_step_hook(checker):
    """A hook class's after_step runs after every training step: its reads are per step, unless
    an if skips steps (a period), in a file that names CUDA."""
    hook = """\
        import torch
        class MeterHook(BaseHook):
            def after_step(self):
                if "outs" in self.runner.info:
                    for name, value in self.runner.info["outs"].items():
                        self.meters[name].add(value.item())
                self.dev = torch.device("cuda")
        """
    assert [line for line, _, c in codes_at(checker, hook) if c == "PTT011"] == [6]
    periodic = hook.replace('if "outs" in self.runner.info:', "if self.runner.it % self.period == 0:")
    assert "PTT011" not in codes(periodic)
    not_a_hook = hook.replace("(BaseHook)", "(Meter)")
    assert "PTT011" not in codes(not_a_hook)
    other_method = hook.replace("def after_step", "def after_epoch")
    assert "PTT011" not in codes(other_method)
    no_cuda = hook.replace('self.dev = torch.device("cuda")', "self.n += 1")
    assert "PTT011" not in codes(no_cuda)
    # a module-level function of the same name: which after_step runs is not known
    twin = textwrap.dedent(hook) + "\ndef after_step(x):\n    return x\n"
    assert "PTT011" not in codes(twin)
    for variant in (periodic, not_a_hook, other_method, no_cuda):
        assert variant != hook


def test_forward_rules_skip_losses_matchers_and_moved_factories():
    src = """\
        import torch
        class DistillationLoss(torch.nn.Module):
            def forward(self, inputs, outputs):
                with torch.no_grad():
                    teacher = self.teacher(inputs)
                return self.kl(outputs, teacher)
        class HungarianMatcher(torch.nn.Module):
            def forward(self, outputs, targets):
                return linear_sum_assignment(cost.cpu())
        class Wrapper(torch.nn.Module):
            def forward(self, x):
                idx = torch.cumsum(torch.tensor([inp.shape[-1] for inp in x]), 0)
                out = torch.empty(0).to(x[0].device)
                return out, idx
        """
    assert not {"PTT015", "PTT016", "PTT017"} & set(codes(src))


# Rules for tips that had none (PTT035-PTT038): the pinned codebases hold too few of their patterns
# (2 findings of PTT035, none of the others) to judge them, so each has a small set of its own.
NEW_RULES_FLAGGED = [
    ("PTT035", "import torch\nmodel = torch.nn.DataParallel(model, device_ids=[0, 1])\n"),
    ("PTT035", "from torch.nn import DataParallel\nnet = DataParallel(Net()).cuda()\n"),
    ("PTT035", "import torch.nn as nn\nif torch.cuda.device_count() > 1:\n    model = nn.parallel.DataParallel(model)\n"),
    ("PTT036", "import torch\nfor x, y in loader:\n    loss_fn(model(x), y).backward()\n    opt.step()\n"
               "    torch.cuda.empty_cache()\n"),
    ("PTT036", "import torch\ndef train(model, loader):\n    for epoch in range(10):\n        for b in loader:\n"
               "            torch.cuda.empty_cache()\n            model(b).sum().backward()\n"),
    ("PTT037", "from torch import nn\nlayers = [nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU()]\n"),
    ("PTT037", "import torch\nb = torch.nn.Sequential(torch.nn.Conv1d(8, 8, 3, bias=True), torch.nn.BatchNorm1d(8))\n"),
    ("PTT037", "from torch.nn import ConvTranspose2d, BatchNorm2d, Sequential\n"
               "up = Sequential(ConvTranspose2d(64, 32, 4, 2, 1), BatchNorm2d(32))\n"),
    ("PTT038", "import torch\ndef step(model, x):\n    with torch.cuda.amp.autocast():\n        loss = model(x).sum()\n"
               "    loss.backward()\n"),
    ("PTT038", "import torch\ndef step(model, x):\n    with torch.amp.autocast(device_type='cuda'):\n"
               "        loss = model(x).sum()\n    loss.backward()\n"),
    ("PTT038", "import torch\ndef step(model, x):\n    with torch.autocast('cuda', dtype=torch.half), other():\n"
               "        loss = model(x).sum()\n    loss.backward()\n"),
]
NEW_RULES_NEAR_MISSES = [
    ("PTT035", "import torch\nmodel = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])\n"),
    ("PTT035", "import torch\nm = model.module if isinstance(model, torch.nn.DataParallel) else model\n"),
    ("PTT035", "from torch.nn.parallel import DistributedDataParallel as DP\nmodel = DP(model)\n"),
    ("PTT036", "import torch\nfor x, y in loader:\n    loss_fn(model(x), y).backward()\ntorch.cuda.empty_cache()\n"),
    ("PTT036", "import torch\nfor i, (x, y) in enumerate(loader):\n    loss_fn(model(x), y).backward()\n"
               "    if i % 100 == 0:\n        torch.cuda.empty_cache()\n"),
    ("PTT036", "import torch\nfor x, y in loader:\n    try:\n        loss_fn(model(x), y).backward()\n"
               "    except torch.OutOfMemoryError:\n        torch.cuda.empty_cache()\n"),
    ("PTT036", "import torch\nfor epoch in range(10):\n    train_one_epoch(model, loader)\n    torch.cuda.empty_cache()\n"),
    ("PTT036", "import torch\nwith torch.no_grad():\n    for x in loader:\n        out = model(x)\n"
               "        torch.cuda.empty_cache()\n"),
    ("PTT037", "from torch import nn\nb = nn.Sequential(nn.Conv2d(3, 16, 3, bias=False), nn.BatchNorm2d(16))\n"),
    ("PTT037", "from torch import nn\nb = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.BatchNorm2d(16))\n"),
    ("PTT037", "from torch import nn\nb = nn.Sequential(nn.Conv2d(3, 16, 3), nn.GroupNorm(4, 16))\n"),
    ("PTT037", "from torch import nn\nb = nn.Sequential(nn.Conv2d(3, 16, 3, bias=use_bias), nn.BatchNorm2d(16))\n"),
    ("PTT037", "from torch import nn\nb = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, 1, 1, False), nn.BatchNorm2d(16))\n"),
    ("PTT037", "from torch import nn\nb = nn.Sequential(nn.BatchNorm2d(3), nn.Conv2d(3, 16, 3))\n"),
    ("PTT037", "from torch import nn\nb = nn.Sequential(nn.Conv2d(3, 16, 3, **kw), nn.BatchNorm2d(16))\n"),
    ("PTT038", "import torch\ndef step(model, x):\n    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
               "        loss = model(x).sum()\n    loss.backward()\n"),
    ("PTT038", "import torch\ndef step(model, x):\n    with torch.autocast('cpu'):\n        loss = model(x).sum()\n"
               "    loss.backward()\n"),
    ("PTT038", "import torch\ndef step(model, x, scaler):\n    with torch.autocast('cuda', dtype=torch.float16):\n"
               "        loss = model(x).sum()\n    scaler.scale(loss).backward()\n"),
    ("PTT038", "import torch\ndef predict(model, x):\n    with torch.autocast('cuda', dtype=torch.float16):\n"
               "        return model(x)\n"),
    ("PTT038", "import torch\ndef step(model, x):\n    with torch.autocast('cuda', dtype=torch.float16, enabled=False):\n"
               "        loss = model(x).sum()\n    loss.backward()\n"),
    ("PTT038", "import torch\ndef step(model, x):\n    with torch.autocast('cuda', dtype=ptdtype):\n"
               "        loss = model(x).sum()\n    loss.backward()\n"),
    ("PTT038", "import torch\ndef step(model, x, loss_scaler):\n    with torch.cuda.amp.autocast():\n"
               "        loss = model(x).sum()\n    loss_scaler(loss, optimizer)\n"),
]


@pytest.mark.parametrize("code, source", NEW_RULES_FLAGGED)
def test_new_rules_flag_their_pattern_once(code, source):
    assert codes(source, (2, 13), "cuda").count(code) == 1, source


@pytest.mark.parametrize("code, source", NEW_RULES_NEAR_MISSES)
def test_new_rules_leave_near_misses_alone(code, source):
    assert code not in codes(source, (2, 13), "cuda"), source


def test_new_rules_obey_noqa_and_select(tmp_path, capsys, monkeypatch):
    src = ("import torch\nfrom torch import nn\nmodel = nn.DataParallel(model)  # noqa: PTT035\n"
           "other = nn.DataParallel(other)\nb = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))  # noqa\n"
           "c = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))\n")
    assert [(f.line, f.code) for f in engine.Checker((2, 13), "cuda").check_source(src)] == [
        (4, "PTT035"), (6, "PTT037")]
    path = tmp_path / "train.py"
    path.write_text(src)
    monkeypatch.chdir(tmp_path)
    cli.main([str(path), *ARGS, "--select", "PTT037"])
    out = capsys.readouterr()[0]
    assert f"{path}:6:" in out and "PTT037" in out and "PTT035" not in out, out


def test_noqa_anywhere_in_a_statement(checker):
    src = textwrap.dedent("""\
        import torch
        from torch.utils.data import DataLoader
        device = "cuda"
        loader = DataLoader(
            dataset,
            batch_size=8,  # noqa: PTT021
        )
        other = DataLoader(
            dataset,
        )  # noqa: PTT020
        for x, y in DataLoader(ds, batch_size=4):  # noqa
            pass
        x = torch.load(p, weights_only=False)  # noqa: PTT002, PTT001
        """)
    found = [(f.line, f.code) for f in checker.check_source(src)]
    assert (8, "PTT021") in found  # the noqa named another rule
    assert not [line for line, _ in found if line in (4, 11, 13)], found
    assert engine.statement_lines(__import__("ast").parse(src), 5) == (4, 7)


def test_positions_from_ast_equal_libcst_positions(checker, monkeypatch):
    """The engine reads positions from the ast; libcst's PositionProvider must agree."""
    sources = {p: p.read_text(encoding="utf-8") for p in tipmeta.tip_files()}
    fast = {p: [(f.line, f.col, f.code) for f in checker.check_source(s, str(p))] for p, s in sources.items()}
    monkeypatch.setattr(engine.Checker, "_from_ast", lambda *args: None)
    slow = {p: [(f.line, f.col, f.code) for f in checker.check_source(s, str(p))] for p, s in sources.items()}
    assert sum(map(len, fast.values())) > 20
    assert fast == slow


def test_blanking_unmarked_functions_changes_no_finding(checker, monkeypatch):
    """A file with top-level findings is parsed whole, with the bodies of the top-level
    functions and classes that hold no piece blanked: the findings, and their positions, must be
    those of the file parsed as it is (the tips and the tuning excerpts, real code)."""
    sources = {p.name: p.read_text(encoding="utf-8") for p in tipmeta.tip_files()}
    for txt in sorted(labels.EXCERPTS.rglob("*.py.txt")):
        repo, _, path = txt.relative_to(labels.EXCERPTS).as_posix()[:-4].partition("/")
        sources[path] = labels.read_excerpt(repo.replace("+", "/", 1), path)
    blanked: dict[str, list] = {}
    real = engine._blank_unmarked
    current = ""

    def counting(tree, pieces, lines):
        kept, spans = real(tree, pieces, lines)
        if spans:
            blanked[current] = spans
        return kept, spans

    monkeypatch.setattr(engine, "_blank_unmarked", counting)
    fast = {}
    for current, text in sources.items():
        fast[current] = [(f.line, f.col, f.code, f.message) for f in checker.check_source(text, current)]
    fast = {p: fast[p] for p in blanked}
    monkeypatch.setattr(engine, "_blank_unmarked", lambda tree, pieces, lines: (lines, []))
    slow = {p: [(f.line, f.col, f.code, f.message) for f in checker.check_source(sources[p], p)]
            for p in blanked}
    assert len(blanked) > 10 and sum(map(len, fast.values())) > 10, (len(blanked), fast)
    assert fast == slow


def test_blanking_keeps_a_decorated_first_method_valid(checker, monkeypatch):
    """A class's first method under a decorator: blanking the class body starts at the
    decorator, or the file left for libcst is not Python (round 7 crashed on such a file)."""
    src = textwrap.dedent("""\
        import torch
        from torch.utils.cpp_extension import load as build

        kernels = build("ops", sources=["ops.cpp"])
        weights = torch.load("w.pt")


        class Op(torch.autograd.Function):

            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2
        """)
    lines = src.splitlines(keepends=True)
    tree = __import__("ast").parse(src)
    kept, blanked = engine._blank_unmarked(tree, [], lines)
    assert blanked == [(10, 16)]
    compile("".join(kept), "<blanked>", "exec")
    found = [(f.line, f.code) for f in engine.Checker(torch_release=(2, 5)).check_source(src, "ops.py")]
    assert (5, "PTT001") in found
    monkeypatch.setattr(engine, "_blank_unmarked", lambda t, p, lines: (["class (:\n"] * len(lines), [(1, len(lines))]))
    assert [(f.line, f.code) for f in engine.Checker(torch_release=(2, 5)).check_source(src, "ops.py")] == found


def test_indented_pieces_keep_their_positions(checker):
    src = "import torch\n\nclass A:\n    def f(self):\n        if x:\n            y = torch.load(p, weights_only=False)\n"
    assert (6, 17, "PTT001") in codes_at(checker, src)


def test_a_file_without_torch_is_skipped_and_bad_syntax_raises(checker):
    assert checker.check_source("x = load(p)\n") == []
    with pytest.raises(SyntaxError):
        checker.check_source("import torch\ndef (:\n")


# --- rules and tips, both ways ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def gallery() -> dict[str, tipmeta.Tip]:
    return {t.name: t for t in tipmeta.read_all()}


@pytest.mark.parametrize("code", sorted(RULES))
def test_every_rule_links_to_a_tip_that_names_it(gallery, code):
    rule = RULES[code]
    assert rule.tip in gallery, f"{code} quotes {rule.tip}, which is not in the gallery"
    assert code in gallery[rule.tip].rules, (
        f"{rule.tip} does not name {code} in sphinx_gallery_tips_rules")


def test_every_tip_naming_a_rule_has_it(gallery):
    for tip in gallery.values():
        for code in tip.rules:
            assert code in RULES and RULES[code].tip == tip.name, (tip.name, code)


def tips_with_rules() -> list[str]:
    try:
        return sorted(t.name for t in tipmeta.read_all() if t.rules)
    except ValueError:
        return []


@pytest.mark.parametrize("tip_name", tips_with_rules())
def test_a_tips_rules_flag_its_anti_pattern_not_its_fix(checker, gallery, tip_name):
    """Each rule flags its tip's anti-pattern, unless the rule says why it is narrower than the
    tip's demonstration (``unlike_tip``); no rule flags the tip's recommended pattern."""
    tip = gallery[tip_name]
    source = tip.path.read_text(encoding="utf-8")
    spans = tipcells.patterns(source)
    assert spans.anti, (f"{tip_name}: no anti-pattern found (cell headings 'The anti-pattern ...' or "
                        "\"The article's ...\", marker comments: see tipsite/checker/tipcells.py)")
    findings = checker.check_source(source, str(tip.path))
    for code in tip.rules:
        hits = [f.line for f in findings if f.code == code]
        if not RULES[code].unlike_tip:
            assert any(spans.in_anti(line) for line in hits), (
                f"{tip_name}: {code} does not flag its anti-pattern (lines {spans.anti}); found at {hits}")
        wrong = [line for line in hits if spans.in_fix(line)]
        assert not wrong, f"{tip_name}: {code} flags its recommended pattern at lines {wrong}"


def test_tip_cells_roles():
    src = textwrap.dedent('''\
        """T
        =
        """
        # %%
        # The anti-pattern and the recommended pattern
        # --------------------------------------------
        # Recommended: prose above a statement
        # is not a marker unless it is the line right above it.
        setup = 1


        def slow():
            pass


        def fast():
            pass


        # %%
        # The article's code
        # ------------------
        a = 1
        # Don't
        b = 2
        c = 3
        # Do
        d = 4
        e = 5  # anti-pattern: one line
        ''')
    spans = tipcells.patterns(src)
    assert spans.anti == [(12, 13), (23, 23), (25, 25), (26, 26), (29, 29)]
    assert spans.fix == [(16, 17), (28, 28)]


def test_tipmeta_checks_the_rules_field(tmp_path, good_tip):
    path = tmp_path / "speed" / "tip_tiny.py"
    path.parent.mkdir()
    line = '# sphinx_gallery_tips_kind = "behaviour"\n'
    assert line in good_tip
    path.write_text(good_tip.replace(line, line + '# sphinx_gallery_tips_rules = ["PTT999", "PTT019"]\n'))
    with pytest.raises(tipmeta.TipError) as err:
        tipmeta.read_tip(path)
    assert "unknown rule 'PTT999'" in str(err.value)
    assert "PTT019 quotes tip_inference_mode's verdict" in str(err.value)


# --- labelled findings on real code -------------------------------------------------------------------

@pytest.fixture(scope="module")
def label_data() -> labels.Labels:
    return labels.load()


def test_labelled_excerpts_give_exactly_the_labelled_findings(label_data):
    """Every excerpt of the pinned codebases gives, in each labelled configuration, exactly the
    findings labelled for it: a rule change that adds or loses one fails here (relabel it)."""
    problems = labels.check_excerpts(label_data)
    assert not problems, "\n".join(problems)


def test_excerpts_are_checked_amid_the_project_files_a_real_run_reads(tmp_path, monkeypatch):
    """What the rules read from a project (its torch requirements) travels with the excerpts,
    reduced to the torch lines, at the same relative paths: an excerpt is then checked as the
    file is on its checkout (a pinned torch without fused= silences PTT031 on both)."""
    checkout = tmp_path / "o+r"
    (checkout / "exp" / "a").mkdir(parents=True)
    (checkout / "setup.cfg").write_text("[metadata]\nname = r\n")
    (checkout / "README.md").write_text("# r\nA model.\n")
    (checkout / "exp" / "requirements.txt").write_text("numpy==1.20\ntorch==1.9.1\ntqdm\n")
    source = "import torch\nopt = torch.optim.AdamW(net.parameters())\nnet.cuda()\n"
    (checkout / "exp" / "a" / "fit.py").write_text(source)
    files = labels.project_of(checkout, ["exp/a/fit.py"])
    assert files == {"exp/requirements.txt": "torch==1.9.1\n", "setup.cfg": ""}
    assert labels.torch_lines("x\n  - pytorch=1.10.0=py3.8\ny\n") == "  - pytorch=1.10.0=py3.8\n"
    monkeypatch.setattr(labels, "EXCERPTS", tmp_path / "excerpts")
    monkeypatch.setattr(labels, "_PLACED", {})
    config = {"torch": "2.13", "device": "cuda"}
    real = engine.Checker((2, 13), "cuda").check_source(source, str(checkout / "exp" / "a" / "fit.py"))
    assert not real  # the checkout: the pin holds
    assert labels.findings_of(source, config, "exp/a/fit.py", repo="o/r") == {(2, "PTT031")}  # none carried
    labels.write_project("o/r", files)
    assert labels.findings_of(source, config, "exp/a/fit.py", repo="o/r") == set()
    assert labels.findings_of(source, config, "lib/fit.py", repo="o/r") == {(2, "PTT031")}  # not under it
    assert labels.findings_of(source, config, "tests/test_fit.py", repo="o/r") == set()  # a test module



def test_an_excerpt_is_placed_with_the_root_markers_its_checkout_has(tmp_path, monkeypatch):
    """The placed copy of a checkout keeps its root as the checkout has it: an unmarked checkout
    (a ``git archive`` extract) gets no .git, so the engine roots a file at its own folder as it
    does on the checkout (carried lines elsewhere do not count), and its licence files travel
    (PTT037's fallback root); a checkout with .git gets one (its root: no licence needed)."""
    monkeypatch.setattr(labels, "EXCERPTS", tmp_path / "excerpts")
    monkeypatch.setattr(labels, "_PLACED", {})
    for repo, git in (("o/bare", False), ("o/git", True)):
        checkout = tmp_path / repo.replace("/", "+")
        (checkout / "src" / "models").mkdir(parents=True)
        (checkout / "LICENSE").write_text("MIT\n")
        (checkout / "requirements.txt").write_text("torch==1.9.1\n")
        (checkout / "src" / "models" / "net.py").write_text("import torch\n")
        if git:
            (checkout / ".git").mkdir()
        files = labels.project_of(checkout, ["src/models/net.py"])
        assert files == {"requirements.txt": "torch==1.9.1\n", **({labels.GIT: ""} if git else {"LICENSE": ""})}
        labels.write_project(repo, files)
        where = labels.placed(repo, "src/models/net.py")
        real = str(checkout / "src" / "models" / "net.py")
        assert os.path.isdir(Path(where).parents[2] / ".git") is git
        for path in (real, where):  # the same root on the checkout and on its placed copy
            folder = engine._file_folder(path)
            got = os.path.relpath(engine._project_root(folder), folder)
            assert got == ("../.." if git else "."), (path, got)

_FLOW_PROJECT = {
    "setup.py": "",
    "lib/grads.py": '''\
import torch
import torch.nn as nn


class Backbone(nn.Module):
    def get_grads(self):
        """All the gradients in one tensor."""
        grads = []
        for p in self.parameters():
            grads.append(p.grad.view(-1))
        return torch.cat(grads)
''',
    "train/ewc.py": '''\
import torch


def fisher(net, loader, opt):
    fish = torch.zeros(10).cuda()
    for x, y in loader:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x.cuda()), y.cuda())
        loss.backward()
        weight = loss.detach().clone()
        fish += weight * net.get_grads() ** 2
    return fish
''',
    "serve/infer.py": '''\
def run(model, x):
    model.eval()
    return model(x)
''',
    "serve/wrap.py": '''\
import torch


def parallel(model):
    return torch.nn.DataParallel(model.cuda())
''',
    "lib/maml.py": '''\
import torch
from torch.autograd import grad


class MAML(torch.nn.Module):
    def adapt(self, loss, first_order=False):
        """One step of adaptation."""
        params = list(self.parameters())
        if not first_order:
            grads = grad(loss, params, retain_graph=True, create_graph=True)
        else:
            grads = grad(loss, params)
        for p, g in zip(params, grads):
            p.data -= 0.1 * g
''',
    "meta/loop.py": '''\
import torch


def step(learner, batch, opt):
    learner.module = torch.nn.DataParallel(learner.module.cuda())
    loss = learner(batch).sum()
    learner.adapt(loss)
    learner(batch).sum().backward()
    opt.step()
''',
    "data/pad.py": '''\
import numpy as np
import torch


def pad(batch):
    width = max(len(x) for x in batch)
    return np.stack([np.pad(x, (0, width - len(x))) for x in batch])
''',
    "data/loaders.py": '''\
import torch
from torch.utils.data import DataLoader
from data.pad import pad


def loader(ds):
    return DataLoader(ds, batch_size=8, num_workers=4, collate_fn=pad)


def fit(model, ds):
    for x in loader(ds):
        model(torch.as_tensor(x).cuda())
''',
}


def test_the_excerpt_tool_carries_the_project_facts_of_the_flow_and_loader_rules(tmp_path, monkeypatch):
    """The facts that PTT012, PTT035 and PTT021 read from a project's other files travel with
    the excerpts: a gradient getter of another file (its def in its class, no docstring), a
    line of the part that evaluates a model, MAML's second-order adapt (its header and the
    grad(create_graph=) statement), a collate_fn of another module shown to return NumPy (with
    its numpy import, not torch's); checked amid them, each file gives what the checkout gives,
    and without them it does not."""
    checkout = tmp_path / "o+flow"
    for rel, text in _FLOW_PROJECT.items():
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text(text)
    paths = ["train/ewc.py", "serve/wrap.py", "meta/loop.py", "data/loaders.py"]
    files = labels.project_of(checkout, paths)
    assert sorted(files) == ["data/pad.py", "lib/grads.py", "lib/maml.py", "serve/infer.py", "setup.py"]
    assert files["serve/infer.py"] == "    model.eval()\n"
    assert files["lib/grads.py"].startswith("class Backbone(nn.Module):\n    def get_grads(self):\n        grads = []\n")
    assert files["lib/maml.py"] == ("class MAML(torch.nn.Module):\n    def adapt(self, loss, first_order=False):\n"
                                    "        if not first_order:\n"
                                    "            grads = grad(loss, params, retain_graph=True, create_graph=True)\n")
    assert files["data/pad.py"].startswith("import numpy as np\ndef pad(batch):\n") and "torch" not in files["data/pad.py"]
    monkeypatch.setattr(labels, "EXCERPTS", tmp_path / "excerpts")
    monkeypatch.setattr(labels, "_PLACED", {})
    config = {"torch": "2.13", "device": "cuda"}
    checker = engine.Checker((2, 13), "cuda")
    bare = {}
    for path in paths:
        real = {(f.line, f.code) for f in checker.check_source(_FLOW_PROJECT[path], str(checkout / path))}
        bare[path] = labels.findings_of(_FLOW_PROJECT[path], config, path, repo="o/flow")
        assert real == set() and bare[path], path  # silent on the checkout, flagged alone
    labels.write_project("o/flow", files)
    for path in paths:
        assert labels.findings_of(_FLOW_PROJECT[path], config, path, repo="o/flow") == set(), path


def _line_fact(line: str, text: str) -> bool:
    """A line carried alone: one that sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD (PTT001), loads a
    state dict (PTT037) or computes in reduced precision (PTT032), or, for PTT035, one that
    evaluates a model or runs a training step (and a trainer's import line, beside its training
    line); for PTT037, an import line beside a ``load_state_dict(`` line (the import of the
    class of a network the file loads weights into), and a file's download call and checkpoint
    URL (released weights); for PTT019, a file's line turning gradients back on and its line
    that differentiates."""
    imports = line.lstrip().startswith(("import ", "from "))
    loads = engine._in_code(engine._LOADS_STATE, text)
    return (engine._FORCE_UNSAFE in line or "load_state_dict(" in line or engine._in_code(engine._INFERS, line)
            or engine._in_code(engine._REDUCED, line)
            or engine._trains_in(line) or (imports and engine._trains_in(text))
            or (imports and loads)
            or (engine._downloads_weights(text) and (engine._in_code(engine._LOAD_URL, line)
                                                     or engine._WEIGHT_URL.search(line) is not None))
            or (engine._reenables_grad(text) and (engine._in_code(engine._REENABLES, line)
                                                  or engine._in_code(engine._DIFFERENTIATES, line))))


def _number_defs(body: list[ast.stmt]) -> set[str]:
    """PTT012/PTT013: the names of the carried defs (at the top or in a class) whose returns
    the engine reads (_returned_items: the items that hold no graph, some or none; where one
    definition of a method returns a graph, the others' numbers do not decide)."""
    defs = (ast.FunctionDef, ast.AsyncFunctionDef)
    found = [d for n in body for d in (n.body if isinstance(n, ast.ClassDef) else [n]) if isinstance(d, defs)]
    return {d.name for d in found if engine._returned_items(d, d.name) is not None}


def _python_fact(rel: str, text: str, tmp_path) -> str | None:
    """The kind of a carried Python text (None: a kind no rule reads)."""
    try:
        body = ast.parse(text).body
    except SyntaxError:
        return None
    imports = (ast.Import, ast.ImportFrom)
    defs = (ast.FunctionDef, ast.AsyncFunctionDef)
    if text.startswith("import torch\n") and engine._loads_whole_module(text):
        assert len(body) == 2 and isinstance(body[1], defs), rel
        return "PTT004: the project's own loader of whole modules"
    carried = engine._graph_free_defs(text) | engine._second_order_defs(text) | _number_defs(body)
    if carried and all(isinstance(n, imports) or (isinstance(n, defs) and n.name in carried) or (
            isinstance(n, ast.ClassDef) and all(isinstance(m, ast.Pass) or (isinstance(m, defs) and m.name in carried)
                                                for m in n.body)) for n in body):
        return ("PTT012's gradient getter, PTT035's second-order adaptation (MAML's adapt), "
                "PTT012/PTT013's method returning numbers")
    if body and any(isinstance(n, ast.ClassDef) for n in body) and all(
            isinstance(n, imports) or (isinstance(n, ast.ClassDef) and len(n.body) == 1 and isinstance(n.body[0], ast.Pass))
            for n in body):
        return "PTT030: a base-class chain, headers and the imports of their bases only"
    if rel.endswith("__init__.py") and body and all(isinstance(n, ast.ImportFrom) for n in body):
        return "PTT030: a package's re-export of a class on the chain"
    if body and all(isinstance(n, ast.ClassDef) and len(n.body) == 1 and "BatchNorm" in ast.unparse(n.body[0])
                    for n in body):
        return "PTT037: a twin model's classes, each with one line naming its BatchNorm"
    if engine._makes_complex_params(text):
        return "PTT031: the statement making a complex parameter, in its class"
    if text.startswith("import torch") and engine.proves_torch(text) is not None:
        # the file's imports of torch (import torch as pt), then the one statement using an advised API
        rest = [n for n in body if not (isinstance(n, ast.Import)
                                        and all(a.name.partition(".")[0] == "torch" for a in n.names))]
        assert len(rest) == 1, rel
        return "the project's own code needs a newer torch than its stale floor"
    bound = {(a.asname or a.name).partition(".")[0]: (getattr(n, "module", None) or a.name).partition(".")[0]
             for n in body if isinstance(n, imports) for a in n.names}
    if ("numpy" in bound.values() and "torch" not in text and any(isinstance(n, (*defs, ast.ClassDef)) for n in body)
            and all(isinstance(n, (*imports, *defs)) or (isinstance(n, ast.ClassDef) and all(isinstance(m, defs) for m in n.body))
                    for n in body)):
        return "PTT020/PTT021: a collate_fn of NumPy (its functions, methods and their imports; no torch)"
    if body and all(isinstance(n, imports) or (isinstance(n, defs) and engine._returns_dicts(n)) for n in body):
        return "PTT004: a project function returning dict literals (a saved package, no module)"
    reducing = engine.collective_defs(ast.parse(text))
    if reducing and all(isinstance(n, imports) or (isinstance(n, defs) and n.name in reducing) or (
            isinstance(n, ast.ClassDef) and all(isinstance(m, defs) and m.name in reducing for m in n.body))
            for n in body):
        return "PTT019: a helper handing its parameter to an in-place collective (all_reduce)"
    helper = tmp_path / rel.replace("/", "_")
    helper.write_text(text, encoding="utf-8")
    names = [n.name for n in body if isinstance(n, ast.FunctionDef)]
    if len(body) == 1 and len(names) == 1 and engine._defines_grad_free(str(helper), names[0]):
        return "PTT023: a helper returning no_grad/inference_mode"
    return None


def test_the_carried_project_files_hold_torch_lines_only(tmp_path):
    """project.json holds nothing but what the rules read from a project: the lines that name
    torch, and of its Python files only: lines that set TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD or load
    a state dict (an ``__init__.py`` may be empty), the statement that makes a complex parameter
    (with its class and def headers), one helper that returns no_grad/inference_mode, the one
    statement that uses an advised API unguarded (a stale floor), the one function that reads a
    whole pickled module back (PTT004), the one line that computes in reduced precision (PTT032),
    the class headers (``class B(A): pass``) and the imports that bind their bases on the way
    from a class to the nn.Module it derives from in other files, a package's re-export of one
    (PTT030), a function or method that returns only values holding no graph (PTT012: a gradient
    getter; PTT012/PTT013: a method's def, cut to its return, that returns numbers), the import
    of a network's class beside the line loading weights into it (PTT037), or one that differentiates with create_graph (PTT035: MAML's adapt), a line that
    evaluates a model or one that trains (with the trainer's import of the part: PTT035's
    evidence), a collate_fn's NumPy functions and methods with their imports, naming no torch
    (PTT020/PTT021), the statement that keeps BatchNorm frozen (PTT037); a file may hold a Python fact and lines of the line kinds: no other code,
    no prose."""
    found = sorted(labels.EXCERPTS.glob("*/project*.json"))
    assert found
    package = 0
    kinds = set()
    for path in found:
        for rel, text in json.loads(path.read_text(encoding="utf-8")).items():
            if rel == labels.GIT:
                continue  # the checkout's .git folder (a marker)
            if labels.torch_lines(text) == text and (text or not rel.endswith("__init__.py")):
                continue  # a requirement file, setup.py, a README...: its torch lines
            package += 1
            if engine._freezes_batchnorm(text):  # PTT037: the statement keeping BatchNorm frozen
                m = engine._BN_SET_EVAL.search(text) or engine._BN_FREEZER.search(text)
                first = text.count("\n", 0, m.start())
                lines = text.splitlines(keepends=True)
                text = "".join(lines[:first] + lines[first + m.group(0).count("\n") + 1:])
                kinds.add("PTT037: the project's statement keeping BatchNorm frozen")
                if not text:
                    continue
            if len(text.splitlines()) == 1 and engine._in_code(engine._REDUCED, text):
                continue  # PTT032: the project computes in reduced precision (a line of code or config)
            if rel.rsplit("/", 1)[-1].upper() in engine._README_NAMES and all(
                    labels.torch_lines(line) or engine._RELEASE_DOC.search(line) or "http" in line
                    or re.search(r"\b[A-Z]\w*[A-Z0-9]\w*\b", line) for line in text.splitlines()):
                kinds.add("PTT037: a README's release and link lines, a line naming a model class")
                continue
            assert rel.endswith(".py"), (path, rel)
            kind = _python_fact(rel, text, tmp_path)
            if kind is None:  # lines of the line kinds, and what is left a Python fact (or nothing)
                rest = "".join(line + "\n" for line in text.splitlines() if not _line_fact(line, text))
                kind = "lines" if not rest else _python_fact(rel, rest, tmp_path)
                if kind is None and len([line for line in rest.splitlines() if not re.match(
                        r"\s*class \w+\b[^:]*:\s*$", line)]) <= text.count("load_state_dict("):
                    kind = "PTT037: beside each load, the loading file's line naming a network's class, or its header"
            assert kind is not None, (path, rel)
            kinds.add(kind)
    assert package, "the package facts (PTT001's, PTT037's) are carried for some codebase"
    assert len(kinds) >= 8, kinds  # the new facts among them: the getter, the collate, the lines


def test_findings_labelled_wrong_stay_gone(label_data):
    """What an earlier checker reported wrongly on the same code (issue 26) is not reported."""
    assert label_data.regressions, "the regression cases are part of the label data"
    problems = labels.check_regressions(label_data)
    assert not problems, "\n".join(problems)


def test_precision_targets(label_data):
    """No stable rule (on by default) is wrong on the tuning set, and each is at least 90% useful
    there. A preview rule may still be wrong on a spent held-out round's code (a misread
    not yet fixed, PTT001 on round 3): that is what keeps it in preview, and the table shows it."""
    from tipsite.checker.registry import is_stable

    table = labels.table(label_data)
    total = table["total"]
    assert total["files"] >= 150 and len(label_data.corpora) >= 3
    wrong_stable = [code for code, row in table.items()
                    if code != "total" and is_stable(code) and row["wrong"]]
    assert not wrong_stable, wrong_stable
    # each stable rule, not only all of them together (none may be stable: a plain run then
    # says that no rule ran, tests/test_checker_kinds.py)
    low = {code: (row["useful"], row["findings"]) for code, row in table.items()
           if code != "total" and is_stable(code) and row["useful"] < 0.9 * row["findings"]}
    assert not low, low


def test_the_docs_publish_the_current_table(label_data):
    page = (ROOT / "docs" / "reference" / "checker.rst").read_text(encoding="utf-8")
    assert labels.render_rst(label_data) in page, "run python -m tipsite.checker.labels table --write"
    assert labels.render_rules_rst() in page, "run python -m tipsite.checker.labels table --write"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert labels.render_markdown(label_data) in readme, "run python -m tipsite.checker.labels table --write"


# --- verdicts, honestly -----------------------------------------------------------------------------

def test_shipped_evidence_is_what_the_records_give():
    """``evidence.json`` equals what the committed result sets and the tips' sources give now."""
    assert shipdata.dumps(shipdata.build()) == shipdata.DATA_PATH.read_text(encoding="utf-8"), (
        "run python -m tipsite.checker.shipdata")


def fake_record(tip: tipmeta.Tip, verdict: str, device: str = "cpu", torch: str = "2.13.0+cpu",
                sha: str | None = None, date: str = "2026-11-22 06:00 UTC") -> dict:
    version = {k: sha for k in records.VERSION_KEYS} if sha else records.tip_version(tip.path)
    return {"tip": tip.name, "topic": tip.topic, "source_sha256": sha or records.source_sha256(tip.path), **version,
            "torch": torch, "date": date, "hosts": {device: {"name": "test machine"}},
            "verdicts": {device: {"device": device, "verdict": verdict,
                                  "key": {"name": "speed-up at width 4", "value": 1.8, "low": 1.6,
                                          "high": 2.0, "unit": "x"}}}}


def evidence_with(recs: list[dict], gallery: dict, torch: str | None = "2.13", device: str = "cpu") -> evidence.Evidence:
    target = evidence.Target(torch=torch, device=device, torch_from="test", device_from="test")
    sets = [{"path": "fake.json", "records": recs}]
    tips = {}
    for name in {r.tip for r in RULES.values()} & set(gallery):
        tips[name] = shipdata.tip_entry(gallery[name], None, sets, ["cpu", "cuda"])
    data = {"schema": evidence.SCHEMA, "devices": {"cpu": "CPU", "cuda": "CUDA"}, "tips": tips}
    return evidence.Evidence(target, data, site_url="https://x.test")


@pytest.mark.parametrize("verdict, says, fails", [
    ("holds", "use torch.inference_mode()", True),
    ("depends", "depends on CPU", False),
    ("wrong", "wrong on CPU", False),
    ("outdated", "outdated on CPU", False),
    ("inconclusive", "inconclusive on CPU: no advice", False),  # a verdict word this checker does not know
])
def test_message_and_severity_follow_the_verdict(gallery, verdict, says, fails):
    tip = gallery["tip_inference_mode"]
    ev = evidence_with([fake_record(tip, verdict)], gallery)
    rule = RULES["PTT019"]
    v = ev.verdict(tip.name)
    text = evidence.short(rule, v, ev.word)
    assert text.startswith(rule.short) and evidence.fails(v, "holds") is fails
    assert (says in text) or (says in evidence.message(rule, v, ev.word))
    if verdict != "holds":  # the line names the fix, as the tip's, not as advice
        assert text.endswith(f"{evidence.NOT_ADVISED} {rule.fix})"), text
        assert rule.advice not in evidence.message(rule, v, ev.word)
    else:
        assert text == f"{rule.short}; {rule.fix}"
    assert evidence.tail(v, ev.word).startswith(f"{verdict} on CPU (torch 2.13.0+cpu, test machine, 2026-11-22)")
    assert ev.link(tip.name) == "https://x.test/tips/speed/tip_inference_mode.html"
    assert evidence.fails(v, "any") and not evidence.fails(v, "never")


def test_not_measured_stale_and_other_release(gallery):
    tip = gallery["tip_inference_mode"]
    rule = RULES["PTT019"]
    ev = evidence_with([fake_record(tip, "holds", device="cuda", torch="2.11.0+cu130")], gallery)
    v = ev.verdict(tip.name)
    assert v.state == "not measured" and not evidence.fails(v, "holds")
    assert "not measured on CPU with this torch" in evidence.short(rule, v, ev.word)
    ev = evidence_with([fake_record(tip, "depends", torch="2.11.0+cpu")], gallery)
    v = ev.verdict(tip.name)
    assert v.state == "not measured" and v.elsewhere == "depends with torch 2.11.0+cpu"
    ev = evidence_with([fake_record(tip, "holds", sha="0" * 64)], gallery)
    v = ev.verdict(tip.name)
    assert v.state == "stale" and "older version" in evidence.short(rule, v, ev.word)
    assert not evidence.fails(v, "holds")
    ev = evidence_with([fake_record(tip, "holds", torch="2.11.0+cpu")], gallery, torch=None)
    assert ev.verdict(tip.name).holds  # --torch any


def test_newest_current_record_wins(gallery):
    tip = gallery["tip_inference_mode"]
    ev = evidence_with([fake_record(tip, "holds", date="2026-11-01 00:00 UTC"),
                        fake_record(tip, "wrong", date="2026-11-20 00:00 UTC")], gallery, torch=None)
    assert ev.verdict(tip.name).verdict == "wrong"


def test_a_tip_about_the_cpu_alone_judges_a_gpu_users_host_code(gallery):
    tip = gallery["tip_from_numpy"]
    assert tip.devices == ("cpu",)
    ev = evidence_with([fake_record(tip, "holds")], gallery, device="cuda")
    v = ev.verdict(tip.name)
    assert v.device == "cpu" and v.holds
    cuda_only = gallery["tip_pin_memory"]
    ev = evidence_with([fake_record(cuda_only, "holds", device="cuda")], gallery, device="cpu")
    assert ev.verdict(cuda_only.name).state == "not about this device"


def test_target_detection():
    t = evidence.detect_target("2.13.0+cpu", "cuda")
    assert (t.torch, t.device, t.release) == ("2.13", "cuda", (2, 13))
    assert evidence.detect_target("any", "cpu").torch is None


# --- the command line ------------------------------------------------------------------------------

ARGS = ["--torch", "2.13", "--device", "cuda", "--jobs", "1", "--site-url", "https://x.test"]


@pytest.fixture
def tuning_status(monkeypatch):
    """The command line's mechanics (lines, severities, exit codes, configuration) tested on the
    rules the first five tuning codebases make stable (PTT001 and PTT031 among them), whichever
    rules the held-out labels leave stable (tests/test_checker_kinds.py checks status.json itself)."""
    from tipsite.checker import registry

    tuning = labels.load()
    first = {c["repo"] for c in tuning.corpora[:5]}  # held-out round 1's seven came after them
    assert first == {"pytorch/examples", "karpathy/nanoGPT", "facebookresearch/detr", "facebookresearch/dino",
                     "facebookresearch/deit"}
    five = labels.Labels(corpora=tuning.corpora[:5], configurations=tuning.configurations,
                         findings=[f for f in tuning.findings if f["repo"] in first])
    monkeypatch.setattr(registry, "STATUS", labels.status(five, None))


def holding_evidence(monkeypatch, tips: set[str]) -> None:
    """The shipped evidence with the given tips holding on CUDA for torch 2.13."""
    data = evidence.load_data()
    for name in tips:
        state = {"state": "measured", "verdict": "holds", "key": None, "torch": "2.13.0+cu130",
                 "host": "test GPU", "date": "2026-11-26 00:00 UTC", "legacy": False, "set": "test"}
        for device in data["tips"][name]["devices"]:
            data["tips"][name]["states"][device] = {"2.13": state, "any": state}
    monkeypatch.setattr(evidence, "load_data", lambda: data)


def test_cli_lines_severity_and_exit_codes(tmp_path, capsys, monkeypatch, tuning_status):
    holding_evidence(monkeypatch, {"tip_weights_only_load"})
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    bad = pkg / "train.py"
    bad.write_text("import torch\nstate = torch.load('x.pt', weights_only=False)\n"
                   "opt = torch.optim.Adam(model.parameters())\nmodel.cuda()\n")
    (pkg / "clean.py").write_text("import torch\nx = torch.ones(3)\n")
    (pkg / ".hidden").mkdir()
    (pkg / ".hidden" / "skip.py").write_text("import torch\ntorch.load('x', weights_only=False)\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main([str(pkg), *ARGS]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == (f"{bad}:2:9: PTT001 torch.load may unpickle arbitrary objects: a checkpoint can run "
                        "code; choose weights_only in the call: True for a file of tensors, else allow-list its "
                        "classes, or False with a comment for a trusted file https://x.test/tips/saving_loading/tip_weights_only_load.html")
    assert lines[1].startswith(f"{bad}:3:7: PTT031 note: Adam/AdamW without fused=True")
    # messages: what the code does and its fix in a clause (a note adds what the evidence says)
    assert all(len(line.split(" ", 2)[2].rsplit(" https://", 1)[0]) < 240 for line in lines), lines
    assert "1 failing finding(s) and 1 note(s) in 1 of 2 file(s)" in err
    assert cli.main([str(pkg), *ARGS, "--ignore", "PTT001"]) == 0  # a note alone does not fail
    assert cli.main([str(pkg), *ARGS, "--ignore", "PTT001", "--fail-on", "any"]) == 1
    assert cli.main([str(pkg), *ARGS, "--fail-on", "never"]) == 0
    capsys.readouterr()
    assert cli.main([str(pkg), *ARGS, "--select", "PTT031", "--hide-notes"]) == 0
    assert capsys.readouterr()[0] == ""
    assert cli.main([str(bad), "--format", "json", *ARGS]) == 1
    data = json.loads(capsys.readouterr()[0])
    assert [(r["code"], r["severity"]) for r in data["findings"]] == [("PTT001", "error"), ("PTT031", "note")]
    assert data["target"] == {"torch": "2.13", "device": "cuda", "torch_from": "--torch", "device_from": "--device"}
    assert cli.main([str(bad), "--format", "github", *ARGS]) == 1
    gh = capsys.readouterr()[0].splitlines()
    assert gh[0].startswith(f"::error file={bad},line=2,col=9,title=PTT001 (tip_weights_only_load)::torch.load")
    assert gh[1].startswith("::notice file=")
    (tmp_path / "broken.py").write_text("def (:\n")
    assert cli.main([str(tmp_path / "broken.py"), *ARGS]) == 2
    assert "cannot be parsed" in capsys.readouterr()[1]


def test_cli_verbose_and_explain(tmp_path, capsys, monkeypatch, tuning_status):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("import torch\nopt = torch.optim.Adam(p)\nmodel.cuda()\n")
    cli.main([str(tmp_path / "t.py"), *ARGS, "-v"])
    out = capsys.readouterr()[0].splitlines()
    assert out[1].startswith("    Adam / AdamW built without fused=True") and out[2].startswith("    evidence: ")
    assert cli.main(["--explain", "PTT031", *ARGS]) == 0
    text = capsys.readouterr()[0]
    for part in ("PTT031: Adam/AdamW without fused=True", "Not flagged: Only Adam and AdamW",
                 "Evidence: tip_foreach_fused_optimizers", "Recommended:", "fused=True"):
        assert part in text
    with pytest.raises(SystemExit):
        cli.main(["--explain", "PTT999"])
    assert cli.main(["--list-rules"]) == 0
    listed = capsys.readouterr()[0]
    assert "PTT019 torch.no_grad() for inference [preview]" in listed


def test_explain_quotes_each_measured_state_as_a_finding_does(capsys, monkeypatch):
    """--explain's line for each release reads the state as the finding's verdict does: a legacy
    record says so there too."""
    data = evidence.load_data()
    state = {"state": "measured", "verdict": "holds", "key": None, "torch": "2.13.0+cu130",
             "host": "test GPU", "date": "2026-11-26 00:00 UTC", "legacy": True, "set": "test"}
    data["tips"]["tip_foreach_fused_optimizers"]["states"]["cuda"] = {"2.13": state, "any": state}
    monkeypatch.setattr(evidence, "load_data", lambda: data)
    assert cli.main(["--explain", "PTT031", *ARGS]) == 0
    lines = capsys.readouterr()[0].splitlines()
    quoted = "holds on CUDA (torch 2.13.0+cu130, test GPU, 2026-11-26, legacy record)"
    assert f"  CUDA, torch 2.13: {quoted}" in lines
    assert f"For torch 2.13 (--torch), CUDA (--device): {quoted} -> findings fail the run" in lines


def test_configuration_in_pyproject(tmp_path, capsys, monkeypatch, tuning_status):
    holding_evidence(monkeypatch, {"tip_weights_only_load", "tip_foreach_fused_optimizers"})
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""\
        [project]
        name = "user-project"

        [tool.torch-tips]
        ignore = ["PTT031"]
        extend-select = ["PTT003"]
        exclude = ["legacy"]
        per-file-ignores = {"tools/*" = ["PTT001"]}
        torch = "2.13"
        device = "cuda"
        site-url = "https://tips.example"
        """))
    for rel in ("src/train.py", "tools/io.py", "legacy/old.py", "tests/test_io.py"):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("import torch\nfrom accelerate import init_empty_weights\n"
                        "sd = torch.load('x', weights_only=False)\nmodel.load_state_dict(sd)\n"
                        "opt = torch.optim.Adam(p)\ndevice = 'cuda'\n")
    monkeypatch.chdir(tmp_path / "src")
    assert cli.main([str(tmp_path), "--jobs", "1"]) == 1
    out, err = capsys.readouterr()
    found = [(Path(line.split(":")[0]).relative_to(tmp_path).as_posix(), line.split()[1]) for line in out.splitlines()]
    # tests/test_io.py: a test module, never reported (engine.is_test_path)
    assert found == [("src/train.py", "PTT001"), ("src/train.py", "PTT003"), ("tools/io.py", "PTT003")]
    assert "https://tips.example/tips/" in out and "torch 2.13" in err
    assert cli.main([str(tmp_path), "--jobs", "1", "--select", "PTT031", "--ignore", "PTT034"]) == 1  # it wins
    (tmp_path / "pyproject.toml").write_text("[tool.torch-tips]\nselect = ['PTX']\n")
    with pytest.raises(SystemExit):
        cli.main([str(tmp_path)])
    assert "matches no rule" in capsys.readouterr()[1]
    with pytest.raises(config.ConfigError):
        (tmp_path / "pyproject.toml").write_text("[tool.torch-tips]\nfail_on = 'any'\n")
        config.load()


def test_selection_prefixes(tuning_status):
    cfg = config.Config(select=["PTT0"])
    stable = [c for c in RULES if is_stable(c) and c.startswith("PTT0")]
    assert stable, "no stable rule to select"  # the labels decide which (status.json)
    assert "PTT019" not in cfg.codes() and set(stable) <= cfg.codes()  # a prefix: default rules only
    assert "PTT019" in config.Config(select=["PTT019"]).codes()
    assert config.Config(ignore=["PTT01"]).codes().isdisjoint({"PTT011", "PTT012"})


# --- packaging: the checker on its own -----------------------------------------------------------------

def test_the_checker_runs_installed_without_the_repository(tmp_path):
    """What ``pip install`` ships (tipsite/checker/ with its evidence) runs on its own: no conf/,
    no gallery, no records; the console command is cli.main."""
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'torch-tips = "tipsite.checker.cli:main"' in pyproject
    assert 'only-include = ["tipsite/checker"]' in pyproject  # hatchling ships evidence.json with it
    site = tmp_path / "site-packages"
    shutil.copytree(ROOT / "tipsite" / "checker", site / "tipsite" / "checker",
                    ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("import torch\nsd = torch.load('x.pt', weights_only=False)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIPS_")}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.run([sys.executable, "-c", "import sys\nfrom tipsite.checker.cli import main\n"
                           "sys.exit(main())", "train.py", "--select", "PTT001", "--torch", "2.11", "--device",
                           "cuda", "--jobs", "1",
                           "--site-url", "https://tips.example"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    assert "train.py:2:6: PTT001" in proc.stdout and "https://tips.example/tips/" in proc.stdout
    probe = subprocess.run([sys.executable, "-c", "import sys, tipsite.checker.cli\n"
                            "print(' '.join(m for m in sys.modules if m.split('.')[0] in ('conf', 'tipsite')))"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=120)
    loaded = set(probe.stdout.split())
    assert "tipsite.checker.cli" in loaded and not {m for m in loaded if m.split(".")[0] == "conf"}, loaded
    assert not loaded & {"tipsite.records", "tipsite.tipmeta", "tipsite.checker.shipdata"}, loaded


def test_pre_commit_hook():
    hooks = (ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    assert "id: torch-tips" in hooks and "entry: torch-tips" in hooks and "types: [python]" in hooks


# --- speed ------------------------------------------------------------------------------------------

# Issue 33's target is 50 files of 200 lines a second on the 2-core development machine, 40 ms of
# CPU per file over 2 processes. Measured on the 200-file bench, machine otherwise idle
# (2026-11-28, docs/reference/checker.rst "Speed"): 25 to 38 ms per file, 51.8 to 77.9 files/s,
# in one window; 40.6 to 42.6 ms, 46.3 to 48.5 files/s, in another, on the same code. The bound
# below is what the checker holds with a margin for a loaded CI machine (44.8 ms at load 4.3):
# it catches a regression; it does not claim the target.
MS_CPU_PER_FILE_HELD = 60.0


def test_speed_no_worse_than_60_ms_of_cpu_per_file_of_200_lines():
    """Wall time depends on what else the shared machine runs, so the test bounds the CPU time
    per file (summed over the worker processes). Even CPU time grows when other jobs share the
    cores, so the least disturbed of three runs counts.

    The command runs as a user runs it, in a process of its own: forked from this test process
    (a pytest-xdist worker, with execnet's thread beside the test's) its workers could deadlock.
    """
    runs = [_bench_command(60, jobs=2) for _ in range(3)]
    for r in runs:
        print(bench.describe(r))
    result = min(runs, key=lambda r: r["ms_cpu_per_file"])
    assert result["jobs"] == 2, "the checker did not use its worker processes"
    assert result["files"] == 60 and result["lines_per_file"] >= 200 and result["findings"] > 30
    assert result["ms_cpu_per_file"] <= MS_CPU_PER_FILE_HELD, bench.describe(result)


def _bench_command(n: int, jobs: int) -> dict:
    proc = subprocess.run([sys.executable, "-m", "tipsite.checker", "--bench", str(n), "--jobs", str(jobs),
                           "--format", "json"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=build_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_workers_are_forked_only_from_a_process_with_one_thread(tmp_path):
    """With a second thread running, the checker checks in its own process instead of forking."""
    import threading

    for i in range(8):
        (tmp_path / f"f{i}.py").write_text("import torch\nstate = torch.load('x.pt', weights_only=False)\n")
    files, _ = runner.collect([str(tmp_path)])
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not runner.can_fork() and runner.processes(len(files), 2) == 1
        findings, errors = runner.check_files(files, 2)
    finally:
        stop.set()
        other.join()
    assert len(findings) == 8 and not errors


def test_the_fast_text_facts_answer_as_the_line_regexes_did():
    """The engine searches a fact's pattern and reads only the start of its line for a ``#``
    (engine._in_code), and an alternation of words only where one of its words is in the text:
    the same answers as searching ``^[^#\\n]*(pattern)`` line by line, and the regex alone."""
    import re

    texts = ["x = 'cpu'\n", "# 'cpu'\n", "y = 1  # 'cpu'\n", "a = 1 # x\nb = \"cpu\"\n",
             "a = 'cpu' # 'cpu'\n", "f(accelerator=\n  'cuda')\n", "# accelerator='cuda'\nx.cuda()\n",
             "s = '#'; loss.backward()\n", "model.eval()  # no_grad\n", "\n", "", "x.step(  # cuda\n",
             "y = DDP(m)\n", "y = my_DDP(m)\n", "yDDP = 1\n", "import onnx\n", "torch.jit.scripted\n",
             "torch.load(p, weights_only =  False)\n", "weights_only=True\n", "\r\n'cpu'\r\n"]
    patterns = {engine._CPU_PATH: r"""["']cpu["']""",
                engine._CUDA_ONLY: r"""\baccelerator\s*=\s*["'](cuda|gpu)["']""",
                engine._TRAINS: r"""(\.backward\(|\.step\(|\bbackward\(|manual_backward)""",
                engine._INFERS: r"""(no_grad|inference_mode|\.eval\(\))""",
                engine._ACCELERATOR: r"(cuda|accelerator)"}
    exports = re.compile(r"onnx|torch\.jit\.(trace|script)|torch\.export|coremltools|openvino|tensorrt|tflite")
    seen = set()
    for text in texts + ["".join(texts)]:
        for fast, line_regex in patterns.items():
            want = bool(re.search(r"^[^#\n]*" + line_regex, text, re.MULTILINE))
            assert engine._in_code(fast, text) == want, (line_regex, text)
            seen.add(want)
        assert any(w in text for w in engine._EXPORTS_WORDS) == bool(exports.search(text)), text
        if engine._DDP.search(text):
            assert any(w in text for w in engine._DDP_WORDS), text
    assert seen == {True, False}


def test_names_read_and_names_in_give_what_a_full_walk_gives():
    import ast

    import libcst as cst

    from tipsite.checker import visitors as V

    tree = ast.parse("a = f(b, c=d[e].g, *h, **i) + (lambda j: k)(1) if m else [n for o in p]\n")
    for node in ast.walk(tree):
        assert engine._names_read(node) == {n.id for n in ast.walk(node) if type(n) is ast.Name}
    expr = cst.parse_expression("x.total + f(y, self.z)")
    first = V.names_in(expr)
    # an attribute's own name too (x.shape gives "shape"), as names_in always gave
    assert first == {"x", "x.total", "total", "f", "y", "self", "self.z", "z"} and V.names_in(expr) is first
    other = cst.parse_expression("x.total + f(y, self.z)")  # an equal node is not the same node
    assert V.names_in(other) == first and V.names_in(other) is not first


def test_ptt030_a_tensor_made_a_parameter_below_or_following_its_input_is_left_alone():
    src = textwrap.dedent("""\
        import torch
        from torch import nn
        class Edge(nn.Module):
            def __init__(self, n, kind):
                super().__init__()
                if kind == "a":
                    self.kern = torch.zeros(n, 2)
                    for j in range(n):
                        self.kern[j, 0] = 1.0
                    self.kern = nn.Parameter(data=self.kern, requires_grad=False)
                else:
                    self.kern = torch.ones(n, 2)
                self.shift = torch.zeros(1, n)
                self.table = torch.zeros(n)
                self.half = torch.zeros(n)
            def forward(self, inp):
                self.shift = self.shift.type_as(inp)
                self.half = self.half.to(torch.float16)
                return inp + self.shift + self.table + self.half
        """)
    found = [(line, code) for line, _, code in codes_at(engine.Checker(), src) if code == "PTT030"]
    # the else's plain tensor, the attribute never moved, the one cast to a dtype alone
    assert found == [(12, "PTT030"), (14, "PTT030"), (15, "PTT030")], found


def test_ptt017_a_plain_preprocessing_object_under_no_grad_freezes_nothing():
    """A no_grad block in forward that only calls a plain object of the file (a class with no
    module base: resizing, normalising) holds no parameters to freeze: silent. The same block
    calling a submodule, or an attribute also bound to a module, is still flagged."""
    src = textwrap.dedent("""\
        import torch
        from torch import nn
        class Scale:
            def __call__(self, x):
                return x * 0.5
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = Scale()
                self.shift = Scale()
                self.stem = nn.Linear(4, 4)
                self.head = nn.Linear(4, 2)
            def swap(self):
                self.shift = nn.Linear(4, 4)
            def forward(self, x):
                with torch.no_grad():
                    x = self.scale(x)
                with torch.no_grad():
                    x = self.shift(x)
                with torch.no_grad():
                    x = self.stem(x)
                return self.head(x)
        """)
    found = [line for line, _, code in codes_at(engine.Checker(), src) if code == "PTT017"]
    assert found == [18, 20], found


def test_ptt030_an_empty_placeholder_for_a_parameter_on_another_branch_is_silent():
    """An empty or 0-dim tensor that keeps an attribute defined where the learned one is off
    holds nothing .to() could leave behind; a full tensor there, or a placeholder for an
    attribute never made a parameter, is still flagged."""
    src = textwrap.dedent("""\
        import torch
        from torch import nn
        class Tokens(nn.Module):
            def __init__(self, width, learned):
                super().__init__()
                if learned:
                    self.start = nn.Parameter(torch.zeros(1, width))
                    self.gain = nn.Parameter(torch.ones(width))
                    self.bias = nn.Parameter(torch.zeros(width))
                else:
                    self.start = torch.tensor([])
                    self.gain = torch.tensor(1.0)
                    self.bias = torch.zeros(width)
                self.spare = torch.empty(0)
            def forward(self, inp):
                return torch.cat([self.start, inp]) * self.gain + self.bias + self.spare
        """)
    found = [line for line, _, code in codes_at(engine.Checker(), src) if code == "PTT030"]
    assert found == [13, 14], found


def test_ptt011_a_tensor_tested_as_a_bool_each_step_already_waits():
    waits = textwrap.dedent("""\
        import torch
        for xb, yb in train_loader:
            loss = crit(net(xb), yb)
            if torch.isnan(loss):
                continue
            loss.backward()
            opt.step()
            stats.append(loss.item())
        for xb, yb in train_loader:
            loss = crit(net(xb), yb)
            keep = yb > 0
            if not keep.any():
                continue
            loss.backward()
            opt.step()
            stats.append(loss.item())
        """)
    assert "PTT011" not in codes(waits)
    # NumPy's any() reads no device: the .item() is the step's only wait
    numpy_test = textwrap.dedent("""\
        import numpy as np
        import torch
        for xb, yb in train_loader:
            loss = crit(net(xb), yb)
            if np.isnan(arr).any():
                continue
            loss.backward()
            opt.step()
            stats.append(loss.item())
        """)
    assert codes(numpy_test).count("PTT011") == 1


def test_ptt022_copies_followed_at_once_by_a_deciding_read_and_comprehension_copies():
    head = ("import torch\nfrom torch.utils.data import DataLoader\n"
            "train_loader = DataLoader(ds, batch_size=8, pin_memory=True)\n")
    decided = head + textwrap.dedent("""\
        for step, batch in enumerate(train_loader):
            xb = batch["x"].to(dev)
            yb = batch["y"].to(dev)
            ok = (yb > 0) & (yb < 5)
            if not ok.any():
                continue
            crit(net(xb), yb).backward()
        """)
    assert "PTT022" not in codes(decided, (2, 13), "cuda")
    # work between the copies and the read (the forward): the copy could overlap it
    later = head + textwrap.dedent("""\
        for step, batch in enumerate(train_loader):
            xb = batch["x"].to(dev)
            loss = crit(net(xb), 0)
            if torch.isnan(loss):
                continue
            loss.backward()
        """)
    assert codes(later, (2, 13), "cuda").count("PTT022") == 1
    comp = head + textwrap.dedent("""\
        for step, batch in enumerate(train_loader):
            xb, yb = [t.to(dev) for t in batch]
            crit(net(xb), yb).backward()
        """)
    assert codes(comp, (2, 13), "cuda").count("PTT022") == 1


def test_ptt007_advice_keeps_requires_grad_for_a_leaf():
    rule = RULES["PTT007"]
    assert "requires_grad_()" in rule.advice and "requires_grad_()" in rule.fix


def test_weights_only_false_read_for_a_non_weight_entry_by_get():
    """PTT001: an explicit False whose load is read only for a non-weight entry through
    ``.get("key", default)`` (like ``ckpt["key"]``), or stated under a comment giving its
    purpose (``to load ...``), is the choice the advice describes."""
    by_get = """\
        import torch
        def settings(path):
            blob = torch.load(path, weights_only=False)
            return blob.get("options", {})
        """
    assert "PTT001" not in codes(by_get, (2, 13))
    commented = """\
        import torch
        def restore(path):
            # weights_only=False to load the pickled vocabulary as well
            blob = torch.load(path, weights_only=False)
            return blob
        """
    assert "PTT001" not in codes(commented, (2, 13))
    weights_by_get = """\
        import torch
        def restore(path):
            blob = torch.load(path, weights_only=False)
            return blob.get("model")
        """
    assert "PTT001" in codes(weights_by_get, (2, 13))
    bare = """\
        import torch
        def restore(path):
            blob = torch.load(path, weights_only=False)
            return blob
        """
    assert "PTT001" in codes(bare, (2, 13))


def test_ptt013_a_list_joined_into_one_tensor_is_not_a_log():
    # per-head scores stacked after a loop over heads: a tensor assembled, not a log
    joined = """\
        import torch
        def score_heads(outputs, labels, heads):
            scores = []
            for h in heads:
                loss_h = criterion(outputs[h], labels[h])
                scores.append(loss_h)
            scores = torch.stack(scores)
            table = {}
            for h, s in zip(heads, scores):
                table[h] = s
            return table
        """
    assert "PTT013" not in codes(joined)
    parts = """\
        import torch
        def embed(self, x):
            pieces = []
            for name in self.branches:
                pieces.append(self.loss_proj[name](x))
            pieces = torch.cat(pieces, dim=-1)
            self.cached = self.head(pieces)
        """
    assert "PTT013" not in codes(parts)
    # a list kept over the batches of an epoch, even if stacked at its end: still the leak
    epoch = """\
        import torch
        def train(model, loader):
            history = []
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                history.append(loss)
            print(torch.stack(history).mean())
        """
    assert codes(epoch).count("PTT013") == 1
    # a list over chunks stacked only to be printed (not replaced by the tensor): still flagged
    printed = joined.replace("scores = torch.stack(scores)", "print(torch.stack(scores).mean())")
    assert codes(printed).count("PTT013") == 1
    # a list over heads that is not joined: still flagged
    kept = """\
        import torch
        def score_heads(outputs, labels, heads, log):
            for h in heads:
                loss_h = criterion(outputs[h], labels[h])
                log.append(loss_h)
        """
    assert codes(kept).count("PTT013") == 1


def test_ptt012_manual_backward_and_a_no_grad_keyword():
    # Lightning's manual optimisation: the total is the loss that manual_backward differentiates
    manual = """\
        import torch
        class Module(LightningModule):
            def training_step(self, batch, idx):
                for view in batch:
                    loss_v = self.loss(self.net(view), 0)
                    for extra in range(3):
                        loss_v += self.loss(self.net(view), extra)
                    self.manual_backward(loss_v)
        """
    assert "PTT012" not in codes(manual)
    # a project's own context manager asked to turn autograd off
    quiet = """\
        import torch
        def measure(self, loader):
            total_loss = 0
            with frozen(self.net, no_grad=True):
                for x, y in loader:
                    total_loss += criterion(self.net(x), y)
            return total_loss
        """
    assert "PTT012" not in codes(quiet)
    loud = quiet.replace("no_grad=True", "no_grad=False")
    assert codes(loud).count("PTT012") == 1


def test_ptt024_apex_scaled_loss_and_a_step_each_iteration_around_a_block():
    divided = """\
        import torch
        def train(model, loader, opt, k):
            for i, x in enumerate(loader):
                loss = model(x) / k
                with amp.scale_loss(loss, opt) as scaled:
                    scaled.backward()
                if (i + 1) % k == 0:
                    opt.step()
                    opt.zero_grad()
        """
    assert "PTT024" not in codes(divided)
    undivided = divided.replace("model(x) / k", "model(x)")
    assert codes(undivided).count("PTT024") == 1
    # one branch accumulates (divided), the other zeroes before and steps after its block
    branches = """\
        import torch
        def train(model, loader, opt, k, fp16):
            for i, x in enumerate(loader):
                loss = model(x)
                if k > 1:
                    (loss / k).backward()
                    if (i + 1) % k == 0:
                        opt.step()
                        opt.zero_grad()
                else:
                    opt.zero_grad()
                    if fp16:
                        with amp.scale_loss(loss, opt) as scaled:
                            scaled.backward()
                    else:
                        loss.backward()
                    opt.step()
        """
    assert "PTT024" not in codes(branches)
    # a scheduler stepped each iteration after the block does not make it one step each
    sched = """\
        import torch
        def train(model, loader, opt, sched, k, fp16):
            for i, x in enumerate(loader):
                loss = model(x)
                if fp16:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
                if (i + 1) % k == 0:
                    opt.step()
                    opt.zero_grad()
                sched.step()
        """
    assert codes(sched).count("PTT024") == 2


def test_ptt039_a_step_that_reads_a_value_anyway():
    read = """\
        import torch
        def train(model, loader, opt):
            history = []
            for x, y in loader:
                loss = crit(model(x.cuda()), y.cuda())
                history.append(loss.item())
                loss.backward()
                opt.step()
                print("loss {:.4f}".format(loss))
        """
    assert "PTT039" not in codes(read)
    guarded = read.replace("                history.append(loss.item())\n",
                           "                if rank == 0:\n                    history.append(loss.item())\n")
    assert "PTT039" not in codes(guarded)
    # a read on some steps only, or none at all: the format is the step's wait
    sometimes = read.replace("                history.append(loss.item())\n",
                             "                if step % 50 == 0:\n                    history.append(loss.item())\n")
    assert codes(sometimes).count("PTT039") == 1
    assert codes(read.replace("                history.append(loss.item())\n", "")).count("PTT039") == 1


def test_ptt016_a_default_mask_that_only_gives_packed_lengths():
    lengths = """\
        import torch
        from torch.nn.utils.rnn import pack_padded_sequence

        class Encoder(torch.nn.Module):
            def forward(self, seq, valid=None):
                if valid is None:
                    valid = torch.ones(seq.shape[:2], dtype=torch.bool)
                counts = valid.sum(dim=1)
                packed = pack_padded_sequence(seq, counts, batch_first=True, enforce_sorted=False)
                return self.rnn(packed)[1][0][-1]
        """
    assert "PTT016" not in codes(lengths)
    # the same mask also multiplies the (device) input: it must be made on its device
    used = lengths.replace("return self.rnn(packed)[1][0][-1]",
                           "return self.rnn(packed)[1][0][-1] * valid.sum()")
    assert codes(used).count("PTT016") == 1


def test_lost_findings_are_useful_ones_the_real_runs_no_longer_give():
    """``lost``: findings labelled useful that the rules, run on the checkout amid its project,
    no longer make. Each says why (the project's own torch requirement or settings, or a rule
    change), is not also a current finding, and is counted on the docs page."""
    data = labels.load()
    assert data.lost
    current = {(f["repo"], f["path"], f["line"], f["code"]) for f in data.findings}
    for f in data.lost:
        assert f["label"] == "useful", f
        assert f["lost_because"].startswith(("the project's own torch", "a change of the rule")), f
        assert (f["repo"], f["path"], f["line"], f["code"]) not in current, f
    text = labels.render_rst(data)
    assert f"no longer make on the real code, run amid its project: {len(data.lost)}" in text
