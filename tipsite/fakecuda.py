"""Run a tip's CUDA branch on a machine without a GPU, as far as that can be faked.

``install()`` makes torch report one CUDA device and runs every CUDA tensor on the CPU instead,
so the code a tip runs only under ``torch.cuda.is_available()`` executes, with CUDA's own checks
where they matter for correctness:

* device arguments (``"cuda"``, ``"cuda:0"``, ``torch.device("cuda")``, ``.cuda()``,
  ``.to(device)``) go to the CPU; tensors made there report ``device`` ``cuda:0`` and
  ``is_cuda`` True, and so do the tensors computed from them, until ``.cpu()``/``.to("cpu")``;
  an operation mixing such a tensor with a (non-scalar) CPU tensor raises as CUDA does;
* ``torch.cuda.*`` functions that take a device validate it as CUDA does (e.g.
  ``set_per_process_memory_fraction`` refuses ``torch.device("cuda")`` without an index), then
  act on a bookkeeping of the fake device's memory: the bytes of live CUDA tensors made through
  torch calls (autograd's internal buffers are not seen), with a peak, a reset, and an
  out-of-memory error past ``set_per_process_memory_fraction``; ``memory_reserved``,
  ``max_memory_reserved``, ``memory_stats`` and ``empty_cache`` follow a sketch of the caching
  allocator's segments (``_Segments``), with ``expandable_segments`` read from
  ``PYTORCH_ALLOC_CONF`` or ``PYTORCH_CUDA_ALLOC_CONF`` as CUDA reads it when it initialises;
* float32 convolutions on channels_last inputs round their inputs to TF32, as cuDNN's
  tensor-core kernels for that layout do by default (``torch.backends.cudnn.allow_tf32``), while
  contiguous ones compute in full float32, as the kernels cuDNN picked for NCHW did on an H100:
  comparing the two layouts at a float32 tolerance fails here as it did there. Float32 matmuls
  round to TF32 when ``torch.backends.cuda.matmul.allow_tf32`` (or
  ``set_float32_matmul_precision("high")``) allows it;
* float16/bfloat16 matmuls are computed in float32 and rounded back (fast on a CPU, as Tensor
  Cores accumulate in float32); under ``torch.autocast("cuda", ...)`` matmuls and convolutions
  return the autocast dtype, computed the same way;
* ``set_sync_debug_mode("warn")`` warns on the host-device synchronisations CUDA warns on:
  ``.item()``, ``.tolist()``, ``.cpu()``/``.to("cpu")`` of a CUDA tensor, ``nonzero``, a
  CUDA tensor's truth value, printing one, and a copy to the device from pageable memory or
  without ``non_blocking`` (``pin_memory()`` makes a pinned copy, ``is_pinned()`` knows it);
* ``torch.cuda.get_device_properties`` describes a device of one streaming multiprocessor,
  so work sized by the SM count stays small (``TIPS_FAKECUDA_SMS=132``: an H100's count, for
  the paths that size work by a data-centre GPU);
* ``torch.utils.benchmark`` runs up to 3 calls of each timed block (``TIMED_CALLS``), so warm-ups,
  several calls per round, rounds and time budgets run as on a GPU; the timings mean nothing;
* streams: ``torch.cuda.stream(s)`` makes ``s`` current and restores the stream before,
  ``current_stream()``/``default_stream()`` answer as CUDA's do, ``wait_stream`` checks its
  argument; work still runs at once, in program order;
* a Python child process started with ``PYTORCH_CUDA_ALLOC_CONF`` (or ``PYTORCH_ALLOC_CONF``)
  set runs on the fake device too (a ``sitecustomize`` on ``PYTHONPATH``): a tip comparing
  allocator settings needs a process per setting; other children start as before;
* ``torch.profiler.profile`` reports every top-level aten operator as a host launch
  (``cudaLaunchKernel``) and a CUDA "kernel" of the same span, so GPU busy time can be read (it
  means nothing); with ``TIPS_FAKECUDA_BLIND=1`` it records the launches and no GPU activity, as
  a profiler blind to the GPU does, and every timing on the device must then fail;
* ``torch.compile`` traces with Dynamo and runs the captured graph eagerly (``backend="eager"``):
  Inductor would generate kernels for a GPU that is not there.

Nothing measured under this fake may be published: it exists for ``tests/test_fakecuda.py``.
Standard library and torch only, so the tip runner can load it beside a lone tip.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
import weakref

import torch
from torch.overrides import TorchFunctionMode

NAME = "Fake CUDA device (the CPU, for tests)"
TOTAL_MEMORY = 80 * 2**30
# A GPU of one streaming multiprocessor: a tip that sizes its CUDA work by the SM count (one
# image per SM, as tip_cudnn_benchmark does) gets work a CPU finishes in seconds, through the
# same code path that gives an H100 132 images.
MULTIPROCESSORS = 1
# TIPS_FAKECUDA_SMS=132 makes it report an H100's count instead: the code paths that size work by
# a data-centre GPU (calibrate's large matmuls, a tip's batch per SM) then run, slowly, on the CPU.
SMS_VAR = "TIPS_FAKECUDA_SMS"
# TIPS_FAKECUDA_BLIND=1: a profiler that records the host's launches but no GPU activity, as
# CUPTI does when it cannot see the GPU (after a CUDA-graph capture, or dropped records).
BLIND_VAR = "TIPS_FAKECUDA_BLIND"
# Calls a timer runs per timed block at most (the rest are counted as these took): several, so
# rounds, warm-ups and budgets run as on a GPU, few, so the suite stays short on 2 cores.
TIMED_CALLS = 3
CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")


MiB = 2**20


def _up(n: int, step: int) -> int:
    return -(-n // step) * step


def _expandable_setting() -> bool:
    """``expandable_segments:True`` in the allocator settings, read as CUDA reads them when it
    initialises: ``PYTORCH_ALLOC_CONF``, else ``PYTORCH_CUDA_ALLOC_CONF``."""
    conf = os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or ""
    options = dict(item.split(":", 1) for item in conf.replace(" ", "").split(",") if ":" in item)
    return options.get("expandable_segments") == "True"


class _Segments:
    """A sketch of the caching allocator's bookkeeping, for ``memory_reserved``, ``memory_stats``
    and ``empty_cache`` on the fake device. Each storage takes its size, rounded as the allocator
    rounds it, from a cached segment of its pool with room (free room counts as one piece: no
    slivers); without room the fake "cudaMallocs" a new segment: 2 MiB for small requests, 20 MiB
    for requests under 10 MiB, the rounded request above. With ``expandable_segments:True`` each
    pool is one segment that grows. Past the memory fraction it frees the empty segments and
    retries, as the allocator does. Its figures only exercise a tip's code paths."""

    def __init__(self, expandable: bool = False):
        self.expandable = expandable
        self.segments: list[list] = []  # [size, used, pool]
        self.blocks: dict[int, tuple[list, int]] = {}  # data_ptr -> (segment, rounded bytes)
        self.reserved = self.peak = 0
        self.counts = {"num_device_alloc": 0, "num_device_free": 0, "num_alloc_retries": 0,
                       "segment.all.allocated": 0, "segment.all.freed": 0}

    @staticmethod
    def _rounded(nbytes: int) -> tuple[int, str, int]:
        """(rounded request, pool, size of a new segment for it)."""
        if nbytes <= MiB:
            return max(512, _up(nbytes, 512)), "small", 2 * MiB
        rounded = _up(nbytes, 2 * MiB)
        return rounded, "large", (20 * MiB if nbytes < 10 * MiB else rounded)

    def malloc(self, ptr: int, nbytes: int, limit: float) -> None:
        size, pool, new = self._rounded(nbytes)
        mine = [s for s in self.segments if s[2] == pool]
        if self.expandable and mine:
            segment = mine[0]
            grow = max(0, size - (segment[0] - segment[1]))
            if grow:
                grow = _up(grow, 2 * MiB)
                segment[0] += grow
                self.reserved += grow
                self.counts["num_device_alloc"] += 1
        else:
            fits = [s for s in mine if s[0] - s[1] >= size]
            if fits:
                segment = min(fits, key=lambda s: s[0] - s[1])
            else:
                if self.reserved + new > limit:
                    self.counts["num_alloc_retries"] += 1
                    self.empty_cache()
                segment = [new, 0, pool]
                self.segments.append(segment)
                self.reserved += new
                self.counts["num_device_alloc"] += 1
                self.counts["segment.all.allocated"] += 1
        segment[1] += size
        self.blocks[ptr] = (segment, size)
        self.peak = max(self.peak, self.reserved)

    def free(self, ptr: int) -> None:
        segment, size = self.blocks.pop(ptr, (None, 0))
        if segment is not None:
            segment[1] -= size

    def empty_cache(self) -> None:
        """Return unused cached memory: empty segments (an expandable one shrinks to its use)."""
        for segment in list(self.segments):
            spare = segment[0] - _up(segment[1], 2 * MiB) if self.expandable else 0
            if spare > 0 or (not self.expandable and segment[1] == 0):
                spare = spare or segment[0]
                segment[0] -= spare
                self.reserved -= spare
                self.counts["num_device_free"] += 1
        self.counts["segment.all.freed"] += sum(1 for s in self.segments if s[0] == 0)
        self.segments = [segment for segment in self.segments if segment[0] > 0]

    def stats(self, allocated: int, peak: int) -> dict:
        """What ``torch.cuda.memory_stats()`` reports, for the keys the fake keeps."""
        return {"allocated_bytes.all.current": allocated, "allocated_bytes.all.peak": peak,
                "reserved_bytes.all.current": self.reserved, "reserved_bytes.all.peak": self.peak,
                "segment.all.current": len(self.segments), "num_ooms": 0, **self.counts}


