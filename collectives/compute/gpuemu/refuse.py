"""What the emulated GPUs cannot run, refused at the call with an error naming it (issue
33): never a hang, never a silent CPU fallback that would change the model time.

* `torch.compile` (and `nn.Module.compile`), whatever the backend: its kernels would be
  generated for the CPU and run outside the compute model's per-operation pricing
  (`collectives.compute.opmode`), so the modelled step time would be wrong;
* CUDA graphs (`torch.cuda.CUDAGraph`, `graph`, `make_graphed_callables`,
  `graph_pool_handle`): there is no stream to capture;
* custom CUDA kernels: `torch.utils.cpp_extension.load` / `load_inline` with CUDA sources,
  `CUDAExtension`, jiterator (`torch.cuda.jiterator._create_jit_fn`). A C++ extension
  with CPU sources only still builds (its operations cost nothing in the model, as in a
  CPU script). Triton is not installed with a CPU torch: `import triton` fails naming it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.cuda.jiterator
import torch.utils.cpp_extension as cpp_extension

from collectives.compute.gpuemu.patch import Patches


class Unemulated(NotImplementedError):
    """A call the emulated GPUs cannot serve."""

    def __init__(self, call: str, why: str) -> None:
        super().__init__(f"{call} cannot be emulated under `emu run --gpu`: {why}")
        self.call = call


COMPILE = ("its kernels would be generated for the CPU and escape the GPU compute model; "
           "run the model eagerly (nanoGPT: --compile=False)")
GRAPHS = "CUDA graphs capture GPU streams, and the emulated GPUs have none"
KERNEL = "a custom CUDA kernel cannot run on the emulated GPU (its tensors live on the CPU)"


def refusing(call: str, why: str) -> Callable:
    """A callable (usable as a class too) that raises Unemulated for `call`."""
    def refuse(*_: Any, **__: Any) -> Any:
        raise Unemulated(call, why)
    refuse.__name__ = call.rsplit(".", 1)[-1]
    return refuse


def _cuda_sources(sources: Any) -> bool:
    items = [sources] if isinstance(sources, str) else list(sources or [])
    return any(str(s).endswith((".cu", ".cuh")) for s in items)


def install(patches: Patches) -> None:
    """Put the refusals in place (undone by patches.undo)."""
    patches.set(torch, "compile", refusing("torch.compile", COMPILE))
    patches.set(torch.nn.Module, "compile", refusing("torch.nn.Module.compile", COMPILE))
    for name in ("CUDAGraph", "graph", "make_graphed_callables", "graph_pool_handle"):
        patches.set(torch.cuda, name, refusing(f"torch.cuda.{name}", GRAPHS))
    for name in ("_create_jit_fn", "_create_multi_output_jit_fn"):
        patches.set(torch.cuda.jiterator, name,
                    refusing(f"torch.cuda.jiterator.{name}", KERNEL))
    patches.set(cpp_extension, "CUDAExtension",
                refusing("torch.utils.cpp_extension.CUDAExtension", KERNEL))
    load, load_inline = cpp_extension.load, cpp_extension.load_inline

    def load_(name: str, sources: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("with_cuda") or _cuda_sources(sources):
            raise Unemulated(f"torch.utils.cpp_extension.load({name!r}) of CUDA sources",
                             KERNEL)
        return load(name, sources, *args, **kwargs)

    def load_inline_(name: str, cpp_sources: Any, cuda_sources: Any = None,
                     *args: Any, **kwargs: Any) -> Any:
        if cuda_sources or kwargs.get("with_cuda"):
            raise Unemulated(f"torch.utils.cpp_extension.load_inline({name!r}) with "
                             "cuda_sources", KERNEL)
        return load_inline(name, cpp_sources, cuda_sources, *args, **kwargs)

    patches.set(cpp_extension, "load", load_)
    patches.set(cpp_extension, "load_inline", load_inline_)
