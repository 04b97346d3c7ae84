"""
``to(device, non_blocking=True)``: what it overlaps, and what it needs
======================================================================

The article recommends asynchronous copies (claim S1-4):

    "Use `tensor.to(non_blocking=True)` when it’s applicable to overlap data transfers and kernel
    execution."

and its example loop copies every batch with ``.to('cuda:0', non_blocking=True)``. What the
flag does is let Python return before a host-to-device copy has finished. Per NVIDIA's notes
on the CUDA runtime's synchronisation behaviour, an asynchronous copy from *pageable* host
memory is staged through pinned memory, and the driver may wait for the stream to do it, so
only a *pinned* (page-locked) source lets the whole copy run while Python goes on; how much
the flag still saves from pageable memory depends on the size, and the figures show it. And
a copy issued on the same CUDA stream as the kernels still runs after them on the GPU: copy
and kernel only run at the same time when the copy sits on a stream of its own. This tip
times all of these on CUDA next to the same copy without the flag, at sizes chosen from the
GPU's own measured rates so that copy and kernel each last long enough to overlap. The claim
is about CUDA: a machine without a GPU measures nothing here.
"""
# sphinx_gallery_tips_claims = ["S1-4"]
# sphinx_gallery_tips_tags = ["data-loading", "device", "sync", "cuda"]
# sphinx_gallery_tips_devices = ["cuda"]
# sphinx_gallery_tips_kind = "speed"
# sphinx_gallery_tips_min_torch = "1.9"
# sphinx_gallery_tips_takeaway = "non_blocking=True lets the CPU run ahead of a copy; only from pinned memory is the whole copy asynchronous, and it overlaps kernels only on a side stream."
# sphinx_gallery_tips_keywords = ["non_blocking", "pin_memory", "pinned memory", "asynchronous copy", "cuda streams", "host to device", "overlap"]
# sphinx_gallery_tips_docs = ["https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html", "https://docs.nvidia.com/cuda/cuda-runtime-api/api-sync-behavior.html"]
# sphinx_gallery_tips_rules = ["PTT022"]

# %%
# How this tip measures and decides
# ---------------------------------
# The helpers every tip on this site shares (one module, written out in each download). The two
# variants are timed in alternating rounds with ``torch.utils.benchmark``; each round gives one
# ratio, anti-pattern time / recommended time. The interval is a ~95% confidence interval for
# the median ratio; rounds are added while it straddles the rule's threshold. A verdict is the
# first case of the rule whose conditions the measurements meet.
from tipsite.tipkit import calibrate, compare_times, decide, plot_ratios, report


# %%
# Setup
# -----
# One CPU thread: the host side of a copy is a single stream of calls, and one thread keeps
# timings steady on a busy machine.
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"device: {device}, threads: {torch.get_num_threads()}, "
      f"torch {torch.__version__}")
skipped = []
if device.type != "cuda":
    skipped.append("host-to-GPU copy timings: the claim is about CUDA, none here")
    print("Skipped:", skipped[-1])

    # Without a GPU there is nothing to overlap: pinning needs an accelerator's
    # driver, and a CPU-to-CPU ``.to`` with the flag returns the tensor itself.
    x_cpu = torch.randn(4)
    try:
        x_cpu.pin_memory()
    except RuntimeError as err:
        print("pin_memory() raises RuntimeError:", str(err).splitlines()[0][:50])
    else:
        print("pin_memory() works here: another accelerator provides pinned memory")
    same = x_cpu.to("cpu", non_blocking=True) is x_cpu
    print("x.to('cpu', non_blocking=True) is x:", same)

# %%
# The anti-pattern and the recommended patterns
# ---------------------------------------------
# Each call queues one compute kernel (a float32 matmul) and one host-to-device copy of a
# batch, as a training step does. Variants:
#
# * pageable, blocking: ``x.to(device)`` from ordinary memory, the usual anti-pattern;
# * pageable, non_blocking: the article's ``x.to(device, non_blocking=True)`` from ordinary
#   memory (a ``DataLoader`` without ``pin_memory=True`` yields such batches);
# * pinned, blocking and pinned, non_blocking: the same from page-locked memory;
# * non_blocking on a side stream, from either memory: the copy on a stream of its own, so
#   that it can run while the matmul does.


