"""The profiles Trainhook ships, as data in the schema platform teams write their own in.

Every value here is the one its vendor documents; docs/fabrics.md names the page of each and
the fields left out (a value a vendor leaves to the cluster is the cluster's own profile's).
"""

from __future__ import annotations

from webhook.core.fabrics.schema import ProfileData

# AWS Elastic Fabric Adapter through the EFA device plugin (EKS).
AWS_EFA: ProfileData = {
    # aws-ofi-nccl answers to this name (its current one, "Libfabric", too); NCCL's NCCL_NET.
    "ncclNet": "AWS Libfabric",
    # libfabric's EFA provider and no other (aws-ofi-nccl doc/efa-env-var.md).
    "env": {"FI_PROVIDER": "efa"},
    # The EFA device plugin's resource (EKS user guide, Manage EFA devices; EKS best practices).
    "resources": {"vpc.amazonaws.com/efa": "1"},
}

# InfiniBand or RoCE through the NVIDIA Network Operator's RDMA shared device plugin.
INFINIBAND: ProfileData = {
    "ncclNet": "IB",  # NCCL's own IB verbs transport (NCCL environment variables, NCCL_NET)
    # The quick start's NicClusterPolicy resource and test pod (Network Operator docs).
    "resources": {"rdma/rdma_shared_device_a": "1"},
    "capabilities": ["IPC_LOCK"],
}

_GPU_DEVICES = "".join(f"- path: /dev/nvidia{gpu}\n" for gpu in range(8)) + (
    "- path: /dev/nvidiactl\n- path: /dev/nvidia-uvm\n- path: /dev/dmabuf_import_helper\n"
)
_INTERFACES = (
    '[{"interfaceName":"eth0","network":"default"},'
    + ",".join(f'{{"interfaceName":"eth{n}","network":"vpc{n}"}}' for n in range(1, 9))
    + "]"
)
_NVIDIA_LIB = "/usr/local/nvidia/lib64"

# GKE A3 Mega's GPUDirect-TCPXO (GoogleCloudPlatform/container-engine-accelerators,
# gpudirect-tcpxo: nccl-test-latest.yaml, README.md, best-practice.md).
GKE_TCPXO: ProfileData = {
    "ncclNet": "FasTrak",  # the TCPXO NCCL plugin's name (google/nccl-plugin-gpudirect-tcpxo)
    "env": {
        "LD_LIBRARY_PATH": _NVIDIA_LIB,
        "NCCL_LIB_DIR": _NVIDIA_LIB,
        "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/dev/aperture_devices",
    },
    "annotations": {
        "devices.gke.io/container.tcpxo-daemon": _GPU_DEVICES,
        "networking.gke.io/default-interface": "eth0",
        "networking.gke.io/interfaces": _INTERFACES,
    },
    "hostPaths": [
        {
            "name": "tcpxo-nvidia",
            "path": "/home/kubernetes/bin/nvidia/lib64",
            "mountPath": _NVIDIA_LIB,
        },
        {
            "name": "tcpxo-aperture-devices",
            "path": "/dev/aperture_devices",
            "mountPath": "/dev/aperture_devices",
        },
        {"name": "tcpxo-sys", "path": "/sys"},
        {"name": "tcpxo-proc-sys", "path": "/proc/sys"},
    ],
    "sidecars": [
        {
            "name": "tcpxo-daemon",
            "image": "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.21",
            "imagePullPolicy": "Always",
            "command": ["/bin/sh", "-c"],
            "args": [
                "set -ex\nchmod 755 /fts/entrypoint_rxdm_container.sh\n"
                "/fts/entrypoint_rxdm_container.sh --num_hops=2 --num_nics=8\n"
            ],
            "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}},
            "volumeMounts": [
                {"name": "tcpxo-nvidia", "mountPath": _NVIDIA_LIB},
                {"name": "tcpxo-sys", "mountPath": "/hostsysfs"},
                {"name": "tcpxo-proc-sys", "mountPath": "/hostprocsysfs"},
            ],
            "env": [
                {"name": "LD_LIBRARY_PATH", "value": _NVIDIA_LIB},
                {"name": "HEALTH_CHECK_LOG_FILE", "value": "/run/health-check"},
            ],
            # Training starts once the daemon has set up its buffers, or the pod fails early.
            "startupProbe": {
                "initialDelaySeconds": 1,
                "periodSeconds": 5,
                "timeoutSeconds": 1,
                "successThreshold": 1,
                "failureThreshold": 6,
                "exec": {"command": ["cat", "/run/health-check"]},
            },
        }
    ],
}

REFERENCE: dict[str, ProfileData] = {
    "aws-efa": AWS_EFA,
    "infiniband": INFINIBAND,
    "gke-tcpxo": GKE_TCPXO,
}
