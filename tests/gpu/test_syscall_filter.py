"""The server unit's SystemCallFilter, ProtectProc/ProcSubset and IPAddressDeny on a real GPU: a
CUDA + Triton + NCCL process (a bf16 GEMM, a Triton kernel JIT-compiled into its cache, and
torch.distributed with the NCCL backend, one rank, its TCPStore rendezvous on the loopback and an
all-reduce) runs under them as an unprivileged user and gets the right numbers.

The properties are sglang_pve/deploy/sandbox.py's, the one list the unit renders. Where systemd is
PID 1, systemd-run applies them. Where it is not (the device machine), tests/gpu/unit_sandbox.py
applies them as systemd does: the syscall list is what systemd 252 expands @system-service to for
the unit (tests/gpu/unit_syscalls.json, read back from the lab's deployed unit), every other call
EPERM (SystemCallErrorNumber); a fresh /proc with hidepid=invisible,subset=pid in a private mount
namespace; and for IPAddressDeny=any with IPAddressAllow=localhost (the unit's list with no own
address and no client), a network namespace whose one interface is lo: only the loopback is
reachable, as under systemd's cgroup BPF filter. A second run kills on the first call outside the
list instead of failing it (stricter than the unit): passing it shows the workload makes none.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sglang_pve.deploy import paths, sandbox

HERE = Path(__file__).resolve().parent
UID = GID = 65534  # nobody: a user with no file of its own, like the server's dynamic user
CHILD = r"""
import json, os, socket, sys, time
tic = time.monotonic()
import torch, torch.distributed as dist, triton, triton.language as tl

@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)

out = {"uid": os.getuid(), "pid1_visible": os.path.exists("/proc/1"), "meminfo": os.path.exists("/proc/meminfo")}
for address in json.loads(sys.argv[1]):  # addresses the unit's allow list leaves out
    try:
        socket.create_connection((address, 22), timeout=3).close()
        out[address] = "connected"
    except OSError as error:
        out[address] = type(error).__name__
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
out["gemm_positive"] = (a @ a.T).float().diag().mean().item() > 0
x = torch.ones(1 << 20, device="cuda")
double[(x.numel() // 1024,)](x, x.numel(), BLOCK=1024)
out["triton_ok"] = bool((x == 2).all().item())
with socket.socket() as probe:  # a free loopback port for the rendezvous
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
y = torch.full((1 << 20,), 3.0, device="cuda")
dist.all_reduce(y)
torch.cuda.synchronize()
out["nccl_ok"] = bool((y == 3).all().item())
out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
dist.destroy_process_group()
out["seconds"] = round(time.monotonic() - tic, 1)
print("RESULT " + json.dumps(out), flush=True)
"""


def _systemd_is_pid1() -> bool:
    return os.path.isdir("/run/systemd/system") and shutil.which("systemd-run") is not None  # sd_booted()


def _own_addresses() -> list[str]:
    """Addresses of this machine beyond the loopback (the fact's `hostname -I`), else a private one."""
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout.split()
    return [a for a in found if ":" not in a][:2] or ["10.255.255.1"]


def _allowed_syscalls(errno: int | None, proc: bool = True, loopback_only: bool = True) -> dict:
    table = json.loads((HERE / "unit_syscalls.json").read_text())
    assert dict(sandbox.PROPERTIES)["SystemCallFilter"] == "@system-service", "unit_syscalls.json is that set"
    numbers = [table["x86_64"][name] for name in table["allow"] if name in table["x86_64"]]
    return {"uid": UID, "gid": GID, "syscalls": numbers, "errno": errno, "proc": proc, "loopback_only": loopback_only}


def _run(tmp: Path, errno: int | None, denied: list[str], **parts: bool) -> tuple[subprocess.CompletedProcess, float]:
    state, cache = tmp / "state", tmp / "cache"
    for directory in (state, cache):
        directory.mkdir(mode=0o700, exist_ok=True)
        os.chown(directory, UID, GID)
    script = tmp / "child.py"  # a file: Triton reads a @jit function's source
    script.write_text(CHILD)
    script.chmod(0o644)
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("PATH", "LD_LIBRARY", "CUDA", "NCCL", "NVIDIA", "TORCH", "NVSHMEM"))
    }
    env |= paths.server_home_env(str(state), str(cache)) | {"PYTHONUNBUFFERED": "1", "NCCL_NVLS_ENABLE": "0"}
    child = [sys.executable, str(script), json.dumps(denied)]
    if _systemd_is_pid1():
        props = [*sandbox.for_systemd(None), sandbox.ip_allow(_own_addresses(), [])]
        if errno is None:
            props = [p for p in props if p[0] != "SystemCallErrorNumber"]
        command = ["systemd-run", "--wait", "--pipe", "--collect", "--quiet", "-p", f"User={UID}", "-p", f"Group={GID}"]
        command += [arg for name, value in props for arg in ("-p", f"{name}={value}")]
        command += [f"--setenv={k}={v}" for k, v in env.items()] + ["--working-directory", str(state), *child]
        env = dict(os.environ)
    else:
        config = tmp / f"sandbox-{errno}.json"
        config.write_text(json.dumps(_allowed_syscalls(errno, **parts)))
        command = [sys.executable, str(HERE / "unit_sandbox.py"), str(config), "--", *child]
    tic = time.monotonic()
    done = subprocess.run(command, env=env, cwd=str(state), capture_output=True, text=True, timeout=400)
    return done, time.monotonic() - tic


def _result(done: subprocess.CompletedProcess) -> dict:
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"exit {done.returncode}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


def _killed_by() -> str:
    """The audit lines of seccomp kills (dmesg, where readable): the syscall numbers."""
    log = subprocess.run(["dmesg"], capture_output=True, text=True, check=False).stdout
    return " | ".join(line for line in log.splitlines() if "type=1326" in line)[-600:]


def test_cuda_triton_and_nccl_under_the_units_syscall_filter_proc_and_ip_deny():
    tmp = Path(tempfile.mkdtemp(prefix="sglang-pve-seccomp-"))  # pytest's own tmp is root-only (0700)
    tmp.chmod(0o755)
    denied = [a for a in _own_addresses() if not _systemd_is_pid1()]  # unreachable from lo only
    mode = "systemd-run" if _systemd_is_pid1() else "by hand (tests/gpu/unit_sandbox.py)"
    try:
        done, seconds = _run(tmp, 1, denied)  # SystemCallErrorNumber=EPERM (errno 1), as the unit
        if done.returncode != 0 and not _systemd_is_pid1():  # which part refused it, for the report
            for part in ("proc", "loopback_only"):
                again, _ = _run(tmp, 1, denied, **{part: False})
                print(f"without {part}: exit {again.returncode}: {again.stdout[-500:]} {again.stderr[-1500:]}")
        result = _result(done)
        print(f"unit sandbox, {mode}: {result} in {seconds:.1f} s")
        assert result["uid"] == UID and not result["pid1_visible"] and not result["meminfo"]
        assert result["gemm_positive"] and result["triton_ok"] and result["nccl_ok"]
        assert all(result[a] != "connected" for a in denied), result
        assert any((tmp / "cache" / "triton").rglob("*")), "Triton wrote its JIT cache into the server's cache dir"
        strict, seconds = _run(tmp, None, denied)  # the first call outside the list kills the process
        if strict.returncode != 0:
            print(f"killing filter: exit {strict.returncode}; audit: {_killed_by()}; {strict.stderr[-1500:]}")
        assert strict.returncode == 0, "a call outside the unit's list was made (failed with EPERM in the run above)"
        print(f"killing filter: {_result(strict)} in {seconds:.1f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
