"""Where training runs: `--device` (default: CUDA when torch sees a GPU, else CPU) and the autocast that goes with it.

Every training entry point (stages.py, fixtures.py, reader.py) takes --device; the model, the batches, the restricted
output vocabulary, the evaluation decoder's forward passes and KV cache (decode.torch_step) and DPO mining/margins all run
on it; export moves the model back to the CPU first (export.write_model_dir). On CUDA, training matmuls run under
bfloat16 autocast (always); on the CPU only where the config asks (TrainConfig.bf16). The same code runs on the CPU
in CI (training/tests/test_device.py) with the device as a parameter; no GPU was available when it was written, so
the CUDA branch is exercised only by those tests' CPU twin.
"""
from __future__ import annotations

import contextlib

import torch


def resolve_device(name: str | None = None) -> torch.device:
    """Returns the torch device for name: None or "auto" = cuda if available else cpu; "cuda" / "cuda:N" need
    a GPU torch can use (a clear error otherwise, never a silent CPU run); "cpu" always works."""
    if name in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise ValueError(f"--device {name!r}: {e}") from e
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {name!r}: torch {torch.__version__} sees no CUDA GPU "
                             "(use --device cpu, or install a CUDA build of torch on a GPU host)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"--device {name!r}: only {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type != "cpu":
        raise ValueError(f"--device {name!r}: only cpu and cuda[:N] are supported")
    return dev


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter (cpu for a model without parameters)."""
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def autocast(device: torch.device, bf16: bool):
    """The training autocast context: bfloat16 on CUDA always, on the CPU only with bf16; else a no-op."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if bf16:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def micro_batches(batch: list, micro: int) -> list[list]:
    """Splits one optimizer batch into micro-batches of at most micro instances (micro <= 0: one)."""
    if micro <= 0 or micro >= len(batch):
        return [batch]
    return [batch[i: i + micro] for i in range(0, len(batch), micro)]


_LIBC = None


def release_free_memory() -> bool:
    """Hands the C heap's free pages back to the system (glibc's malloc_trim(0)); True where it ran.

    A CPU training step frees tensors of a different size each step (prompt lengths vary), and glibc keeps the
    freed pages in its arenas: a reader run grew from 12 GB to 19.5 GB in 15 minutes on the 2-core host without
    holding more tensors (training/results/reader/README.md, "b7"). Trimming returns them; the reader calls it only
    after a step that leaves the process above --trim-above-gb, since trimming every step (like
    MALLOC_MMAP_THRESHOLD_) spends much of the CPU on page faults. A no-op off glibc (macOS, musl)."""
    global _LIBC
    if _LIBC is None:
        import ctypes
        import ctypes.util

        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC = lib if hasattr(lib, "malloc_trim") else False
        except OSError:
            _LIBC = False
    if not _LIBC:
        return False
    _LIBC.malloc_trim(0)
    return True


def rss_gb() -> float | None:
    """The process's resident memory now, in GB (from /proc/self/statm; None where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    import os

    return round(pages * os.sysconf("SC_PAGE_SIZE") / 1e9, 2)
