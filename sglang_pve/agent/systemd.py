"""The few systemctl calls the agent makes (SGLANG_PVE_SYSTEMCTL replaces the binary in tests).

show(["sglang-a.service", "sglang-b.service"], ["ActiveState", "MainPID"])
    -> {"sglang-a.service": {"Id": "sglang-a.service", "ActiveState": "active", "MainPID": "4242"}, ...}
"""

from sglang_pve.agent import bounded, overrides

TIMEOUT_S = 20


class SystemdError(RuntimeError):
    pass


def show(units: list, properties: list) -> dict:
    """Properties of many units in ONE systemctl call, keyed by unit name."""
    if not units:
        return {}
    out = _systemctl(["show", "-p", ",".join(["Id", *properties]), *units])
    blocks = [
        dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        for block in out.split("\n\n")
        if block.strip()
    ]
    if len(blocks) == len(units):  # one block per unit, in the order asked
        return dict(zip(units, blocks, strict=True))
    return {block["Id"]: block for block in blocks if block.get("Id")}


def main_pid(unit: str) -> int | None:
    value = _systemctl(["show", "-p", "MainPID", "--value", unit]).strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def restart_no_block(unit: str) -> None:
    _systemctl(["restart", "--no-block", unit])


def _systemctl(args: list) -> str:
    tool = overrides.systemctl()
    if tool is None:
        raise SystemdError("systemctl not found")
    try:
        done = bounded.run([tool, *args], TIMEOUT_S)
    except (OSError, bounded.Timeout) as error:
        raise SystemdError(f"systemctl {' '.join(args)}: {error}") from None
    if done.returncode != 0:
        raise SystemdError(f"systemctl {' '.join(args)} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout
