"""The preflight's remote half: reads everything the rules judge, on the target, in one process.

Stdlib only; run by the host's python3 (3.8 or later) from the PreflightProbe fact's command,
never installed. It changes nothing durable: SGLang's parser is given a temporary copy of each
rendered config in a temporary directory that is removed again. Input is one JSON document
(base64 in argv[2]); output is one line, the marker and a JSON document:

    python3 -c '<bootstrap>' <this file, base64> <spec, base64>
    sglang-pve-preflight {"models": {...}, "configs": {...}, "gpus": [...], ...}

Spec keys: models (paths), configs ({name: {path, sha1, text, env}}), ports, venv, pinned,
judge ("all", or "changed": only configs whose rendered sha1 differs from the host's file, all
when the installed SGLang is not the pinned one), timeout_s (per SGLang parse), sandbox ([[name,
value], ...]: the server unit's identity and sandbox, sglang_pve/deploy/sandbox.py), since ({name:
the systemd version that first knows the property}: one the host's systemd is older than is left
out, as systemd-run refuses it; sandbox.SINCE), judge_env
(the server's home and cache variables, pointed into the judge's private /tmp), reach ([host,
port] pairs this host must reach: a TP group rank's rank-0 dist-init address; a refused
connection counts as reached, nothing listens there before the server starts).

SGLang's parser reads the model's config.json through transformers, which under trust_remote_code
imports the configuration_*.py that config.json's auto_map names from the model folder: code of
whoever can write that folder. So the judge never runs as root: each parse is a transient unit
(systemd-run --pipe: stdin and stdout only) with the server's user and sandbox; without
systemd-run, or without a sandbox in the spec, SGLang does not judge (the verdict says why).
"""

from __future__ import annotations  # the annotations stay unevaluated on an older python3

import base64
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

RESULT_PREFIX = "sglang-pve-preflight "  # the result line (facts/preflight.py finds it)
VERDICT = "sglang-pve-verdict "
CAP_SYS_RESOURCE = 24
LIMIT_ROWS = {"Max open files": "nofile", "Max locked memory": "memlock"}

# Runs in the deploy's venv, one process per config (SGLang's imports are heavy and its parse
# leaves global state behind). argparse errors exit with usage on stderr: keep the "error:" line.
JUDGE = (
    f"VERDICT = {VERDICT!r}\n"
    + r"""
import contextlib, io, json, os, sys, tempfile
name, real_path, text = job["name"], job["path"], job["text"]
try:
    from sglang.srt.server_args import prepare_server_args
except Exception as exc:
    error = "cannot import sglang.srt.server_args.prepare_server_args: %s: %s" % (type(exc).__name__, exc)
    verdict = {"ok": None, "error": error}
else:
    errors = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="sglang-pve-preflight-") as tmp:
        path = os.path.join(tmp, name + ".yaml")
        with open(path, "w") as f:
            f.write(text)
        try:
            with contextlib.redirect_stderr(errors):
                args = prepare_server_args(["--config", path])
                # releases without resolve_once() resolve inside prepare_server_args (__post_init__)
                getattr(args, "resolve_once", lambda: None)()
            verdict = {"ok": True, "error": ""}
        except SystemExit as exc:
            lines = [l.split("error:", 1)[1].strip() for l in errors.getvalue().splitlines() if "error:" in l]
            verdict = {"ok": False, "error": lines[-1] if lines else "argparse exited with status %s" % exc.code}
        except Exception as exc:
            verdict = {"ok": False, "error": ("%s: %s" % (type(exc).__name__, exc)).replace(path, real_path)}
print()
print(VERDICT + json.dumps(verdict))
"""
)
# The judge's command line: its job (this script, the config's name, path and text) comes on stdin,
# so no `$` or `%` of it reaches systemd-run's argv (which expands ${VAR} there since systemd 254).
BOOT = "import json, sys; job = json.loads(sys.stdin.readline()); exec(job['script'])"
SANDBOX_RUN = ("systemd-run", "--pipe", "--wait", "--quiet", "--collect", "--service-type=exec")
# What importlib.metadata.version(NAME) answers in a venv, run by the venv's own python with -I
# (not -S: site.py is what makes sys.prefix, and so purelib, the venv's), without importlib.metadata,
# whose import costs ~30 ms of a container's CPU (the interpreter ~8 ms): the first distribution on
# purelib whose .dist-info (or .egg-info) directory's normalized name is NAME's, its METADATA
# (PKG-INFO) Version header. After CPython Lib/importlib/metadata/__init__.py: Prepared.normalize
# (runs of -_. to _, lower case), Lookup.__init__ (the name is the part of the lowered directory
# name before its first -) and Distribution.version (metadata['Version']). The SglangVenv fact runs
# the same text (one source); argv[1] is NAME, the answer "" when none is found.
VERSION = r"""
import os, re, sys, sysconfig
def dist_version(site_packages, name):
    norm = lambda text: re.sub(r"[-_.]+", "_", text).lower()
    try:
        children = os.listdir(site_packages)
    except OSError:
        return ""
    for child in children:
        low = child.lower()
        named = norm(low.rpartition(".")[0].partition("-")[0])
        if not low.endswith((".dist-info", ".egg-info")) or named != norm(name):
            continue
        for meta in ("METADATA", "PKG-INFO"):
            try:
                with open(os.path.join(site_packages, child, meta), encoding="utf-8", errors="replace") as headers:
                    for line in headers:
                        if not line.strip():
                            break
                        key, _, value = line.partition(":")
                        if key.strip().lower() == "version":
                            return value.strip()
                return ""
            except OSError:
                continue
        return ""
    return ""
if __name__ == "__main__":
    print(dist_version(sysconfig.get_path("purelib"), sys.argv[1]))
"""


