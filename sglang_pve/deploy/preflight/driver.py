"""The container's user-space NVIDIA driver must be exactly the node's (its kernel module):
otherwise CUDA and nvidia-smi fail with "Driver/library version mismatch".

>>> driver_problems("pve1", "580.95.05", "580.95.05")
[]
>>> print(driver_problems("pve1", "580.95.05", "580.82.07")[0].render("sglang1")[:93])
sglang1: driver = '580.82.07': the container's user-space NVIDIA driver is 580.82.07 but node
>>> driver_problems("pve1", "580.95.05", "580.82.07")[0].fix  # doctest: +ELLIPSIS
'install exactly 580.95.05 in the container ...'
"""

import re

from sglang_pve.config import Problem

_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")


def driver_problems(node: str, host_version: str | None, container: str | None) -> list[Problem]:
    if host_version is None:
        return []  # the node has no driver loaded: the GPU checks say so
    fix = (
        f"install exactly {host_version} in the container (NVIDIA-Linux-x86_64-{host_version}.run "
        "--no-kernel-module, or apt packages pinned to that version)"
    )
    if container is None:
        return [
            Problem(
                "driver",
                None,
                f"the container has no nvidia-smi: no user-space NVIDIA driver (node {node} runs {host_version})",
                fix,
            )
        ]
    if not _VERSION.match(container):
        return [
            Problem("driver", container, f"nvidia-smi fails in the container (node {node} runs {host_version})", fix)
        ]
    if container != host_version:
        return [
            Problem(
                "driver",
                container,
                f"the container's user-space NVIDIA driver is {container} but node {node} "
                f"runs {host_version}: CUDA would fail with 'Driver/library version mismatch'",
                fix,
            )
        ]
    return []