class _Memory:
    """The fake device's allocations: live CUDA tensors' storages, counted once each."""

    def __init__(self):
        self.storages: dict[int, list] = {}  # data_ptr -> [nbytes, live tensor objects]
        self.allocated = 0
        self.peak = 0
        self.fraction = 1.0
        self.segments = _Segments()

    def add(self, tensor: torch.Tensor) -> None:
        try:
            storage = tensor.untyped_storage()
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
        except (RuntimeError, NotImplementedError):
            return
        entry = self.storages.get(ptr)
        if entry is None:
            limit = self.fraction * TOTAL_MEMORY
            if self.allocated + nbytes > limit:
                raise torch.OutOfMemoryError(
                    f"CUDA out of memory (fake device). Tried to allocate {nbytes} bytes; "
                    f"{self.allocated} bytes allocated, limit {int(limit)} bytes")
            entry = self.storages[ptr] = [nbytes, 0]
            self.segments.malloc(ptr, nbytes, limit)
            self.allocated += nbytes
            self.peak = max(self.peak, self.allocated)
        entry[1] += 1
        weakref.finalize(tensor, self._release, ptr)

    def _release(self, ptr: int) -> None:
        entry = self.storages.get(ptr)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            _LOADED.discard(ptr)
            del self.storages[ptr]
            self.segments.free(ptr)
            self.allocated -= entry[0]