def read_model(path: str) -> dict[str, object]:
    """Whether `path` is a directory, and its config.json parsed (or why not)."""
    found: dict[str, object] = {"dir": os.path.isdir(path), "config": None, "error": None}
    if not found["dir"]:
        return found
    try:
        with open(os.path.join(path, "config.json"), "rb") as f:
            config = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        found["error"] = "is missing"
    except OSError as exc:
        found["error"] = "cannot be read (%s)" % exc.strerror
    except ValueError as exc:
        found["error"] = "is not valid JSON (%s)" % exc
    else:
        if isinstance(config, dict):
            found["config"] = config
        else:
            found["error"] = "is not a JSON object"
    return found


def sha1_of(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha1(f.read()).hexdigest()
    except OSError:
        return None


def gpus() -> list[str]:
    return sorted(
        (
            os.path.basename(p)
            for p in glob.glob("/dev/nvidia[0-9]*")
            if re.fullmatch(r"nvidia\d+", os.path.basename(p))
        ),
        key=lambda name: int(name[6:]),
    )


def tcp_address(hex_address: str) -> str:
    """An address as /proc/net/tcp{,6} print it: raw bytes in host order per 32-bit word."""
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))


def listening(ports: Collection[int]) -> dict[str, tuple[int, str]]:
    """{inode: (port, address)} of TCP sockets in LISTEN state on any of `ports`."""
    sockets = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A = TCP_LISTEN
                continue
            hex_address, hex_port = fields[1].split(":")
            if int(hex_port, 16) in ports:
                sockets[fields[9]] = (int(hex_port, 16), tcp_address(hex_address))
    return sockets


REACH_TIMEOUT_S = 3.0


