"""The emulated CUDA devices of `emu run --gpu` (issue 33): the API surface as a table of
calls and what they do, inside `emulated_gpus` (installed and removed in this process),
and the example GPU scripts on a local job (tests/unit/localjob.py)."""

import json
import os
import time

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

from collectives.compute.gpuemu import emulated_gpus, placement
from collectives.compute.gpuemu.devices import DeviceError
from collectives.compute.gpuemu.refuse import Unemulated
from collectives.compute.gpuemu.timing import Event
from tests.unit.localjob import ROOT, run_ranks

ENV = {"LOCAL_WORLD_SIZE": "4", "EMU_TDF": "1000"}
CPU = torch.device("cpu")


@pytest.fixture
def gpus():
    with emulated_gpus("h100", ENV) as devices:
        yield devices


#: call -> what it answers on the emulated host of 4 H100s
ANSWERS = [
    ("is_available", lambda: torch.cuda.is_available(), True),
    ("device_count", lambda: torch.cuda.device_count(), 4),
    ("set_device + current_device", lambda: (torch.cuda.set_device(2),
                                              torch.cuda.current_device())[1], 2),
    ("set_device('cuda:3')", lambda: (torch.cuda.set_device("cuda:3"),
                                      torch.cuda.current_device())[1], 3),
    ("device(i) context", lambda: _inside(torch.cuda.device(1), torch.cuda.current_device), 1),
    ("get_device_name", lambda: torch.cuda.get_device_name(0),
     "NVIDIA H100 80GB HBM3 (emulated by emu)"),
    ("get_device_capability", lambda: torch.cuda.get_device_capability(), (9, 0)),
    ("get_device_properties", lambda: (torch.cuda.get_device_properties(1).total_memory,
                                       torch.cuda.get_device_properties(1).multi_processor_count),
     (80 * 2**30, 132)),
    ("is_bf16_supported", lambda: torch.cuda.is_bf16_supported(), True),
    ("synchronize", lambda: torch.cuda.synchronize(), None),
    ("stream query", lambda: torch.cuda.current_stream().query(), True),
    ("torch.accelerator", lambda: (torch.accelerator.is_available(),
                                   torch.accelerator.device_count(),
                                   torch.accelerator.current_accelerator().type),
     (True, 4, "cuda")),
    ("factory device='cuda'", lambda: torch.zeros(2, device="cuda").device, CPU),
    ("factory device=cuda:1 object", lambda: torch.ones(2, device=torch.device("cuda", 1)).device,
     CPU),
    ("factory device=int", lambda: torch.empty(2, device=0).device, CPU),
    ("with torch.device('cuda')", lambda: _inside(torch.device("cuda"),
                                                  lambda: torch.ones(1).device), CPU),
    ("x.to('cuda:1') is x", lambda: (lambda x: x.to("cuda:1") is x)(torch.ones(1)), True),
    ("x.to(1, dtype)", lambda: torch.ones(1).to(1, torch.float16).dtype, torch.float16),
    ("x.cuda() is x", lambda: (lambda x: x.cuda() is x)(torch.ones(1)), True),
    ("x.pin_memory() is x", lambda: (lambda x: x.pin_memory() is x)(torch.ones(1)), True),
    ("x.is_cuda (the truth)", lambda: torch.ones(1).cuda().is_cuda, False),
    ("module.to(i)", lambda: next(torch.nn.Linear(2, 2).to(3).parameters()).device, CPU),
    ("module.cuda()", lambda: next(torch.nn.Linear(2, 2).cuda().parameters()).device, CPU),
    ("nn.Linear(device='cuda')", lambda: torch.nn.Linear(2, 2, device="cuda").weight.device, CPU),
    ("autocast('cuda', bf16)", lambda: _autocast_dtype(), torch.bfloat16),
    ("memory_allocated >= 0", lambda: torch.cuda.memory_allocated() >= 0, True),
    ("mem_get_info total", lambda: torch.cuda.mem_get_info()[1], 80 * 2**30),
    ("manual_seed is a no-op", lambda: torch.cuda.manual_seed_all(3), None),
]


def _inside(ctx, call):
    with ctx:
        return call()


def _autocast_dtype():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return torch.nn.Linear(4, 4)(torch.ones(2, 4, device="cuda")).dtype


@pytest.mark.parametrize("what, call, want", ANSWERS, ids=[a[0] for a in ANSWERS])
def test_the_emulated_cuda_api_answers(gpus, what, call, want):
    assert call() == want


