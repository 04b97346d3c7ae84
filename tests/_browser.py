"""Fixtures for the real-browser tests: the built site served on localhost, and Chromium.

The browser is Debian's Chromium (``apt-get install chromium``), driven through the
``playwright`` package; no browser is ever downloaded. If Chromium or playwright is missing, or
Chromium will not start, the tests FAIL, saying so: a skipped browser test would hide a site
nobody checked.

``TIPS_TEST_HTML=/path/to/html`` tests an already built site instead of building it (the
``site`` fixture), e.g. a private build made with ``sphinx-build ... docs /tmp/html``.

The accessibility tests inject axe-core (the npm package, pinned as :data:`AXE_VERSION`) into
the pages; ``bash .ci/run tests`` installs it into ``.ci/venv/node_modules`` (``TIPS_AXE_JS``
names another ``axe.min.js``). Without it they fail, saying how to install it.
"""

from __future__ import annotations

import functools
import os
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from tipsite import tipmeta

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("TIPS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
AXE_VERSION = "4.14.1"  # .ci/run installs this version
AXE_JS = Path(os.environ.get("TIPS_AXE_JS", ROOT / ".ci" / "venv" / "node_modules" / "axe-core" / "axe.min.js"))
TIMEOUT_MS = 60_000  # a 2-core machine shared by several builds is slow to lay out pages

# Each query must put, among its first three results, a tip that answers it: a tip that examines
# one of the claims listed (conf/claims.toml), or a tip named. Claims rather than file names where
# the articles make the claim: whichever tip answers the claim counts.
QUERIES = {
    "inference_mode": ["S0-5"],
    "GradScaler": ["S1-5"],
    "map_location": ["S0-6", "S1-3"],
    "non_blocking": ["S1-4"],
    "set_to_none": ["S1-6"],
    "ModuleList": ["S2-6"],
    "register_buffer": ["S2-4"],
    "memory leak": ["S0-4", "S4-2", "S4-3"],
    "out of memory": ["S4-1", "S4-3", "S4-2"],
    "cudnn.benchmark": ["S1-10"],
    "from_numpy": ["S1-8"],
    "gradient accumulation": ["S1-7"],
}

# What a practitioner types instead: symptoms, questions, their own words (tests/test_search.py).
QUESTIONS = {
    "DataLoader slow": ["tip_dataloader_workers"],
    "why is my DataLoader so slow?": ["tip_dataloader_workers"],
    "how many num_workers": ["tip_dataloader_workers"],
    "GPU idle": ["S0-7", "tip_dataloader_workers", "tip_profile_low_gpu_utilization"],
    "item()": ["S0-7"],
    "does .item() slow down training": ["S0-7"],
    "OOM": ["S4-1", "S4-2", "S4-3"],
    "CUDA OOM retry": ["S4-1"],
    "leak": ["S0-4", "S4-2", "S4-3"],
    "memory grows every iteration": ["S0-4", "S4-2", "S4-3"],
    "reproducible": ["S1-10", "tip_deterministic_algorithms"],
    "deterministic results": ["S1-10", "tip_deterministic_algorithms"],
    "how to save a model": ["S2-3"],
    "load a GPU checkpoint on a CPU machine": ["S0-6", "S1-3"],
    "is torch.load safe": ["tip_weights_only_load"],
    "model.eval() vs no_grad": ["S4-5"],
    "faster inference without gradients": ["S0-5"],
    "fp16 training": ["S1-5"],
    "bf16 on CPU": ["tip_bf16_autocast_cpu"],
    "gradient checkpointing to save memory": ["tip_activation_checkpointing"],
    "python for loop slow": ["S3-1"],
    "how many threads should torch use": ["tip_cpu_threads"],
    "Adam optimizer memory": ["S1-2"],
    "numpy array to tensor without copy": ["S1-8"],
    "pinned memory transfer": ["tip_pin_memory", "S1-4"],
    "parameters in a python list": ["S2-6"],
    "torch.compile slower": ["tip_torch_compile"],
    "measure GPU memory usage": ["S1-1"],
    "fused optimizer": ["tip_foreach_fused_optimizers"],
    "NHWC convolution": ["tip_channels_last"],
    # the tips that answer what practitioners asked (conf/coverage.toml): two questions each,
    # and the first line of the error or warning a tip is about
    "how do I make my training reproducible": ["tip_deterministic_algorithms"],
    "are deterministic algorithms slower": ["tip_deterministic_algorithms"],
    "put_ does not have a deterministic implementation": ["tip_deterministic_algorithms"],
    "how to resume training from a checkpoint": ["tip_checkpoint_resume"],
    "save optimizer and scheduler state": ["tip_checkpoint_resume"],
    "why is my GPU utilization low": ["tip_profile_low_gpu_utilization"],
    "find data loading bottleneck with profiler": ["tip_profile_low_gpu_utilization"],
    "do I need a GradScaler with bfloat16": ["tip_bf16_autocast_no_grad_scaler"],
    "fp16 gradients underflow to zero": ["tip_bf16_autocast_no_grad_scaler"],
    "profiler overhead training": ["tip_debugging_apis_off"],
    "is gradcheck slow": ["tip_debugging_apis_off"],
    "what does set_float32_matmul_precision high do": ["tip_tf32_matmul_precision"],
    "should I enable TF32 on my GPU": ["tip_tf32_matmul_precision"],
    "TensorFloat32 tensor cores for float32 matrix multiplication available but not enabled":
        ["tip_tf32_matmul_precision"],
    "torch.compile reduce-overhead CUDA graphs": ["tip_cuda_graphs_reduce_overhead"],
    "how to reduce kernel launch overhead for small batches": ["tip_cuda_graphs_reduce_overhead"],
    "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run":
        ["tip_cuda_graphs_reduce_overhead"],
    "should I call torch.cuda.empty_cache every step": ["tip_empty_cache_every_step"],
    "does empty_cache free GPU memory": ["tip_empty_cache_every_step"],
    "out of memory with variable sequence length": ["tip_preallocate_variable_length"],
    "preallocate GPU memory variable length batches": ["tip_preallocate_variable_length"],
    "what does expandable_segments do": ["tip_expandable_segments"],
    "how to reduce GPU memory fragmentation": ["tip_expandable_segments"],
    "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation":
        ["tip_expandable_segments"],
    "conv bias before batchnorm": ["tip_conv_bias_before_batchnorm"],
    "Conv2d bias=False BatchNorm2d": ["tip_conv_bias_before_batchnorm"],
    "torch.jit.script vs torch.compile": ["tip_jit_script_vs_compile"],
    "is torch.jit.script deprecated": ["tip_jit_script_vs_compile"],
    "torch.jit.script is deprecated. Please switch to torch.compile or torch.export":
        ["tip_jit_script_vs_compile"],
    "scaled_dot_product_attention vs manual attention": ["tip_scaled_dot_product_attention"],
    "flash attention on CPU": ["tip_scaled_dot_product_attention"],
    "gradient clipping cost per step": ["tip_gradient_clipping_cost"],
    "clip_grad_norm_ foreach": ["tip_gradient_clipping_cost"],
    "persistent_workers True or False": ["tip_dataloader_persistent_workers"],
    "DataLoader workers restart every epoch": ["tip_dataloader_persistent_workers"],
    "persistent_workers option needs num_workers > 0": ["tip_dataloader_persistent_workers"],
    "CUDA out of memory. Tried to allocate": ["S4-1", "tip_expandable_segments", "tip_preallocate_variable_length"],
    "CUDA out of memory during training": ["S4-1", "S4-2", "S4-3", "tip_expandable_segments"],
    "why is DDP slow with gradient accumulation": ["tip_ddp_no_sync_accumulation"],
    "DDP no_sync gradient accumulation": ["tip_ddp_no_sync_accumulation"],
    "does layer order matter for DDP find_unused_parameters": ["tip_ddp_find_unused_parameters"],
    "DDP find_unused_parameters slow": ["tip_ddp_find_unused_parameters"],
    "Expected to have finished reduction in the prior iteration before starting a new one":
        ["tip_ddp_find_unused_parameters"],
    "DataParallel vs DistributedDataParallel which is faster": ["tip_ddp_vs_dataparallel"],
    "should I use DataParallel or DDP": ["tip_ddp_vs_dataparallel"],
    "DDP training on CPU faster than one process": ["tip_cpu_ddp_gloo"],
    "distributed training on CPU with multiple sockets": ["tip_cpu_ddp_gloo"],
    "how to set CPU affinity for PyTorch threads": ["tip_cpu_thread_affinity"],
    "pin OpenMP threads to cores GOMP_CPU_AFFINITY": ["tip_cpu_thread_affinity"],
    # issue 34: lines pasted whole from torch's output (readers' logs; torch's own text), and a
    # question no page holds every word of (the search offers the nearest tips)
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
    "cuda:0 and cpu!": ["tip_tensors_in_forward"],
    "RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cpu, different "
    "from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)": ["tip_tensors_in_forward"],
    "RuntimeError: CUDA error: out of memory": ["S4-1", "tip_expandable_segments", "tip_preallocate_variable_length",
                                                "tip_empty_cache_every_step", "tip_activation_checkpointing"],
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity "
    "of 47.53 GiB of which 16.88 MiB is free. Process 3652628 has 47.51 GiB memory in use. Of the "
    "allocated memory 47.14 GiB is allocated by PyTorch, and 57.79 MiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
    "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)":
        ["S4-1", "tip_expandable_segments", "tip_preallocate_variable_length"],
    "ValueError: persistent_workers option needs num_workers > 0": ["tip_dataloader_persistent_workers"],
    "is DataParallel still ok": ["tip_ddp_vs_dataparallel"],
}


def answering_docnames(query: str, tips: list[tipmeta.Tip]) -> set[str]:
    """The tips that answer ``query`` (QUERIES or QUESTIONS): by claim id or by name."""
    wanted = set(QUERIES.get(query) or QUESTIONS[query])
    return {t.docname for t in tips if wanted & set(t.claims) or t.name in wanted}


def docname_of(url: str, base_url: str) -> str:
    """``http://127.0.0.1:8000/tips/speed/tip_x.html?highlight=y#z`` -> ``tips/speed/tip_x``."""
    path = unquote(urlparse(url).path)
    base = urlparse(base_url).path.rstrip("/")
    return path[len(base):].lstrip("/").removesuffix(".html")


@pytest.fixture(scope="session")
def html_dir(request) -> Path:
    given = os.environ.get("TIPS_TEST_HTML")
    if given:
        path = Path(given)
        assert (path / "index.html").exists(), f"TIPS_TEST_HTML={given} holds no built site"
        return path
    return request.getfixturevalue("site")


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


@pytest.fixture(scope="session")
def base_url(html_dir: Path):
    """The built site over HTTP on 127.0.0.1 (ephemeral port), as a reader's browser sees it."""
    handler = functools.partial(_QuietHandler, directory=str(html_dir))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.fail(f"the browser tests need the playwright package (conf/requirements/tests.txt): {exc}",
                    pytrace=False)
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is not installed at {CHROMIUM} (CI: apt-get install -y chromium)",
                    pytrace=False)
    manager = sync_playwright().start()
    try:
        chromium = manager.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    except Exception as exc:  # any launch failure must fail the run, loudly
        manager.stop()
        pytest.fail(f"Chromium at {CHROMIUM} could not be launched: {exc}", pytrace=False)
    yield chromium
    chromium.close()
    manager.stop()


