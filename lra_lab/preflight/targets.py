"""Compile targets and their specs.

Peak rates and memory are the vendors' published per-chip figures (dense, no sparsity); they bound
a step from below and are never reached by a real step. Sources:

* TPU v4: 275 TFLOP/s bf16, 32 GiB HBM2 at 1,200 GB/s (Google Cloud TPU docs, "TPU v4").
* TPU v5e: 197 TFLOP/s bf16, 16 GiB HBM2 at 819 GB/s (Google Cloud TPU docs, "TPU v5e").
* TPU v5p: 459 TFLOP/s bf16, 95 GiB HBM2e at 2,765 GB/s (Google Cloud TPU docs, "TPU v5p").
* TPU v6e: 918 TFLOP/s bf16, 32 GiB HBM at 1,640 GB/s (Google Cloud TPU docs, "TPU v6e").
* H100 SXM: 989 TFLOP/s bf16 dense, 495 TF32, 80 GB HBM3 at 3.35 TB/s (NVIDIA H100 datasheet).
* H200 SXM: 989 TFLOP/s bf16 dense, 495 TF32 (the H100's compute), 141 GB HBM3e at 4.8 TB/s (NVIDIA
  H200 datasheet); XLA's description is ``h200.txtpb`` (the H100's fields, its memory size and bandwidth).
* A100 SXM: 312 TFLOP/s bf16, 156 TF32, 40 GB at 1.555 TB/s or 80 GB at 2.039 TB/s (NVIDIA A100 datasheet).

float32 rates are assumptions, said so in every report: on TPU a float32 matmul at JAX's default
precision runs as bf16 passes (taken as 1/3 of the bf16 rate); on NVIDIA GPUs XLA uses TF32
tensor cores for float32 matmuls by default (the TF32 rate: the committed H100 step table measured
a float32 4096^2 matmul at 216-246 TFLOP/s, over three times the non-tensor float32 peak). The
non-tensor float32 peaks (H100/H200 SXM 67 TFLOP/s, A100 19.5; the same datasheets) are kept as
``f32_non_tensor_flops``: the ceiling of float32 work that is not a matmul.
"""

from __future__ import annotations

import dataclasses
import re

from lra.console import GIB


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str
    memory_bytes: int  # per device
    bf16_flops: float  # per device, dense
    f32_flops: float
    bandwidth: float  # bytes/s of device memory
    platform: str  # "tpu" or "cuda"
    topology_name: str = ""  # get_topology_desc's name for TPUs
    chip_config_name: str = "default"
    gpu_spec: str = ""  # XLA's target-config file for GPUs (xla/tools/hlo_opt/gpu_specs/<gpu_spec>)
    f32_non_tensor_flops: float = 0.0  # GPUs: the datasheet's float32 rate without tensor cores


TPU_CHIPS = {
    "v4": Chip("TPU v4", 32 * GIB, 275e12, 275e12 / 3, 1.2e12, "tpu", "v4", "megacore"),
    "v5e": Chip("TPU v5e", 16 * GIB, 197e12, 197e12 / 3, 0.819e12, "tpu", "v5e"),
    "v5p": Chip("TPU v5p", 95 * GIB, 459e12, 459e12 / 3, 2.765e12, "tpu", "v5p", "megacore"),
    "v6e": Chip("TPU v6e", 32 * GIB, 918e12, 918e12 / 3, 1.64e12, "tpu", "v6e"),
}
GPU_CHIPS = {
    "h100": Chip(
        "H100 SXM 80GB",
        80 * 10**9,
        989e12,
        495e12,
        3.35e12,
        "cuda",
        gpu_spec="h100_sxm.txtpb",
        f32_non_tensor_flops=67e12,
    ),
    "h200": Chip(
        "H200 SXM 141GB", 141 * 10**9, 989e12, 495e12, 4.8e12, "cuda", gpu_spec="h200.txtpb", f32_non_tensor_flops=67e12
    ),
    "a100-40gb": Chip(
        "A100 SXM 40GB",
        40 * 10**9,
        312e12,
        156e12,
        1.555e12,
        "cuda",
        gpu_spec="a100_sxm_40.txtpb",
        f32_non_tensor_flops=19.5e12,
    ),
    "a100-80gb": Chip(
        "A100 SXM 80GB",
        80 * 10**9,
        312e12,
        156e12,
        2.039e12,
        "cuda",
        gpu_spec="a100_sxm_80.txtpb",
        f32_non_tensor_flops=19.5e12,
    ),
}
# jax's device_kind of each chip above (what a benchmark on the real device reports); a kind not
# matched (an H100 PCIe or NVL, whose peaks are lower) has no datasheet figure here.
DEVICE_KINDS = {
    "h100": re.compile(r"H100 (SXM|80GB HBM3)"),
    "h200": re.compile(r"H200(?! NVL)"),
    "a100-40gb": re.compile(r"A100-SXM4-40GB"),
    "a100-80gb": re.compile(r"A100-SXM4-80GB"),
}


def chip_of_device(device_kind: str) -> Chip | None:
    """The datasheet chip of a GPU jax reports (``NVIDIA H100 80GB HBM3`` -> H100 SXM), or None."""
    for name, pattern in DEVICE_KINDS.items():
        if pattern.search(device_kind):
            return GPU_CHIPS[name]
    return None


TPU_EXAMPLES = ("v4:2x2x1", "v5e:2x2", "v5e:2x4", "v5p:2x2x1", "v6e:2x2")


@dataclasses.dataclass(frozen=True)
class Target:
    name: str  # as given: "cpu", "v5e:2x2", "h100x8"
    kind: str  # "cpu", "tpu", "gpu"
    devices: int
    chip: Chip | None  # None for the CPU (measured instead)
    topology: str = ""  # "2x2" for TPUs

    @property
    def description(self) -> str:
        if self.kind == "cpu":
            return "this machine's CPU"
        assert self.chip is not None  # every accelerator target names its chip (parse())
        return f"{self.devices} x {self.chip.name}"


def known() -> list[str]:
    return [
        "cpu",
        *TPU_EXAMPLES,
        "<tpu>:<AxB[xC]> for tpu in " + "/".join(TPU_CHIPS),
        *GPU_CHIPS,
        "<gpu>xN (e.g. h100x8)",
    ]


def parse(name: str) -> Target:
    """``cpu``, ``v5e:2x2``, ``h100`` or ``h100x8``; anything else raises ValueError listing the known ones."""
    name = name.strip().lower()
    if name == "cpu":
        return Target("cpu", "cpu", 1, None)
    m = re.fullmatch(r"(v\d+[a-z]?):(\d+(?:x\d+){1,2})", name)
    if m and m.group(1) in TPU_CHIPS:
        dims = [int(d) for d in m.group(2).split("x")]
        devices = 1
        for d in dims:
            devices *= d
        if devices < 1:
            raise ValueError(f"target {name!r}: a topology needs at least one chip")
        return Target(name, "tpu", devices, TPU_CHIPS[m.group(1)], m.group(2))
    for chip_name, chip in GPU_CHIPS.items():
        m = re.fullmatch(re.escape(chip_name) + r"(?:x(\d+))?", name)
        if m:
            count = int(m.group(1) or 1)
            if count < 1:
                raise ValueError(f"target {name!r}: need at least one GPU")
            return Target(name, "gpu", count, chip)
    raise ValueError(f"unknown target {name!r}; known: {', '.join(known())}")
