"""What a ContainerSpec asks of Proxmox: config keys in the form GET .../config returns them,
the raw ``lxc.*`` lines (which the API cannot write), and the parameters of the create call,
built once per plan (build) into one Desired value that the diff and the writes consume.

>>> from sglang_pve.config.proxmox import ContainerSpec
>>> spec = ContainerSpec.model_validate({"node": "pve1", "vmid": 129, "hostname": "llm",
...     "template": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", "unprivileged": False,
...     "cores": 8, "memory": 4096, "rootfs": {"storage": "local-zfs", "size_gb": 50},
...     "net0": {"bridge": "vmbr0", "ip": "10.0.0.129/24", "gw": "10.0.0.1"},
...     "features": {"nesting": True}, "mounts": [{"host": "/srv/models", "path": "/shared"}]})
>>> wanted_config(spec, {"dev0": "/dev/nvidia0,mode=0666"})["net0"]
'name=eth0,bridge=vmbr0,gw=10.0.0.1,ip=10.0.0.129/24'
>>> wanted_raw_lines(spec, [])
[('lxc.mount.entry', '/srv/models shared none bind,ro,create=dir 0 0')]
>>> build(spec, node_gpus=[0], majors={"nvidia": 195, "nvidia-uvm": 511}, ssh_public_keys=None).config["dev0"]
'/dev/nvidia0,mode=0666'
"""

from dataclasses import dataclass

from sglang_pve.config.errors import Problem
from sglang_pve.config.gpu_sets import wanted_gpus
from sglang_pve.config.proxmox import ContainerSpec, RootFs
from sglang_pve.provision.passthrough import DeviceNode, nvidia_devices, proxmox_config_lines, proxmox_dev_options
from sglang_pve.provision.propstring import FORMATS, boolean, parse, render


@dataclass(frozen=True)
class Desired:
    """What one container should be, as Proxmox states it (build)."""

    config: dict[str, str]  # every owned key except rootfs, as GET .../config prints it
    raw_lines: list[tuple[str, str]]  # the toolkit's raw lxc lines, in order
    rootfs: RootFs  # compared on its own (grow only, same storage)
    create: dict[str, object]  # POST /nodes/{node}/lxc when the container is absent
    problems: list[Problem]  # what the node cannot give (GPUs it lacks, no nvidia-uvm major for raw)


def build(spec: ContainerSpec, node_gpus: list[int], majors: dict[str, int], ssh_public_keys: str | None) -> Desired:
    """The one translation of `spec` for a node with /dev/nvidia<i> for each i in `node_gpus` and
    the device majors of its /proc/devices; `ssh_public_keys` are authorized at create."""
    dev_options, raw_devices, problems = passthrough(spec, node_gpus, majors)
    config = wanted_config(spec, dev_options)
    return Desired(
        config=config,
        raw_lines=wanted_raw_lines(spec, raw_devices),
        rootfs=spec.rootfs,
        create=create_parameters(spec, config, ssh_public_keys),
        problems=problems,
    )


def wanted_config(spec: ContainerSpec, dev_options: dict[str, str]) -> dict[str, str]:
    """Every owned key (except rootfs, compared on its own) as PVE prints it."""
    net = spec.net0.model_dump(exclude_none=True)
    if "firewall" in net:
        net["firewall"] = boolean(net["firewall"])
    config = {
        "hostname": spec.hostname,
        "cores": str(spec.cores),
        "memory": str(spec.memory),
        "swap": str(spec.swap),
        "onboot": boolean(spec.onboot),
        "unprivileged": boolean(spec.unprivileged),
        "net0": render(net, required=FORMATS["net"].required),
    }
    features = {k: boolean(v) for k, v in spec.features.model_dump(exclude_none=True).items()}
    if features:
        config["features"] = render(features)
    if spec.startup and (startup := {k: str(v) for k, v in spec.startup.model_dump(exclude_none=True).items()}):
        config["startup"] = render(startup)  # order=2,up=30: PVE keeps the string as written
    return config | {key: render(parse(value, "path"), default_key="path") for key, value in dev_options.items()}


def mount_line(host_path: str, container_path: str, read_only: bool) -> tuple[str, str]:
    """A raw bind mount: not a volume, so it does not block snapshots (an mpN bind mount does).
    Its exact shape is how diff.owned_raw_line knows the line is the toolkit's."""
    options = "bind,ro,create=dir" if read_only else "bind,create=dir"
    return "lxc.mount.entry", f"{host_path} {container_path.lstrip('/')} none {options} 0 0"


def wanted_raw_lines(spec: ContainerSpec, raw_devices: list[DeviceNode]) -> list[tuple[str, str]]:
    """The raw lxc lines: GPU passthrough in "raw" mode (cgroup2 allow + mount entries), then mounts."""
    gpu = [(key, value) for key, value in (line.split(": ", 1) for line in proxmox_config_lines(raw_devices))]
    return gpu + [mount_line(m.host, m.path, m.ro) for m in spec.mounts]


def create_parameters(spec: ContainerSpec, wanted: dict[str, str], ssh_public_keys: str | None) -> dict[str, object]:
    """POST /nodes/{node}/lxc: the wanted keys, the template, the root volume; not started (the raw
    lines go in first). Booleans are already 1/0 strings."""
    params: dict[str, object] = {
        "vmid": spec.vmid,
        "ostemplate": spec.template,
        "rootfs": f"{spec.rootfs.storage}:{spec.rootfs.size_gb}",
        "start": "0",
        **wanted,
    }
    if ssh_public_keys:
        params["ssh-public-keys"] = ssh_public_keys
    return params


def passthrough(
    spec: ContainerSpec, node_gpus: list[int], majors: dict[str, int]
) -> tuple[dict[str, str], list[DeviceNode], list[Problem]]:
    """(devN options, raw-mode device nodes, problems) for the spec's GPUs on a node that has
    /dev/nvidia<i> for each i in `node_gpus` and the device majors of its /proc/devices."""
    if spec.gpus == []:  # a container without GPUs (a router): no NVIDIA node at all
        return {}, [], []
    minors = wanted_gpus(spec, node_gpus)
    problems = []
    missing = [i for i in minors if i not in node_gpus]
    if missing or not minors:
        problems.append(
            Problem(
                "container.gpus",
                spec.gpus,
                f"the node has {', '.join(f'/dev/nvidia{i}' for i in sorted(node_gpus)) or 'no /dev/nvidiaN'}"
                + (f", not /dev/nvidia{missing[0]}" if missing else ""),
                "load the NVIDIA driver on the node (nvidia-smi there must list the GPUs), or ask only for GPUs it has",
            )
        )
    uvm = majors.get("nvidia-uvm")
    if spec.passthrough == "raw" and uvm is None:
        problems.append(
            Problem(
                "container.passthrough",
                "raw",
                "the node's /proc/devices has no nvidia-uvm major "
                "(module not loaded), so the raw cgroup lines cannot be written",
                "run the node preparation (tasks/pve_host.py loads nvidia_uvm at boot; modprobe nvidia_uvm now)",
            )
        )
    devices = nvidia_devices([i for i in minors if i in node_gpus], uvm_major=uvm or 0)
    if spec.passthrough == "raw":
        return {}, devices, problems
    return proxmox_dev_options(devices), [], problems
