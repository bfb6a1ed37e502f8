"""The server's least privilege on a real GPU: a CUDA process as an unprivileged user, with no
capabilities (empty bounding set), no_new_privs, the unit's memlock/nofile limits and only its own
home and cache dirs writable (the unit's environment, sglang_pve.deploy.paths.server_home_env), allocates
GPU memory, pins host memory, runs a matmul and JIT-compiles a Triton kernel into its cache.

The device machine runs no systemd, so the unit's User=/NoNewPrivileges=/CapabilityBoundingSet=/
Limit*= are applied here by hand, exactly as systemd applies them before exec."""

import ctypes
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sglang_pve.deploy import paths

UID = GID = 65534  # nobody: a user with no file of its own, like the server's dynamic user
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 38, 24
CHILD = r"""
import json, os, torch, triton, triton.language as tl

@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)

a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
product = (a @ a.T).float().diag().mean().item()          # > 0: a real GEMM ran
pinned = torch.empty(64 << 20, dtype=torch.uint8).pin_memory()   # page-locked: memlock applies
x = torch.ones(1 << 20, device="cuda")
double[(x.numel() // 1024,)](x, x.numel(), BLOCK=1024)
torch.cuda.synchronize()
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
print("RESULT " + json.dumps({
    "uid": os.getuid(), "cap_eff": status["CapEff"].strip(), "cap_bnd": status["CapBnd"].strip(),
    "no_new_privs": status.get("NoNewPrivs", "?").strip(), "gemm_positive": product > 0,
    "pinned": pinned.is_pinned(), "triton_ok": bool((x == 2).all().item()),
    "memlock": open("/proc/self/limits").read().split("Max locked memory")[1].split()[0],
}))
"""


def _drop_privileges():
    """What systemd does for User=, NoNewPrivileges=yes, CapabilityBoundingSet= (empty)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # past the last capability: EINVAL, ignored
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    os.setgroups([])
    os.setgid(GID)
    os.setuid(UID)


def test_a_cuda_process_of_an_unprivileged_user_under_the_unit_limits():
    tmp_path = Path(tempfile.mkdtemp(prefix="sglang-pve-gpu-"))  # pytest's own tmp is root-only (0700)
    try:
        _run_unprivileged(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _run_unprivileged(tmp_path: Path):
    state, cache = tmp_path / "state", tmp_path / "cache"
    for directory in (state, cache):
        directory.mkdir(mode=0o700)
        os.chown(directory, UID, GID)
    tmp_path.chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("PATH", "LD_LIBRARY", "CUDA", "NCCL", "NVIDIA", "TORCH", "NVSHMEM"))
    }
    env |= paths.server_home_env(str(state), str(cache)) | {"PYTHONUNBUFFERED": "1"}
    memlock = resource.RLIM_INFINITY  # LimitMEMLOCK=infinity, the production default
    hard_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

    def limits_then_drop():
        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (memlock, memlock))
        except (ValueError, OSError):
            pass  # a sandbox without CAP_SYS_RESOURCE keeps its own limit; the child reports it
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1048576, hard_nofile),) * 2)
        _drop_privileges()

    script = tmp_path / "child.py"  # a file: Triton reads a @jit function's source
    script.write_text(CHILD)
    script.chmod(0o644)
    done = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        cwd=str(state),
        capture_output=True,
        text=True,
        timeout=420,
        preexec_fn=limits_then_drop,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    print(result)
    assert result["uid"] == UID and int(result["cap_eff"], 16) == 0 and int(result["cap_bnd"], 16) == 0
    assert result["no_new_privs"] == "1"
    assert result["gemm_positive"] and result["pinned"] and result["triton_ok"]
    assert any((cache / "triton").rglob("*")), "Triton wrote its JIT cache into the server's own cache dir"
