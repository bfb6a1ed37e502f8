"""systemctl and nvidia-smi stand-ins that share one state file, so a unit's start sees the GPUs.

    python fake_host.py STATE systemctl ARGS...     python fake_host.py STATE nvidia-smi ARGS...

Standalone (no project import): agent_support.FakeHost writes two one-line scripts that exec it.
The state file (JSON) is the host:

    {"units": {"sglang-a.service": {"ActiveState": "active", "UnitFileState": "enabled", ...}},
     "fail_start": {"sglang-b.service": {"diagnosis": {"dir": ..., "server": "b", "summary": ..., "mtime": ...}}},
     "fail_stop": [], "linger": 0, "busy_after_stop": 0, "smi_error": null, "calls": [...]}

What it models, from systemctl(1) (https://www.freedesktop.org/software/systemd/man/latest/systemctl.html):
- `show -p P1,P2 U...` prints one `P=V` block per unit, in the order asked, blocks separated by
  an empty line; `--value` prints the values only; an unknown unit is LoadState=not-found, inactive.
- `start U` returns once the unit's ExecStartPost (the readiness gate) passed (exit 0, active) or
  failed (exit 1, the unit failed, "Job for U failed ..." on stderr); a unit in `fail_start` fails,
  writing its gate's diagnosis first when it has one (diagnosis.py's file name and fields).
- `stop U` returns once the unit is inactive; `reset-failed U` turns failed into inactive;
  `enable`/`disable` set UnitFileState.
- A queued job (Job=its id; "" when none): systemd src/core/dbus-unit.c property_get_job answers
  (0, "/") without a job, and src/systemctl/systemctl-show.c print_property prints a Job's id, or
  nothing after "Job=" for 0. What a unit has at boot while its start waits for its After= units,
  ActiveState still inactive (seen on Debian 12's systemd 252: `systemctl start --no-block` of a
  unit After= a running oneshot shows ActiveState=inactive, SubState=dead, Job=139). `stop`
  cancels it, `start` runs it (the fake's start completes at once).
GPU memory (nvidia-smi --query-gpu CSV, two GPUs): in use while any unit is active, activating,
reloading, refreshing or deactivating, and for `linger` more queries after a stop (the driver frees memory
after the processes exit). A start while the memory is in use fails as the unit's prestart would
(GPUS_BUSY). Every call is appended to `calls`: ["systemctl", ARGS...] or ["nvidia-smi", "busy"|"free"].
"""

import json
import os
import sys
import time

RUNNING = ("active", "activating", "reloading", "refreshing", "deactivating")  # what holds the GPUs
DEFAULTS = {"LoadState": "loaded", "ActiveState": "inactive", "SubState": "dead", "UnitFileState": "disabled"}
DEFAULTS |= {"Result": "success", "MainPID": "0", "NeedDaemonReload": "no", "Job": ""}
GPU_ROW = "{index}, GPU-0000000{index}, NVIDIA H200, {used}, 143771, 0"


def gpus_busy(host: dict) -> bool:
    return host["busy_after_stop"] > 0 or any(u.get("ActiveState") in RUNNING for u in host["units"].values())


def unit(host: dict, name: str) -> dict:
    if name not in host["units"]:
        return {"Id": name, **DEFAULTS, "LoadState": "not-found"}
    return {"Id": name, **DEFAULTS, **host["units"][name]}


def systemctl(host: dict, args: list) -> int:
    verb, props, names = args[0], [], []
    rest = iter(args[1:])
    for arg in rest:
        if arg in ("-p", "--property"):
            props += next(rest).split(",")
        elif arg.startswith("--property="):
            props += arg.split("=", 1)[1].split(",")
        elif not arg.startswith("-"):
            names.append(arg)
    if verb == "show":
        shown = [unit(host, n) for n in names]
        if "--value" in args:
            print("\n".join(str(u.get(p, "")) for u in shown for p in props))
        else:
            print("\n\n".join("\n".join(f"{p}={u.get(p, '')}" for p in props) for u in shown))
        return 0
    for name in names:
        state = host["units"].setdefault(name, {})
        if verb == "start":
            failure = host["fail_start"].get(name)
            if failure is None and gpus_busy(host):
                failure = {"why": "control process exited, code=exited, status=4/GPUS_BUSY"}
            if failure is not None:
                write_diagnosis(failure.get("diagnosis"))
                state.update(ActiveState="failed", SubState="failed", Result="exit-code", MainPID="0")
                print(
                    f"Job for {name} failed because {failure.get('why', 'the control process exited')}.",
                    file=sys.stderr,
                )
                return 1
            state.update(ActiveState="active", SubState="running", Result="success", MainPID="4242", Job="")
        elif verb == "stop":
            if name in host["fail_stop"]:
                print(f"Failed to stop {name}: Access denied", file=sys.stderr)
                return 1
            if state.get("ActiveState") in RUNNING:
                host["busy_after_stop"] = host["linger"]
            state.update(ActiveState="inactive", SubState="dead", MainPID="0", Job="")
        elif verb == "reset-failed" and state.get("ActiveState") == "failed":
            state.update(ActiveState="inactive", SubState="dead", Result="success")
        elif verb in ("enable", "disable"):
            state["UnitFileState"] = f"{verb}d"
    return 0


def write_diagnosis(diagnosis: dict | None) -> None:
    if not diagnosis:
        return
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = f"{diagnosis['dir']}/{diagnosis['server']}-{stamp}-stall.json"
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"server": diagnosis["server"], "kind": "stall", "summary": diagnosis["summary"]}, handle)
    if "mtime" in diagnosis:
        os.utime(path, (diagnosis["mtime"], diagnosis["mtime"]))


def nvidia_smi(host: dict) -> int:
    if host["smi_error"]:
        print(host["smi_error"])
        return 9
    busy = gpus_busy(host)
    if host["busy_after_stop"] > 0:
        host["busy_after_stop"] -= 1
    host["calls"].append(["nvidia-smi", "busy" if busy else "free"])
    print("\n".join(GPU_ROW.format(index=i, used=81000 if busy else 3) for i in range(2)))
    return 0


def main() -> int:
    path, tool, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(path, encoding="utf-8") as handle:
        host = json.load(handle)
    if tool == "systemctl":
        host["calls"].append(["systemctl", *args])
        code = systemctl(host, args)
    else:
        code = nvidia_smi(host)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(host, handle)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
