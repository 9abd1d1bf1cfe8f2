"""Which frameworks a fabric profile can carry: every profile pins an NCCL network, so a job
must move its data with NCCL (or, for MPI, with an MPI over the same fabric).

* pytorch, tensorflow, jax, paddle, mpi and generic jobs: always (their GPU collectives are NCCL's;
  a generic job is whatever its image runs).
* mindspore: on NVIDIA GPUs only; on Ascend it communicates with HCCL, which no profile carries.
* xgboost: only a pod whose training container has GPUs: XGBoost's collective uses NCCL for
  GPU training and its own TCP sockets on CPUs.
"""

from __future__ import annotations

NVIDIA_GPU = (
    "nvidia.com/gpu"  # the NVIDIA device plugin's resource, trainhook.io/gpu-resource's default
)


def framework_refusal(profile: str, framework: str, gpu_resource: str) -> str | None:
    """Why `framework` cannot use `profile` whatever its pods, or None."""
    if framework == "mindspore" and gpu_resource != NVIDIA_GPU:
        return (
            f"MindSpore on {gpu_resource} communicates with HCCL, not NCCL, which profile "
            f"{profile} carries; a fabric profile is for MindSpore on {NVIDIA_GPU}"
        )
    return None


def pod_refusal(profile: str, framework: str, gpus: int, container: str) -> str | None:
    """Why one pod cannot use `profile`, or None."""
    if framework == "xgboost" and gpus == 0:
        return (
            f"XGBoost uses NCCL, which profile {profile} carries, only to train on GPUs; "
            f"training container {container} asks for none (trainhook.io/gpus): a CPU job "
            "trains over TCP and needs no fabric profile"
        )
    return None