def make_variants(elements, n):
    pageable = torch.randn(elements)               # [elements] float32, pageable
    pinned = pageable.pin_memory()                 # same data, page-locked
    m = torch.randn(n, n, device=device) / n**0.5  # [n, n]
    side = torch.cuda.Stream()

    def pageable_blocking():
        y = m @ m
        return y, pageable.to(device)

    def pageable_non_blocking():
        y = m @ m
        return y, pageable.to(device, non_blocking=True)

    def pinned_blocking():
        y = m @ m
        return y, pinned.to(device)

    def pinned_non_blocking():
        y = m @ m
        return y, pinned.to(device, non_blocking=True)

    def on_side_stream(src):
        def call():
            dst = torch.empty(src.shape, device=device)  # fresh, on this stream
            # the side stream waits for the work queued so far (its memory may have
            # been in use until then), not for the matmul queued next: that one the
            # copy overlaps
            side.wait_stream(torch.cuda.current_stream())
            y = m @ m
            with torch.cuda.stream(side):
                dst.copy_(src, non_blocking=True)
            torch.cuda.current_stream().wait_stream(side)  # later kernels see the batch
            return y, dst
        return call

    return pageable, {"pageable, blocking": pageable_blocking,
                      "pageable, non_blocking": pageable_non_blocking,
                      "pageable, non_blocking, side stream": on_side_stream(pageable),
                      "pinned, blocking": pinned_blocking,
                      "pinned, non_blocking": pinned_non_blocking,
                      "pinned, non_blocking, side stream": on_side_stream(pinned)}


# In a training loop the batches come from a ``DataLoader``: the anti-pattern copies
# each with a plain ``.to(device)``, the recommended loop asks the loader for pinned
# batches and copies them with ``non_blocking=True``.
def copy_batches(rows):  # anti-pattern
    loader = torch.utils.data.DataLoader(rows, batch_size=64)
    batches = []
    for x in loader:
        batches.append(x.to(device))
    return torch.cat(batches)


def copy_batches_non_blocking(rows):  # recommended
    loader = torch.utils.data.DataLoader(rows, batch_size=64, pin_memory=True)
    batches = []
    for x in loader:
        batches.append(x.to(device, non_blocking=True))
    return torch.cat(batches)


# %%
# Check: every variant delivers the same batch
# --------------------------------------------
if device.type == "cuda":
    source, variants = make_variants(2**18, 256)  # 1 MiB, a [256, 256] matmul
    for fn in variants.values():
        torch.testing.assert_close(fn()[1].cpu(), source, rtol=0, atol=0)
    print(f"all {len(variants)} variants deliver identical data")
    rows = source.view(256, 1024)  # the same 1 MiB as a dataset of 256 rows
    for copy in (copy_batches, copy_batches_non_blocking):
        torch.testing.assert_close(copy(rows).cpu(), rows, rtol=0, atol=0)
    print("a DataLoader loop delivers the same rows with and without non_blocking")

# %%
# Measurement
# -----------
# Overlap needs a copy and a kernel that each last long enough to run side by side: next to
# the host's time to queue them, not a few microseconds. So the sizes come from this GPU's
# own rates, measured at the start (``calibrate``): for each of 2, 8, 32 and 128 times the
# host's time to launch one kernel from a module call (2-4 times a bare op's), a batch that
# takes that long to copy from pinned memory and a matmul that takes that long to compute,
# at those rates. The timer synchronises before and after each block of calls, so every
# variant is timed until its copies and kernels have finished. Four comparisons per size,
# each against the same copy without the flag from the same memory: the flag on the same
# stream and on a side stream, from pinned and from pageable memory; and a fifth, the
# overlap itself (below).
gains = {"pinned, same stream": [], "pinned, side stream": [],
         "pageable, same stream": [], "pageable, side stream": []}
# Overlap itself: both copies non_blocking from pinned memory, so neither waits on the
# host; only the side stream's copy can run while the matmul does.
overlap = []
if device.type == "cuda":
    calib = calibrate(device)
    for launches in [2, 8, 32, 128]:
        seconds = launches * calib["launch_s"]  # copy's and matmul's, at these rates
        elements = max(2**10, round(seconds * calib["copy_h2d_pinned"] / 4))
        n = max(64, round((seconds * calib["matmul_float32"] / 2) ** (1 / 3) / 64) * 64)
        mib = elements * 4 / 2**20
        print(f"{launches} launch times: a {mib:.3g} MiB batch, a [{n}, {n}] matmul")
        _, v = make_variants(elements, n)
        for fn in v.values():
            fn()  # warm-up: allocator and cuBLAS
        for memory in ("pinned", "pageable"):
            work = {"bytes": elements * 4, "limit": f"copy_h2d_{memory}"}
            for stream, tail in (("same stream", ""), ("side stream", ", side stream")):
                gains[f"{memory}, {stream}"].append(compare_times(
                    f"{memory}, non_blocking on the {stream} vs blocking, "
                    f"{mib:.3g} MiB",
                    {"blocking": v[f"{memory}, blocking"],
                     "non_blocking": v[f"{memory}, non_blocking{tail}"]},
                    threshold=1.10, device=device, x=mib, budget_s=0.8, work=work))
        overlap.append(compare_times(
            f"pinned, non_blocking: side stream vs same stream, {mib:.3g} MiB",
            {"same stream": v["pinned, non_blocking"],
             "side stream": v["pinned, non_blocking, side stream"]},
            threshold=1.10, device=device, x=mib, budget_s=0.8,
            work={"bytes": elements * 4, "limit": "copy_h2d_pinned"}))