MEMORY = _Memory()
_SYNC_MODE = [0]


def _is_cuda_device(value) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cuda"
    if isinstance(value, str):
        return value.split(":")[0] == "cuda"
    return False


def _tagged(t) -> bool:
    return isinstance(t, torch.Tensor) and getattr(t, "_fake_cuda", False)


def _tf32(t: torch.Tensor) -> torch.Tensor:
    """Round float32 to TF32's 10-bit mantissa (round to nearest), as Tensor Cores read it."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
        return t
    bits = t.detach().contiguous().view(torch.int32)
    rounded = ((bits + 0x1000) & ~0x1FFF).view(torch.float32).view(t.shape)
    return rounded if not t.requires_grad else t + (rounded - t).detach()


def _flatten(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _flatten(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _flatten(o)


_CONVS = {torch.conv1d, torch.conv2d, torch.conv3d, torch.nn.functional.conv1d,
          torch.nn.functional.conv2d, torch.nn.functional.conv3d, torch.convolution,
          torch.conv_transpose1d, torch.conv_transpose2d, torch.conv_transpose3d}
_MATMULS = {torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.baddbmm, torch.nn.functional.linear,
            torch.Tensor.matmul, torch.Tensor.mm, torch.Tensor.bmm, torch.Tensor.__matmul__,
            torch.Tensor.__rmatmul__, torch.einsum}
_SYNCING = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.nonzero,
            torch.Tensor.nonzero, torch.Tensor.__repr__, torch.Tensor.__format__,
            torch.Tensor.numpy}
_DESCRIPTORS = {"device": torch.Tensor.device, "is_cuda": torch.Tensor.is_cuda,
                "data": torch.Tensor.data}
# Operations CUDA allows between a CUDA tensor and a (non-scalar) CPU tensor.
_CROSS_DEVICE = {torch.Tensor.to, torch.Tensor.copy_, torch.Tensor.cpu, torch.Tensor.cuda,
                 torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.new_tensor,
                 torch.Tensor.set_, torch.Tensor.type_as}


def _matmul_tf32() -> bool:
    # CUDA's own setting, which set_float32_matmul_precision also sets; the backend-free
    # getter raises once code has mixed the two APIs (calibrate sets allow_tf32 while a
    # tip's precision is "high"), where a real CUDA matmul just reads this one
    return torch.backends.cuda.matmul.allow_tf32


class FakeCudaMode(TorchFunctionMode):
    """Runs CUDA tensors on the CPU, tagging them so they still look like CUDA tensors."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        owner = getattr(func, "__self__", None)
        if owner is _DESCRIPTORS["device"] and args and _tagged(args[0]):
            return CUDA
        if owner is _DESCRIPTORS["is_cuda"] and args and _tagged(args[0]):
            return True
        if owner is _DESCRIPTORS["data"] and getattr(func, "__name__", "") == "__set__" and len(args) == 2:
            # module.to(device) swaps each parameter's data: the parameter moves with it
            out = func(*args, **kwargs)
            if _tagged(args[1]):
                _tag_outputs(args[0])
            elif _tagged(args[0]):
                args[0]._fake_cuda = False
            return out
        to_cuda = False
        # device arguments
        if "device" in kwargs and _is_cuda_device(kwargs["device"]):
            kwargs["device"] = CPU
            to_cuda = True
        if func in (torch.Tensor.cuda,):
            to_cuda = True
            func, args = torch.Tensor.to, (args[0], CPU)
            kwargs.pop("device", None)
            kwargs = {k: v for k, v in kwargs.items() if k in ("non_blocking", "memory_format")}
        elif func is torch.Tensor.to:
            rest = list(args[1:])
            for i, a in enumerate(rest):
                if _is_cuda_device(a) or (isinstance(a, int) and not isinstance(a, bool)):
                    rest[i], to_cuda = CPU, True
                elif isinstance(a, torch.Tensor) and _tagged(a):
                    to_cuda = True
            args = (args[0], *rest)
        elif func in (torch.Tensor.pin_memory,):
            return _pinned_copy(args[0])
        elif func in (torch.Tensor.is_pinned,):
            return bool(getattr(args[0], "_fake_pinned", False))
        leaving = (func is torch.Tensor.cpu or (func is torch.Tensor.to and not to_cuda and any(
            a == "cpu" or a == CPU for a in list(args[1:]) + [kwargs.get("device")])))
        tensors = list(_flatten((args, kwargs)))
        inputs_cuda = any(_tagged(t) for t in tensors)
        name = getattr(func, "__name__", "")
        internal = (name.startswith("_") and not name.startswith("__")) or name in ("__get__", "__set__")
        if inputs_cuda and func not in _CROSS_DEVICE and not internal and not to_cuda and not leaving:
            host = [t for t in tensors if not _tagged(t) and t.dim() > 0 and not t.is_meta]
            if host:
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at least two "
                    "devices, cuda:0 and cpu! (fake CUDA device)")
        # a host-to-device copy waits for the host unless it is pinned and non-blocking
        uploading = (to_cuda and func is torch.Tensor.to and args and isinstance(args[0], torch.Tensor)
                     and not _tagged(args[0]) and not (getattr(args[0], "_fake_pinned", False)
                                                       and kwargs.get("non_blocking", False)))
        if _SYNC_MODE[0] and ((inputs_cuda and (func in _SYNCING or leaving)) or uploading):
            message = "called a synchronizing CUDA operation (fake device)"
            if _SYNC_MODE[0] >= 2:
                raise RuntimeError(message)
            warnings.warn(message, UserWarning, stacklevel=3)
        if (func in _CONVS and torch.backends.cudnn.allow_tf32 and inputs_cuda and args
                and isinstance(args[0], torch.Tensor) and args[0].dim() == 4
                and args[0].is_contiguous(memory_format=torch.channels_last)
                and not args[0].is_contiguous()):
            args = tuple(_tf32(a) for a in args)
        if _AUTOCAST and _AUTOCAST[-1] is not None and inputs_cuda and func in _MATMULS | _CONVS:
            # CUDA autocast: float32 inputs, a half-precision result (computed in float32 here,
            # as Tensor Cores accumulate, instead of the CPU's slow half-precision kernels)
            up = tuple(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                       for a in args)
            return _tag_outputs(func(*up, **kwargs).to(_AUTOCAST[-1]))
        if func in _MATMULS and inputs_cuda:
            halves = [a for a in _flatten(args) if a.dtype in (torch.float16, torch.bfloat16)]
            if halves:
                dtype = halves[0].dtype
                up = tuple(a.float() if isinstance(a, torch.Tensor) and a.dtype == dtype else a
                           for a in args)
                return _tag_outputs(func(*up, **kwargs).to(dtype))
            if _matmul_tf32():
                args = tuple(_tf32(a) for a in args)
        out = func(*args, **kwargs)
        if leaving:
            if isinstance(out, torch.Tensor) and args and out is args[0]:
                out = out.view_as(out)  # on the CPU already: a new, untagged alias
            return out
        if to_cuda and isinstance(out, torch.Tensor) and args and out is args[0] and not _tagged(out):
            out = out.clone()  # a copy to the device is a new tensor; the host tensor stays a host one
        if to_cuda or inputs_cuda:
            _tag_outputs(out)
        return out