@pytest.fixture(scope="session")
def axe_source() -> str:
    """The source of axe-core's ``axe.min.js``, to inject into a page; fails if it is missing."""
    if not AXE_JS.is_file():
        pytest.fail(f"the accessibility tests need axe-core {AXE_VERSION} at {AXE_JS}: `bash .ci/run "
                    f"tests` installs it, or: npm install --no-save --prefix .ci/venv axe-core@{AXE_VERSION}"
                    " (TIPS_AXE_JS=/path/to/axe.min.js names another copy)", pytrace=False)
    return AXE_JS.read_text(encoding="utf-8")


def axe_violations(page, source: str) -> list[dict]:
    """axe-core's violations on the page as it is now: ``[{id, impact, help, nodes: [{target,
    html, summary}]}]``, every rule axe runs by default (WCAG 2.x A and AA, best practices)."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=source)
    return page.evaluate("""async () => {
        const result = await axe.run(document, {resultTypes: ['violations']});
        return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.map(n => ({target: n.target.join(' '), html: n.html.slice(0, 200),
                                      summary: n.failureSummary}))})); }""")


def describe_violations(violations: list[dict], limit: int = 5) -> str:
    """One paragraph per violation: rule, impact, what it asks, and the first elements failing it."""
    lines = []
    for v in violations:
        lines.append(f"- {v['id']} ({v['impact']}, {len(v['nodes'])} element(s)): {v['help']}")
        for n in v["nodes"][:limit]:
            summary = " ".join((n["summary"] or "").split())
            lines.append(f"    {n['target']}: {n['html']}\n      {summary}")
        if len(v["nodes"]) > limit:
            lines.append(f"    ... and {len(v['nodes']) - limit} more")
    return "\n".join(lines)


@pytest.fixture
def new_page(browser):
    """``new_page(width=1280, height=900, dark=False)``: a fresh page in its own context."""
    contexts = []

    def make(width: int = 1280, height: int = 900, dark: bool = False):
        context = browser.new_context(viewport={"width": width, "height": height},
                                      color_scheme="dark" if dark else "light")
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.js_errors = errors  # type: ignore[attr-defined]
        # What the page said and which requests failed, for the message of a test that times out.
        log: list[str] = []
        page.on("console", lambda msg: log.append(f"console.{msg.type}: {msg.text}"))
        page.on("requestfailed", lambda req: log.append(f"request failed: {req.url} ({req.failure})"))
        page.diagnostics = log  # type: ignore[attr-defined]
        return page

    yield make
    for context in contexts:
        context.close()


def screenshot(page, name: str, full_page: bool = True) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=full_page)
    return path


SEARCH_PANEL = "#tips-search-panel"


def wait_for_search(page, query: str | None = None, n: int = 3) -> float:
    """The search (Pagefind, tipsite/sphinxext/static/tips_search.js) has answered ``query`` (by
    default whatever was asked): its first ``n`` results (or all of them, if fewer) are shown.
    Returns the page's clock (``performance.now()``, ms) when they were first seen. A timeout
    fails with what the panel showed, what the page logged and which requests failed."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        handle = page.wait_for_function(
            """([q, n]) => { const p = document.querySelector('#tips-search-panel');
                if (!p || p.dataset.count === undefined) return false;
                if (q !== null && p.dataset.query !== q) return false;
                const want = Math.min(n, Number(p.dataset.count));
                const items = p.querySelectorAll('ul.pf-results > li');
                if (items.length < want) return false;
                for (let i = 0; i < want; i++) if (!items[i].matches('li.tips-result')) return false;
                return performance.now(); }""", arg=[query, n], polling="raf")
    except PlaywrightTimeout:
        state = page.evaluate("""() => { const p = document.querySelector('#tips-search-panel');
            if (!p) return {panel: null, sphinx_results_hidden:
                            (document.getElementById('search-results') || {}).hidden};
            return {dataset: {...p.dataset}, items: Array.from(
                p.querySelectorAll('ul.pf-results > li')).map(li => li.className)}; }""")
        log = getattr(page, "diagnostics", []) + getattr(page, "js_errors", [])
        raise AssertionError(f"the search never showed its results for {query!r} on {page.url}: "
                             f"panel {state}; page log {log}") from None
    return handle.json_value()


def top_results(page, base_url: str, n: int = 3) -> list[str]:
    hrefs = page.eval_on_selector_all(
        f"{SEARCH_PANEL} ul.pf-results > li.tips-result",
        "lis => lis.map(li => li.querySelector('a').href)")
    return [docname_of(h, base_url) for h in hrefs[:n]]