# %%
# Where it pays
# -------------
# The speed-up of each non-blocking variant over the same copy without the flag, against the
# batch size (the matmul grows with it, so that at the calibrated rates both take about as
# long at every size: where a copy on a side stream can gain most).
if device.type == "cuda":
    fig = plot_ratios({**gains, "overlap (pinned, both non_blocking)": overlap},
                      xlabel="batch copied per call (MiB)",
                      title="matmul + host-to-GPU copy per call, sized to this GPU",
                      ylabel="blocking time / non_blocking time")

# %%
# The hazard: reading a non-blocking GPU-to-CPU copy too early
# ------------------------------------------------------------
# The reverse direction has the same flag. The copy waits behind queued kernels; Python does
# not. Reading the destination before a synchronisation can see what was there before.
if device.type == "cuda":
    src = torch.zeros(1 << 20, device=device)        # [1M] on the GPU
    host = torch.zeros(1 << 20).pin_memory()         # [1M], pinned destination
    m = torch.randn(768, 768, device=device) / 28    # [768, 768]
    for _ in range(8):
        m = m @ m                                    # queues some GPU work first
    src.fill_(2.0)
    host.copy_(src, non_blocking=True)
    early = host[-1].item()                          # a host read: no wait for the GPU
    torch.cuda.synchronize()
    late = host[-1].item()
    print(f"read before synchronize: {early}, after: {late}; "
          f"stale read: {early != late}")

# %%
# Verdict
# -------
# The claim is that the flag buys overlap of transfers and kernels "when it's applicable". A
# copy overlaps a kernel only when it is truly asynchronous (a pinned source) and sits on a
# stream of its own: on the kernels' stream it runs after them whatever the flag. What the
# flag saves on the same stream is the host's wait for the copy (the GPU idles while the host
# waits, then catches up), which is not overlap. So the verdict reads the overlap
# comparison alone: the same pinned batch, non_blocking both times, copied on a side stream
# against on the kernels' stream, where only the side stream's copy can run beside the
# matmul. A comparison *gains* when the interval of its speed-up lies above 1.10. It holds if
# the copy overlaps the matmul, gaining at some size; it is wrong if it gains at none. The
# other comparisons (the flag against a blocking copy, from pinned and pageable memory) are
# shown, not judged. Overlap is work on the GPU: a size at which the GPU idled half the time
# or more is shown, labelled, and decides nothing (``about="device"``).
RULE = ("from pinned memory, at sizes that kept the GPU busy at least half the time: "
        "holds if a non_blocking copy on a side stream overlaps the matmul, running "
        ">10% faster (interval above 1.10) than the same non_blocking copy on the "
        "matmul's stream at some batch size; wrong if it does at none (the flag "
        "against a blocking copy, which saves the host's wait and is no overlap: "
        "shown, not judged; host-bound sizes: shown, not judged)")
verdicts = {}
if device.type == "cuda":
    decision = decide(device, [
        ("holds", {"overlap": "any above"}),
        ("wrong", {}),
    ], groups={**gains, "overlap": overlap}, key=overlap[-1], about="device")
    report(decision, RULE)
    verdicts[device.type] = decision
else:
    print("Verdict on CUDA: not measured (no CUDA device in this build)")
RESULT = {"rule": RULE, "verdicts": verdicts, "measurements": [], "skipped": skipped}

# %%
# When not to use it
# ------------------
# The flag is harmless on a host-to-device copy, but from pageable memory the driver stages
# the batch through pinned memory and may wait for the stream: what the call then saves
# depends on the size (the figure's pageable lines) and is not the asynchronous copy the
# article means. Pin the batches (``DataLoader(pin_memory=True)``) for that. Overlapping a
# copy with kernels takes a stream of its own and a ``wait_stream`` each way: the side stream
# waits before writing into memory the compute stream may still use (or the buffer is made on
# the side stream and handed over with ``record_stream``), and the compute stream waits
# before reading the batch. A buffer reused across steps without the first wait is a race.
# Never read a tensor filled by a non-blocking device-to-host copy before a synchronisation
# (``torch.cuda.synchronize()``, an event, or an op that syncs). Pinning costs time and locks
# host RAM: pin once, not per step; ``x.pin_memory().to(device, non_blocking=True)`` on a
# pageable ``x`` is often slower than a plain ``x.to(device)``.