def _tag_outputs(out):
    """Mark tensors as living on the fake CUDA device, and count their memory there."""
    for t in _flatten(out):
        if not getattr(t, "_fake_cuda", False):
            with contextlib.suppress(AttributeError, RuntimeError):
                t._fake_cuda = True
                MEMORY.add(t)
    return out


class _Event:
    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def elapsed_time(self, end):
        return (end.t - self.t) * 1000.0


class _Stream:
    """A stream: work runs at once on the CPU, so its order is the program's; what is kept is
    which stream is current (``torch.cuda.stream(s)`` sets it and restores the one before) and
    which streams and events each waited for, for a test to read."""

    def __init__(self, device=None, priority=0, **kwargs):
        self.device = CUDA
        self.priority = priority
        self.waited: list = []

    def synchronize(self):
        pass

    def wait_stream(self, other):
        if not isinstance(other, _Stream):
            raise TypeError(f"wait_stream expects a torch.cuda.Stream, got {type(other).__name__}")
        self.waited.append(other)

    def wait_event(self, event):
        self.waited.append(event)

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)

    def record_event(self, event=None):
        event = event or _Event()
        event.record()
        return event

    def query(self):
        return True

    def is_capturing(self):
        return False


class _Properties:
    name = NAME
    major, minor = 9, 0
    total_memory = TOTAL_MEMORY

    @property
    def multi_processor_count(self) -> int:
        return int(os.environ.get(SMS_VAR) or MULTIPROCESSORS)

    def __repr__(self):
        return f"_CudaDeviceProperties(name='{NAME}', major=9, minor=0, total_memory={TOTAL_MEMORY})"