def reach(host: str, port: int) -> str | None:
    """None when `host` answers on `port` (connected, or refused: nothing listens yet), else why not."""
    try:
        socket.create_connection((host, port), timeout=REACH_TIMEOUT_S).close()
    except ConnectionRefusedError:
        return None
    except OSError as exc:
        return str(exc) or type(exc).__name__
    return None


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def holders(inodes: Collection[str]) -> dict[str, list[int]]:
    """{inode: [pid, ...]} of processes holding the sockets, from /proc/<pid>/fd links."""
    wanted = {"socket:[%s]" % inode: inode for inode in inodes}
    found: dict[str, list[int]] = {inode: [] for inode in inodes}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink("/proc/%s/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link in wanted and int(pid) not in found[wanted[link]]:
                found[wanted[link]].append(int(pid))
    return found


def process(pid: int) -> dict[str, object]:
    environ = _read_bytes("/proc/%d/environ" % pid).split(b"\0")
    unit = next(
        (e.split(b"=", 1)[1].decode(errors="replace") for e in environ if e.startswith(b"SGLANG_PVE_UNIT=")), None
    )
    cmdline = _read_bytes("/proc/%d/cmdline" % pid).replace(b"\0", b" ").decode(errors="replace").strip()
    return {"pid": pid, "comm": _read("/proc/%d/comm" % pid).strip(), "cmdline": cmdline[:200], "unit": unit}


def listeners(ports: Iterable[int]) -> list[dict[str, object]]:
    sockets = listening(set(ports))
    held = holders(sockets) if sockets else {}
    return [
        {"port": port, "address": address, "holders": [process(pid) for pid in held[inode]]}
        for inode, (port, address) in sorted(sockets.items(), key=lambda item: item[1])
    ]


def limits() -> dict[str, object]:
    """PID 1's soft and hard limits (None = unlimited), and whether it may raise them."""
    found: dict[str, list[int | None]] = {}
    for line in _read("/proc/1/limits").splitlines():
        match = re.match(r"(Max [a-z ]+?)\s{2,}(\S+)\s+(\S+)", line)
        if match and match.group(1) in LIMIT_ROWS:
            found[LIMIT_ROWS[match.group(1)]] = [None if v == "unlimited" else int(v) for v in match.group(2, 3)]
    status = dict(line.split(":", 1) for line in _read("/proc/1/status").splitlines() if ":" in line)
    cap_eff = int(status.get("CapEff", "0").strip() or "0", 16)
    # A capability counts for rlimits only in the initial user namespace (privileged container).
    uid_map = _read("/proc/1/uid_map").split()
    return {
        "limits": found,
        "cap_sys_resource": bool(cap_eff >> CAP_SYS_RESOURCE & 1),
        "init_userns": uid_map[:3] == ["0", "0", "4294967295"],
    }


def installed_version(venv: str, timeout: float) -> str | None:
    """sglang's version in the venv: None without a venv, "" when sglang is not installed."""
    python = os.path.join(venv, "bin", "python")
    if not os.access(python, os.X_OK):
        return None
    try:
        done = subprocess.run([python, "-I", "-c", VERSION, "sglang"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else ""


def judge_command(
    venv: str, name: str, sandbox: Sequence[Sequence[str]], env: Mapping[str, str], timeout: float
) -> list[str]:
    """systemd-run of SGLang's parse of one config, as the server's user in the server's sandbox."""
    unit = "sglang-pve-judge-%d-%s" % (os.getpid(), name)
    properties = [*("%s=%s" % (key, value) for key, value in sandbox), "RuntimeMaxSec=%d" % (timeout + 5)]
    return [
        *SANDBOX_RUN,
        "--unit=" + unit,
        *("--property=" + p for p in properties),
        *("--setenv=%s=%s" % item for item in env.items()),
        "--",
        os.path.join(venv, "bin", "python"),
        "-c",
        BOOT,
    ]


def systemd_version() -> int | None:
    """The host's systemd ("systemd 252 (252.38-1~deb12u1)", systemctl --version's first line); None: unknown."""
    try:
        done = subprocess.run(["systemctl", "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.match(r"systemd (\d+)\b", done.stdout)
    return int(match.group(1)) if match else None


def known_to(version: int | None, sandbox: Sequence[Sequence[str]], since: Mapping[str, int]) -> list[Sequence[str]]:
    """The properties of `sandbox` that systemd `version` knows (None: unknown, all of them)."""
    return [prop for prop in sandbox if version is None or since.get(prop[0], 0) <= version]


def unsandboxed(sandbox: Sequence[Sequence[str]]) -> str | None:
    """Why the judge cannot run in `sandbox`, or None: it must name a user other than root."""
    users = [value for key, value in sandbox if key == "User"]
    if not users or users[-1] in ("root", "0"):
        return "no sandbox with a user other than root was given (SGLang's parser never runs as root)"
    if not shutil.which(SANDBOX_RUN[0]):
        return "systemd-run is missing: SGLang's parser runs only in the server's sandbox, never as root"
    return None


def judge(
    venv: str,
    configs: Mapping[str, Mapping[str, Any]],
    timeout: float,
    sandbox: Sequence[Sequence[str]],
    judge_env: Mapping[str, str],
) -> dict[str, object]:
    """SGLang's own verdict on each config: all processes at once, each under `timeout`."""
    why_not = unsandboxed(sandbox)
    if why_not:
        return {name: {"ok": None, "error": why_not} for name in configs}
    running: dict[str, subprocess.Popen[str]] = {}
    for name, config in configs.items():
        env = dict(judge_env, **config["env"])
        running[name] = subprocess.Popen(
            judge_command(venv, name, sandbox, env, timeout),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/",
            text=True,
            start_new_session=True,
        )  # its own group: killed whole on timeout (the unit itself ends at RuntimeMaxSec)
        job = {"script": JUDGE, "name": name, "path": config["path"], "text": config["text"]}
        try:  # one line (communicate() closes the pipe later)
            running[name].stdin.write(json.dumps(job) + "\n")  # type: ignore[union-attr]
            running[name].stdin.flush()  # type: ignore[union-attr]
        except BrokenPipeError:  # systemd-run refused at once: its stderr says why
            pass
    verdicts: dict[str, object] = {}
    for name, proc in running.items():
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            try:  # a descendant that escaped the group may hold the pipe: abandon it, never wait on it
                proc.communicate(timeout=1)
            except subprocess.TimeoutExpired:
                pass
            verdicts[name] = {"ok": None, "error": "SGLang's parser did not finish within %d s" % timeout}
            continue
        lines = [line[len(VERDICT) :] for line in out.splitlines() if line.startswith(VERDICT)]
        last = (err.strip().splitlines() or [""])[-1][:300]
        verdicts[name] = (
            json.loads(lines[-1])
            if lines
            else {
                "ok": None,
                "error": "SGLang's parser (in the server's sandbox) exited with status %d without a verdict%s"
                % (proc.returncode, ": " + last if last else ""),
            }
        )
    return verdicts


def main(spec: dict[str, Any]) -> dict[str, object]:
    """`spec`: the JSON document the fact sends (keys in the module docstring)."""
    configs = {name: sha1_of(config["path"]) for name, config in spec["configs"].items()}
    found: dict[str, object] = {
        "models": {path: read_model(path) for path in spec["models"]},
        "configs": configs,
        "gpus": gpus(),
        "listeners": listeners(spec["ports"]),
        "python": [sys.executable, *sys.version_info[:3]],  # the agent runs on this interpreter
    }
    found.update(limits())
    found["reach"] = {"%s:%d" % (host, port): reach(host, port) for host, port in spec.get("reach", [])}
    found["sglang"] = sglang = installed_version(spec["venv"], spec["timeout_s"])
    if sglang:
        chosen = {
            name: config
            for name, config in spec["configs"].items()
            if spec["judge"] == "all" or sglang != spec["pinned"] or configs[name] != config["sha1"]
        }
        sandbox = spec.get("sandbox", [])
        if chosen and spec.get("since"):
            sandbox = known_to(systemd_version(), sandbox, spec["since"])
        found["verdicts"] = judge(spec["venv"], chosen, spec["timeout_s"], sandbox, spec.get("judge_env", {}))
    else:
        found["verdicts"] = {}
    return found


if __name__ == "__main__":
    try:
        result = main(json.loads(base64.b64decode(sys.argv[2])))
    except Exception:
        result = {"error": traceback.format_exc()}
    print(RESULT_PREFIX + json.dumps(result, sort_keys=True))
