"""The GPUs a plan can target: memory and peak dense throughput, from NVIDIA's datasheets.

``memory_mib`` is the total memory as ``nvidia-smi`` reports it; ``bf16_tflops`` / ``tf32_tflops`` are the
dense tensor-core peaks (no structured sparsity), ``fp32_tflops`` the CUDA cores' fp32 peak (an fp32 run
without TF32: PyTorch's default for matrix products). ``cublas_workspace_mib`` is the cuBLAS workspace PyTorch
takes from its caching allocator for the training stream: ``CUBLAS_WORKSPACE_CONFIG``'s default of 8 x 4 MiB
on Hopper and 2 x 4 MiB + 8 x 16 KiB on earlier GPUs (PyTorch's CUDA notes, "cuBLAS workspaces").
"""

from __future__ import annotations

from dataclasses import dataclass

from mlatr.errors import MlatrError


@dataclass(frozen=True)
class GPU:
    name: str
    memory_mib: int
    bf16_tflops: float
    tf32_tflops: float
    hopper: bool = False
    fp32_tflops: float | None = None

    @property
    def cublas_workspace_mib(self) -> float:
        return 32.0 if self.hopper else 8.125

    def peak_flops(self, amp: str, tf32: bool = True) -> float:
        """Peak FLOP/s for a step under ``amp`` (bf16: the bf16 tensor-core peak; off: the TF32 one with
        ``tf32``, else the fp32 peak where known (TF32 otherwise, so the time bound stays a lower bound))."""
        if amp == "bf16":
            return self.bf16_tflops * 1e12
        return (self.tf32_tflops if tf32 or self.fp32_tflops is None else self.fp32_tflops) * 1e12


GPUS: dict[str, GPU] = {g.name: g for g in (
    GPU("a100-40gb", 40960, 312.0, 156.0, fp32_tflops=19.5),
    GPU("a100-80gb", 81920, 312.0, 156.0, fp32_tflops=19.5),
    GPU("h100-80gb", 81559, 989.0, 494.0, hopper=True, fp32_tflops=67.0),
    GPU("h200-141gb", 143771, 989.0, 494.0, hopper=True, fp32_tflops=67.0),
    GPU("l4-24gb", 23034, 121.0, 60.0, fp32_tflops=30.3),
    GPU("a10-24gb", 23028, 125.0, 62.5, fp32_tflops=31.2),
    GPU("l40s-48gb", 46068, 362.0, 183.0, fp32_tflops=91.6),
    GPU("rtx4090-24gb", 24564, 165.0, 82.6, fp32_tflops=82.6),
)}


def gpu_named(name: str) -> GPU:
    """The :class:`GPU` of a name in :data:`GPUS`; :class:`MlatrError` naming the known ones otherwise."""
    if name not in GPUS:
        raise MlatrError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}")
    return GPUS[name]