_DEFAULT_STREAM = [None]
_CURRENT_STREAM: list = []  # the streams torch.cuda.stream() made current, innermost last


def _default_stream(device=None):
    _index(device)
    if _DEFAULT_STREAM[0] is None:
        _DEFAULT_STREAM[0] = _Stream()
    return _DEFAULT_STREAM[0]


def _current_stream(device=None):
    _index(device)
    return _CURRENT_STREAM[-1] if _CURRENT_STREAM else _default_stream()


@contextlib.contextmanager
def _use_stream(stream=None):
    if stream is None:
        yield
        return
    if not isinstance(stream, _Stream):
        raise TypeError(f"torch.cuda.stream expects a torch.cuda.Stream, got {type(stream).__name__}")
    _CURRENT_STREAM.append(stream)
    try:
        yield stream
    finally:
        _CURRENT_STREAM.pop()


def _index(device=None, optional=True) -> int:
    """Validate a device argument exactly as torch.cuda does; the fake has one device, 0."""
    from torch.cuda._utils import _get_device_index

    index = _get_device_index(device, optional=optional)
    if index not in (0, -1) and not (optional and index is None):
        raise RuntimeError(f"Invalid device index {index}: the fake has one CUDA device")
    return 0


def _set_fraction(fraction, device=None):
    _index(device, optional=False)  # as torch.cuda: an index is required (or an int)
    if not isinstance(fraction, float) or not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    MEMORY.fraction = fraction


def _sync_debug_mode(mode):
    if isinstance(mode, str):
        mode = {"default": 0, "warn": 1, "error": 2}[mode]
    _SYNC_MODE[0] = int(mode)


_AUTOCAST: list = []  # the dtype of each active CUDA autocast region (None: disabled)


