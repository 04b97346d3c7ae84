"""Round 6's misreads of PTT001, PTT003 and PTT005 (issue 33), each as a small file written for
the test (never copied from held-out code): the misread case silent, its near miss still flagged."""

from __future__ import annotations

import textwrap

import pytest

from tipsite.checker import engine


def codes(source: str, torch=(2, 13), device="cuda") -> list[str]:
    return [f.code for f in engine.Checker(torch, device).check_source(textwrap.dedent(source))]


# (rule, silent case, near miss that is still flagged)
ROUND_SIX = {
    # PTT001: an explicit weights_only=False is the stated choice for a file the program writes
    # itself; where the code shows nothing of the kind it is still reported
    "explicit False on a resumed training checkpoint": ("PTT001", '''
        import torch
        def restart(trainer, fname):
            state = torch.load(fname, map_location="cpu", weights_only=False)
            trainer.net.load_state_dict(state["net"])
            trainer.optim.load_state_dict(state["optim"])
            trainer.step = state["step"]
        ''', '''
        import torch
        def restart(trainer, fname):
            state = torch.load(fname, map_location="cpu", weights_only=False)
            trainer.net.load_state_dict(state["net"])
            trainer.step = state["step"]
        '''),
    "explicit False on a cache the function writes": ("PTT001", '''
        import os
        import torch
        def table(folder, build):
            where = os.path.join(folder, "index.bin")
            if os.path.exists(where):
                return_ = torch.load(where, weights_only=False)
            else:
                return_ = build()
                torch.save(return_, where)
            return return_
        ''', '''
        import os
        import torch
        def table(folder, build):
            where = os.path.join(folder, "index.bin")
            return_ = torch.load(where, weights_only=False)
            torch.save(return_, where + ".bak")
            return return_
        '''),
    # PTT003: assign=True would break these loads
    "partial load (strict=False)": ("PTT003", '''
        import torch
        from accelerate import init_empty_weights
        def attach(head_file):
            head_net = Head()
            head_net.load_state_dict(torch.load(head_file, weights_only=True), strict=False)
            return head_net
        ''', '''
        import torch
        from accelerate import init_empty_weights
        def attach(head_file):
            head_net = Head()
            head_net.load_state_dict(torch.load(head_file, weights_only=True), strict=True)
            return head_net
        '''),
    "the module inside a DDP wrapper": ("PTT003", '''
        import torch
        from accelerate import init_empty_weights
        def warm_start(wrapped_net, src):
            wrapped_net.module.load_state_dict(torch.load(src, weights_only=True))
        ''', '''
        import torch
        from accelerate import init_empty_weights
        def warm_start(wrapped_net, src):
            wrapped_net.load_state_dict(torch.load(src, weights_only=True))
        '''),
    "wrapped by an aliased DDP and given to an optimizer first": ("PTT003", '''
        import torch
        from accelerate import init_empty_weights
        from torch.nn.parallel import DistributedDataParallel as Wrap
        def setup(gen_net, src, local):
            gen_net = Wrap(gen_net, device_ids=[local])
            gen_net.load_state_dict(torch.load(src, weights_only=True))
        ''', '''
        import torch
        from accelerate import init_empty_weights
        from torch.nn.parallel import DistributedDataParallel as Wrap
        def setup(gen_net, src, local):
            gen_net.load_state_dict(torch.load(src, weights_only=True))
            gen_net = Wrap(gen_net, device_ids=[local])
        '''),
    "cast to half at top level before the load": ("PTT003", '''
        import torch
        from accelerate import init_empty_weights
        coder_model = Coder()
        if want_half:
            coder_model = coder_model.half()
        if ready:
            coder_model.load_state_dict(torch.load(src_file, weights_only=True))
        ''', '''
        import torch
        from accelerate import init_empty_weights
        coder_model = Coder()
        if ready:
            coder_model.load_state_dict(torch.load(src_file, weights_only=True))
        coder_model = coder_model.half()
        '''),
    # PTT005: torch.cuda.amp imported only as the fallback of an older torch
    "GradScaler fallback behind except ImportError": ("PTT005", '''
        import torch
        try:
            from torch import GradScaler
        except ImportError:
            from torch.cuda.amp import GradScaler
        def make_scaler(on_cuda):
            return GradScaler() if on_cuda else None
        ''', '''
        import torch
        from torch.cuda.amp import GradScaler
        def make_scaler(on_cuda):
            return GradScaler() if on_cuda else None
        '''),
    "autocast fallback behind except (ImportError, AttributeError)": ("PTT005", '''
        import torch
        try:
            from torch.amp import autocast as mixed
        except (ImportError, AttributeError):
            from torch.cuda.amp import autocast as mixed
        def run(net, batch):
            with mixed("cuda"):
                return net(batch)
        ''', '''
        import torch
        try:
            from apex.amp import autocast as mixed
        except ImportError:
            from torch.cuda.amp import autocast as mixed
        def run(net, batch):
            with mixed():
                return net(batch)
        '''),
}


@pytest.mark.parametrize("case", sorted(ROUND_SIX))
def test_round_six_error_kinds_stay_silent_and_their_near_misses_do_not(case):
    code, silent, near = ROUND_SIX[case]
    assert code not in codes(silent), case
    assert code in codes(near), case


def test_a_plain_torch_cuda_amp_call_is_still_reported():
    src = '''
        import torch
        def step(net, x):
            with torch.cuda.amp.autocast():
                return net(x)
        '''
    assert "PTT005" in codes(src) and "PTT005" not in codes(src, (2, 3))