#: call -> the error it raises, and what the message names
REFUSED = [
    ("set_device(4)", lambda: torch.cuda.set_device(4), DeviceError, "invalid device ordinal"),
    ("device='cuda:7'", lambda: torch.zeros(1, device="cuda:7"), DeviceError, "cuda:7"),
    ("x.to('cuda:4')", lambda: torch.ones(1).to("cuda:4"), DeviceError, "cuda:4"),
    ("torch.compile", lambda: torch.compile(torch.nn.Linear(2, 2)), Unemulated, "torch.compile"),
    ("Module.compile", lambda: torch.nn.Linear(2, 2).compile(), Unemulated, "compile"),
    ("CUDAGraph", lambda: torch.cuda.CUDAGraph(), Unemulated, "torch.cuda.CUDAGraph"),
    ("cuda.graph", lambda: torch.cuda.graph(None), Unemulated, "torch.cuda.graph"),
    ("make_graphed_callables", lambda: torch.cuda.make_graphed_callables(None, ()),
     Unemulated, "make_graphed_callables"),
    ("load_inline cuda", lambda: torch.utils.cpp_extension.load_inline(
        "k", "", cuda_sources="__global__ void k() {}"), Unemulated, "load_inline('k')"),
    ("load .cu", lambda: torch.utils.cpp_extension.load("k", ["k.cu"]), Unemulated, "load('k')"),
    ("CUDAExtension", lambda: torch.utils.cpp_extension.CUDAExtension("k", []), Unemulated,
     "CUDAExtension"),
    ("jiterator", lambda: torch.cuda.jiterator._create_jit_fn("code"), Unemulated, "jiterator"),
    ("elapsed_time without timing", lambda: Event().elapsed_time(Event()), RuntimeError,
     "enable_timing"),
]


@pytest.mark.parametrize("what, call, err, names", REFUSED, ids=[r[0] for r in REFUSED])
def test_what_cannot_be_emulated_fails_at_once_naming_it(gpus, what, call, err, names):
    import torch.utils.cpp_extension  # noqa: F401 (the patched module)
    with pytest.raises(err, match=names.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_events_measure_model_time(gpus):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    time.sleep(0.05)
    end.record()
    ms = start.elapsed_time(end)
    assert 0.05 <= ms < 0.5  # 50 ms lab at TDF 1000: 0.05 model ms


def test_ddp_device_ids_are_checked_and_dropped(gpus, monkeypatch):
    """The wrapper around a stand-in DDP.__init__ (a real DDP needs a process group)."""
    seen = {}
    def fake(self, module, device_ids=None, output_device=None, **kw):
        seen.update(device_ids=device_ids, output_device=output_device)
    monkeypatch.setattr(DistributedDataParallel, "__init__", fake)
    init = placement.ddp_init(gpus)
    init(object.__new__(DistributedDataParallel), torch.nn.Linear(2, 2), [1], 1)
    assert seen == {"device_ids": None, "output_device": None}
    with pytest.raises(DeviceError):
        init(object.__new__(DistributedDataParallel), torch.nn.Linear(2, 2), device_ids=[5])


def test_torch_load_maps_cuda_locations_to_the_cpu(gpus, tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "ck.pt")
    assert torch.load(tmp_path / "ck.pt", map_location="cuda:1")["w"].device == CPU


def test_everything_is_put_back():
    before = (torch.cuda.is_available, torch.Tensor.to, torch.compile, torch.load)
    with emulated_gpus("h100", ENV):
        assert torch.cuda.is_available()
    assert (torch.cuda.is_available, torch.Tensor.to, torch.compile, torch.load) == before
    with pytest.raises((AssertionError, RuntimeError)):
        torch.zeros(1, device="cuda")


def test_a_torchrun_tutorial_script_trains_and_matches(tmp_path):
    run_ranks(2, [str(ROOT / "examples" / "gpu" / "ddp_torchrun.py"), "1", "1",
                  "--batch_size", "32"], tmp_path, cwd=tmp_path,
              env_extra={"EMU_GPU_MODEL": "h100"})
    res = json.loads((tmp_path / "results" / "ddp_torchrun.json").read_text())
    assert res["ok"] and res["device"] == "cpu" and res["device_count"] == 2
    assert res["device_name"].endswith("(emulated by emu)")
    rec = json.loads((tmp_path / "emu-rank0-g0.json").read_text())
    assert rec["issued"]["allreduce"]["bytes"] == res["steps"] * res["grad_bytes"]


def test_a_custom_cuda_kernel_fails_the_rank_naming_it(tmp_path):
    out = run_ranks(1, [str(ROOT / "examples" / "gpu" / "amp_train.py"), "--custom-kernel"],
                    tmp_path, cwd=tmp_path, env_extra={"EMU_GPU_MODEL": "h100"}, check=False)
    text = json.dumps(out)
    assert "load_inline('fused_gelu') with cuda_sources cannot be emulated" in text


def test_without_a_gpu_model_cuda_is_absent(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import torch\nprint('available', torch.cuda.is_available())\n")
    out = run_ranks(1, [str(script)], tmp_path, cwd=tmp_path, env_extra={"EMU_GPU_MODEL": "none"})
    assert "available False" in json.dumps(out)