def _pinned_copy(t: torch.Tensor) -> torch.Tensor:
    out = t.clone()
    out._fake_pinned = True
    return out


def _patch_autocast() -> None:
    """``autocast("cuda", ...)`` (and the deprecated ``torch.cuda.amp.autocast``): matmuls and
    convolutions of fake CUDA tensors return its dtype (see FakeCudaMode); the CPU's own
    autocast stays off, its half-precision kernels are far slower than a GPU's."""
    cls = torch.amp.autocast_mode.autocast
    real_init, real_enter, real_exit = cls.__init__, cls.__enter__, cls.__exit__

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        self._fake = device_type == "cuda"
        if self._fake:
            self._fake_dtype = (dtype or torch.float16) if enabled else None
            real_init(self, "cpu", dtype=torch.bfloat16, enabled=False)
        else:
            real_init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    def __enter__(self):
        if getattr(self, "_fake", False):
            _AUTOCAST.append(self._fake_dtype)
        return real_enter(self)

    def __exit__(self, *exc):
        if getattr(self, "_fake", False) and _AUTOCAST:
            _AUTOCAST.pop()
        return real_exit(self, *exc)

    cls.__init__, cls.__enter__, cls.__exit__ = __init__, __enter__, __exit__


_LOADED: set = set()  # data_ptrs of storages torch.load restored to the fake device


def _patch_serialization() -> None:
    """torch.save tags fake-CUDA storages 'cuda:0'; torch.load restores 'cuda' tags (validated
    as torch does) to CPU storages whose tensors come back as fake-CUDA tensors."""
    import torch.serialization as ser

    def tagger(storage):
        with contextlib.suppress(RuntimeError, NotImplementedError, AttributeError):
            if storage.data_ptr() in MEMORY.storages:
                return "cuda:0"
        return None

    def deserializer(obj, location):
        if location.startswith("cuda"):
            ser._validate_device(location, "cuda")
            _LOADED.add(obj.data_ptr())
            return obj
        return None

    ser.register_package(1, tagger, deserializer)
    real_state = torch._utils._get_obj_state

    def _get_obj_state(obj):  # the fake's tag is not part of a tensor's pickled state
        state = real_state(obj)
        if isinstance(state, dict) and "_fake_cuda" in state:
            state = {k: v for k, v in state.items() if k != "_fake_cuda"}
        return state

    torch._utils._get_obj_state = _get_obj_state
    real_rebuild = torch._utils._rebuild_tensor

    def _rebuild_tensor(storage, storage_offset, size, stride):
        out = real_rebuild(storage, storage_offset, size, stride)
        if storage._untyped_storage.data_ptr() in _LOADED:
            _tag_outputs(out)  # a tensor torch.load rebuilt on the fake device
        return out

    torch._utils._rebuild_tensor = _rebuild_tensor


