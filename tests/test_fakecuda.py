"""Every tip's CUDA branch runs on a faked CUDA device (tipsite/fakecuda.py): no GPU is needed to
catch a device argument without an index, a float32 tolerance that TF32 breaks, or a
``torch.cuda`` call outside ``is_available()``. The figures of these runs mean nothing and are
never published; a real GPU run is what the CUDA runner and the committed result sets are for."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT

from tipsite import records, tipcheck, tipmeta

CUDA_TIPS = [t.path for t in tipmeta.read_all() if "cuda" in t.devices]


@pytest.fixture(scope="module")
def fake_cuda_reports() -> dict[str, dict]:
    """Every CUDA branch, run once, one tip after another in one runner process (each tip's
    download, as a reader would run it, on the fake device)."""
    return tipcheck.run_tips(CUDA_TIPS, fake_cuda=True)


@pytest.mark.parametrize("path", CUDA_TIPS, ids=lambda p: p.stem)
def test_cuda_branch_runs_and_decides_cuda(fake_cuda_reports, path):
    report = fake_cuda_reports.get(path.stem)
    assert report is not None, f"{path.name}: the runner reported nothing for it"
    problems = tipcheck.static_problems(path) or tipcheck.report_problems(path, report, fake_cuda=True)
    assert not problems, f"{path.name} on the fake CUDA device:\n" + "\n".join(problems) + (
        "\n" + report.get("stderr", "")[-3000:])
    assert "cuda" in report["verdicts"], f"{path.name} decided no CUDA verdict on a CUDA machine"


def test_the_rule_manifest_holds_what_each_cuda_tip_decides_by(fake_cuda_reports):
    """conf/tip-rules.json (tipsite/records/rules.py), which vet checks a reader's records against,
    holds the shape of each decision these runs made (a tip whose run failed is the test above's)."""
    manifest = records.rules.load()
    problems = []
    for path in CUDA_TIPS:
        report = fake_cuda_reports.get(path.stem) or {}
        if report.get("status") != "passed" or not isinstance(report.get("result"), dict):
            continue
        record = tipcheck.rule_record(path, report["result"])
        for device in record.get("verdicts") or {}:
            if f"{path.stem} {device}" in manifest.get("missing", {}):
                continue  # listed with why (tests/test_records.py keeps that list exact)
            problems += [f"{path.stem}: {p}" for p in records.rules.shape_problems(record, device, manifest)]
    assert not problems, "run `python -m tipsite.rulegen --fake-cuda`:\n" + "\n".join(problems)


def _run_fake(code: str) -> subprocess.CompletedProcess:
    script = f"import sys; sys.path.insert(0, {str(ROOT)!r})\nfrom tipsite import fakecuda\nfakecuda.install()\n"
    return subprocess.run([sys.executable, "-c", script + textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300)


def test_the_fake_refuses_a_device_without_an_index_as_cuda_does():
    """The crash tip_oom_retry hit on the H100 (tests/fixtures/gpu-run-2026-11-22-h100)."""
    proc = _run_fake("""
        import torch
        torch.cuda.set_per_process_memory_fraction(0.5, torch.device("cuda"))
    """)
    assert proc.returncode != 0
    assert "Expected a torch.device with a specified index or an integer" in proc.stderr
    ok = _run_fake("""
        import torch
        torch.cuda.set_per_process_memory_fraction(0.5, torch.device("cuda", 0))
        print(torch.cuda.memory_allocated(0))
    """)
    assert ok.returncode == 0, ok.stderr


def test_the_fake_breaks_a_float32_tolerance_as_tf32_did():
    """The crash tip_channels_last hit on the H100: channels_last vs contiguous conv at 1e-4."""
    proc = _run_fake("""
        import torch
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(64, 64, 3, padding=1).to("cuda")
        x = torch.randn(8, 64, 32, 32, device="cuda")
        out = conv(x)
        out_cl = conv.to(memory_format=torch.channels_last)(x.to(memory_format=torch.channels_last))
        torch.testing.assert_close(out_cl, out, rtol=1e-4, atol=1e-4)
    """)
    assert proc.returncode != 0 and "Tensor-likes are not close" in proc.stderr


def test_cuda_tensors_look_like_cuda_tensors():
    proc = _run_fake("""
        import torch
        x = torch.ones(4, device="cuda")
        y = (x * 2).sum()
        host = y.cpu()
        print(x.is_cuda, y.device, host.device, torch.cuda.memory_allocated() > 0)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "cuda:0", "cpu", "True"]


def test_sync_debug_mode_warns_on_item():
    proc = _run_fake("""
        import warnings, torch
        torch.cuda.set_sync_debug_mode("warn")
        x = torch.ones(4, device="cuda")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x.sum().item()
        print(len(caught))
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "1", proc.stderr


def test_cuda_calls_outside_is_available_fail_a_cpu_run(tmp_path):
    """On a CPU machine memory_allocated() reads 0 silently; the strict tip runner refuses it."""
    tip = tmp_path / "tip_bad.py"
    tip.write_text("import torch\nprint(torch.cuda.memory_allocated())\nRESULT = {}\n")
    report = tipcheck.run_tip(tip)
    assert report["status"] == "failed"
    assert "torch.cuda.memory_allocated() called on a machine without CUDA" in report["error"]


def test_cuda_verdicts_are_labelled_cuda_only_by_tips_that_measure_it():
    for tip in tipmeta.read_all():
        if "cuda" not in tip.devices:
            assert records.required_devices(tip.devices, {"cpu", "cuda"}) == {"cpu"}


def test_a_tip_importing_what_a_reader_lacks_fails(tmp_path):
    """The test venv has jinja2 (Sphinx needs it); a reader's download does not."""
    tip = tmp_path / "tip_jinja.py"
    tip.write_text("import jinja2\nRESULT = {}\n")
    report = tipcheck.run_tip(tip)
    assert report["status"] == "failed" and "imports 'jinja2', which a reader" in report["error"]
    own = tmp_path / "tip_own.py"
    own.write_text("import pathlib, sys\npathlib.Path('mine.py').write_text('X = 1')\nsys.path.insert(0, '.')\n"
                   "import mine\nimport numpy\nRESULT = {}\n")
    assert tipcheck.run_tip(own)["status"] == "passed"


def test_mixing_devices_raises_as_cuda_does_and_modules_move():
    """A CUDA tensor meeting a CPU tensor raises; module.to(device) and Parameter(...) keep the
    device (what tip_module_list's plain list of Parameters does wrong shows on the fake)."""
    proc = _run_fake("""
        import torch
        a, b = torch.ones(3, device="cuda"), torch.ones(3)
        try:
            a + b
            print("no error")
        except RuntimeError as err:
            print("raised", "same device" in str(err))
        layer = torch.nn.Linear(3, 3).to("cuda")
        print(layer.weight.device, layer(a).device, (a * torch.tensor(2.0)).device)
        print(torch.nn.Linear(3, 3, device="cuda").weight.device)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["raised", "True", "cuda:0", "cuda:0", "cuda:0", "cuda:0"]


# --- what broke on real GPUs and the fake hid (issue 30.5) ----------------------------------------

def test_a_blind_profiler_fails_the_tip_loudly():
    """CUPTI recording no GPU activity made every point host-bound and the verdict a silent
    "inconclusive"; now the tip fails, naming the comparison."""
    tip = ROOT / "gallery/correctness/tip_eval_and_no_grad.py"
    report = tipcheck.run_tip(tip, fake_cuda=True, env={"TIPS_FAKECUDA_BLIND": "1"})
    assert report["status"] == "failed", report.get("verdicts")
    assert "recorded no GPU activity" in report["error"] + report.get("stderr", ""), report["error"]


def test_calibration_fails_when_the_profiler_cannot_see_a_matmul():
    proc = _run_fake(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from tipsite import tipkit
        print(sorted(tipkit.calibrate("cuda")))
        os.environ["TIPS_FAKECUDA_BLIND"] = "1"
        import torch
        torch._tipkit_calibration.clear()
        tipkit.calibrate("cuda")
    """)
    assert "profiled_matmul_share" in proc.stdout and "launch_s" in proc.stdout, proc.stderr
    assert proc.returncode != 0 and "calibrate: torch.profiler saw no GPU activity" in proc.stderr


def test_timings_run_several_calls_a_round_with_warm_ups_and_budgets():
    proc = _run_fake(f"""
        import sys
        import torch
        sys.path.insert(0, {str(ROOT)!r})
        from tipsite import tipkit
        calls = {{"a": 0, "b": 0}}
        x = torch.ones(16, 16, device="cuda")
        def count(k):
            def fn():
                calls[k] += 1
                return x @ x
            return fn
        c = tipkit.compare_times("x", {{"a": count("a"), "b": count("b")}}, threshold=1.5,
                                 device="cuda", round_s=0.02, budget_s=0.3, max_rounds=12)
        rounds = len(c["ratios"])
        print(rounds, calls["a"] > 2 * rounds, c["kernels"]["base"] > 0, c["bound"])
    """)
    assert proc.returncode == 0, proc.stderr
    rounds, several, kernels, bound = proc.stdout.split()
    assert int(rounds) >= 6 and several == kernels == "True" and bound in ("device", "host")


def test_streams_are_current_inside_their_context_and_many_sms_can_be_asked_for():
    proc = _run_fake("""
        import os
        os.environ["TIPS_FAKECUDA_SMS"] = "132"
        import torch
        side = torch.cuda.Stream()
        main = torch.cuda.current_stream()
        print(main == torch.cuda.default_stream(), side == main)
        with torch.cuda.stream(side):
            print(torch.cuda.current_stream() == side)
            side.wait_stream(main)
        print(torch.cuda.current_stream() == main, side.waited == [main])
        print(torch.cuda.get_device_properties(0).multi_processor_count)
        try:
            side.wait_stream("not a stream")
        except TypeError:
            print("refused")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False", "True", "True", "True", "132", "refused"]