def _profiler_with_fake_kernels():
    """``torch.profiler.profile`` whose events include the fake device's "kernels": every
    outermost aten operator the CPU ran (inside a ``record_function`` label too), reported as
    a CUDA interval of the same span, and, as a GPU's profile has them, each outermost label
    as a CUDA user annotation over its span; so the code that reads GPU busy time
    (tipsite/tipkit.py ``device_busy``) runs; its figures mean nothing."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    class _Kernel:
        def __init__(self, event, label=False):
            self.name, self.time_range, self.device_type = event.name, event.time_range, DeviceType.CUDA
            self.is_user_annotation = label

    class _Launch:  # the host's runtime call that queued a kernel, as CUPTI records it
        def __init__(self, event):
            self.name, self.time_range, self.device_type = "cudaLaunchKernel", event.time_range, DeviceType.CPU
            self.is_user_annotation = False

    def outermost_aten(event):
        parent = getattr(event, "cpu_parent", None)
        while parent is not None:
            if parent.name.startswith("aten::"):
                return False
            parent = getattr(parent, "cpu_parent", None)
        return event.name.startswith("aten::")

    class FakeProfile(profile):
        def __init__(self, *args, activities=None, **kwargs):
            activities = [a for a in (activities or [ProfilerActivity.CPU]) if a != ProfilerActivity.CUDA]
            super().__init__(*args, activities=activities or [ProfilerActivity.CPU], **kwargs)

        def events(self):
            found = super().events()
            ops = [e for e in found if outermost_aten(e)]
            launches = [_Launch(e) for e in ops]
            if os.environ.get(BLIND_VAR):  # launches seen, no GPU activity recorded
                return [*found, *launches]
            kernels = [_Kernel(e) for e in ops]
            labels = [_Kernel(e, label=True) for e in found
                      if getattr(e, "is_user_annotation", False) and getattr(e, "cpu_parent", None) is None]
            return [*found, *launches, *kernels, *labels]

    return FakeProfile


def _timer_few():
    """``Timer.timeit(number)`` runs up to TIMED_CALLS of the ``number`` calls and reports their
    time per call; ``blocked_autorange`` runs TIMED_CALLS. So a comparison's warm-up, its
    doubling of the calls per round, its rounds and its time budget all run as on a GPU, with
    several calls a round, while the suite stays short."""
    from torch.utils import benchmark

    def run(self, number):
        number = max(1, min(int(number), TIMED_CALLS))
        start = time.perf_counter()
        self._timeit(number)
        elapsed = max(time.perf_counter() - start, 1e-9)
        return benchmark.Measurement(number_per_run=number, raw_times=[elapsed], task_spec=self._task_spec)

    def blocked_autorange(self, callback=None, min_run_time=0.2):
        return run(self, TIMED_CALLS)

    def timeit(self, number=1000000):
        return run(self, number)

    return blocked_autorange, timeit


def _reset_peaks() -> None:
    MEMORY.peak = MEMORY.allocated
    MEMORY.segments.peak = MEMORY.segments.reserved


SITE_VAR = "TIPS_FAKECUDA_SITE"  # the folder of the sitecustomize below, once written
_SITECUSTOMIZE = """\
# Written by fakecuda.py: a Python child that sets the allocator's variables runs on the fake
# CUDA device too; other children start as they would.
import os
import sys

if os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF"):
    import importlib.util

    spec = importlib.util.spec_from_file_location("fakecuda", {path!r})
    fakecuda = importlib.util.module_from_spec(spec)
    sys.modules["fakecuda"] = fakecuda
    spec.loader.exec_module(fakecuda)
    fakecuda.install()
"""


def _children_inherit_the_fake() -> None:
    """A Python child process started with ``PYTORCH_CUDA_ALLOC_CONF`` (or
    ``PYTORCH_ALLOC_CONF``) in its environment runs on the fake device too, its allocator
    settings read from that variable: a tip comparing allocator settings starts one process per
    setting, since CUDA reads them when it initialises. A ``sitecustomize`` module put first on
    ``PYTHONPATH`` installs this fake in such a child; other children start as before."""
    import atexit
    import shutil
    import tempfile

    folder = os.environ.get(SITE_VAR)
    if folder and os.path.isfile(os.path.join(folder, "sitecustomize.py")):
        return
    folder = tempfile.mkdtemp(prefix="fakecuda-site-")
    atexit.register(shutil.rmtree, folder, True)
    with open(os.path.join(folder, "sitecustomize.py"), "w", encoding="utf-8") as fh:
        fh.write(_SITECUSTOMIZE.format(path=os.path.abspath(__file__)))
    os.environ[SITE_VAR] = folder
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (folder, os.environ.get("PYTHONPATH")) if p)


def install() -> FakeCudaMode:
    """Patch torch so that it reports one CUDA device, backed by the CPU. Returns the mode."""
    cuda = torch.cuda
    MEMORY.segments = _Segments(expandable=_expandable_setting())  # read as CUDA initialises
    patches = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda device: _index(device),
        "is_initialized": lambda: True,
        "init": lambda: None,
        "get_device_name": lambda device=None: (_index(device), NAME)[1],
        "get_device_capability": lambda device=None: (_index(device), (9, 0))[1],
        "get_device_properties": lambda device=None: (_index(device), _Properties())[1],
        "synchronize": lambda device=None: (_index(device), None)[1],
        "empty_cache": lambda: MEMORY.segments.empty_cache(),
        "memory_allocated": lambda device=None: (_index(device), MEMORY.allocated)[1],
        "max_memory_allocated": lambda device=None: (_index(device), MEMORY.peak)[1],
        "memory_reserved": lambda device=None: (_index(device), MEMORY.segments.reserved)[1],
        "max_memory_reserved": lambda device=None: (_index(device), MEMORY.segments.peak)[1],
        "memory_stats": lambda device=None: (_index(device), MEMORY.segments.stats(
            MEMORY.allocated, MEMORY.peak))[1],
        "reset_peak_memory_stats": lambda device=None: (_index(device), _reset_peaks())[1],
        "reset_max_memory_allocated": lambda device=None: (_index(device), setattr(MEMORY, "peak", MEMORY.allocated))[1],
        "mem_get_info": lambda device=None: (_index(device), (TOTAL_MEMORY - MEMORY.allocated, TOTAL_MEMORY))[1],
        "set_per_process_memory_fraction": _set_fraction,
        "set_sync_debug_mode": _sync_debug_mode,
        "get_sync_debug_mode": lambda: _SYNC_MODE[0],
        "Event": _Event,
        "Stream": _Stream,
        "current_stream": _current_stream,
        "default_stream": _default_stream,
        "stream": _use_stream,
        "set_stream": lambda stream: _CURRENT_STREAM.append(stream),
        "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
        "is_current_stream_capturing": lambda: False,
        # torch.compile saves and restores the CUDA generator's state around what it traces
        "get_rng_state": lambda device="cuda": torch.get_rng_state(),
        "set_rng_state": lambda new_state, device="cuda": None,
        "get_rng_state_all": lambda: [torch.get_rng_state()],
        "set_rng_state_all": lambda new_states: None,
    }
    for name, value in patches.items():
        setattr(cuda, name, value)
    if hasattr(torch, "accelerator"):
        torch.accelerator.is_available = lambda: True
        torch.accelerator.current_accelerator = lambda check_available=False: torch.device("cuda")
        torch.accelerator.device_count = lambda: 1
        torch.accelerator.synchronize = lambda device=None: None
        # its own function: torch.compile registers one handler per function object, and the
        # same object under torch.cuda and torch.accelerator fails "Handler already registered"
        torch.accelerator.current_stream = lambda device=None: _current_stream(device)
        torch.accelerator.current_device_index = lambda: 0
        torch.accelerator.set_device_index = lambda device: _index(device)
    _patch_serialization()
    _patch_autocast()
    # Parameter(...) and Variable(...) wrap a tensor in a new Python object: it stays on the device
    for cls in (torch.nn.Parameter, torch.autograd.Variable):
        real_new = cls.__new__

        def new(kind, *args, _real=real_new, **kwargs):
            out = _real(kind, *args, **kwargs)
            if any(_tagged(t) for t in _flatten((args, kwargs))):
                _tag_outputs(out)
            return out

        cls.__new__ = new
    # modes are per thread: the DataLoader's pinning thread sees the methods themselves
    torch.Tensor.pin_memory = lambda self, device=None: _pinned_copy(self)
    torch.Tensor.is_pinned = lambda self, device=None: bool(getattr(self, "_fake_pinned", False))
    real_compile = torch.compile

    def compile_eagerly(model=None, **kwargs):
        # Inductor would generate kernels for a GPU that is not there, and Dynamo cannot trace
        # through this module's torch-function mode: compile with the "eager" backend and run the
        # compiled code with the mode set aside, tagging its outputs as the inputs were.
        from torch.overrides import _pop_mode_temporarily

        kwargs["backend"] = "eager"
        kwargs.pop("mode", None)
        kwargs.pop("options", None)
        if model is None:
            return lambda fn: compile_eagerly(fn, **kwargs)
        compiled = real_compile(model, **kwargs)
        target = compiled.forward if isinstance(compiled, torch.nn.Module) else compiled

        def run(*args, **kw):
            on_cuda = isinstance(compiled, torch.nn.Module) and any(
                _tagged(p) for p in compiled.parameters())
            on_cuda = on_cuda or any(_tagged(t) for t in _flatten((args, kw)))
            with _pop_mode_temporarily():
                out = target(*args, **kw)
            return _tag_outputs(out) if on_cuda else out

        if isinstance(compiled, torch.nn.Module):
            compiled.forward = run
            return compiled
        return run

    torch.compile = compile_eagerly
    from torch.utils import benchmark

    benchmark.Timer.blocked_autorange, benchmark.Timer.timeit = _timer_few()
    _children_inherit_the_fake()
    torch.profiler.profile = _profiler_with_fake_kernels()
    torch.profiler.supported_activities = lambda: {torch.profiler.ProfilerActivity.CPU,
                                                   torch.profiler.ProfilerActivity.CUDA}
    mode = FakeCudaMode()
    mode.__enter__()
    return mode
