"""Wall time of a pve1 guest's life through the API: create, start, boot (sshd active), snapshot,
rollback, destroy; each API call awaited as a task, as the toolkit and pct do.

    SGLANG_PVE_LAB_SLOT=N python bench/lab_guest.py [--runs 3] [--unprivileged]

The lab must be up with its API (python -m lab up). Uses vmid 190 at <subnet>.90 and removes it.
Prints the median of every step over the runs.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from lab import layout  # noqa: E402

VMID, HOSTNAME = 190, "bench-guest"


def api():
    from proxmoxer import ProxmoxAPI

    password = json.loads(layout.PVE_CREDENTIALS.read_text())["users"]["root@pam"]["password"]
    return ProxmoxAPI(
        layout.NODE_ADDRESS,
        port=layout.API_PORT,
        user="root@pam",
        password=password,
        verify_ssl=str(layout.PVE_CA),
        timeout=60,
    )


def wait(client, upid: str) -> None:
    while (status := client.nodes(layout.NODE).tasks(upid).status.get())["status"] != "stopped":
        time.sleep(0.05)
    if status["exitstatus"] != "OK":
        sys.exit(f"{upid}: {status['exitstatus']}")


def booted() -> bool:
    command = [sys.executable, "-m", "lab", "exec", HOSTNAME, "--", "systemctl", "is-active", "ssh"]
    return subprocess.run(command, cwd=PROJECT, capture_output=True, text=True).stdout.strip() == "active"


def one_run(client, unprivileged: bool) -> dict[str, float]:
    ct, times = client.nodes(layout.NODE).lxc, {}

    def step(name: str, action) -> None:
        start = time.perf_counter()
        action()
        times[name] = time.perf_counter() - start

    step(
        "create",
        lambda: wait(
            client,
            ct.post(
                vmid=VMID,
                hostname=HOSTNAME,
                ostemplate=layout.TEMPLATE,
                rootfs="local-lvm:4",
                unprivileged=int(unprivileged),
                dev0="/dev/nvidia0,mode=0666",
                net0=f"name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:01:90,ip={layout.SUBNET}.90/24",
            ),
        ),
    )
    step("start", lambda: wait(client, ct(VMID).status.start.post()))

    def boot() -> None:
        while not booted():
            time.sleep(0.05)

    step("boot (sshd active)", boot)
    step("snapshot", lambda: wait(client, ct(VMID).snapshot.post(snapname="bench")))
    step("rollback (+start)", lambda: wait(client, ct(VMID).snapshot("bench").rollback.post(start=1)))
    step("stop", lambda: wait(client, ct(VMID).status.stop.post()))
    step("destroy", lambda: wait(client, ct(VMID).delete()))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--unprivileged", action="store_true")
    args = parser.parse_args()
    client = api()
    runs = [one_run(client, args.unprivileged) for _ in range(args.runs)]
    kind = "unprivileged" if args.unprivileged else "privileged"
    print(f"pve1 guest ({kind}), median of {args.runs} runs:")
    for name in runs[0]:
        print(f"  {name:<20} {statistics.median(run[name] for run in runs):6.2f} s")


if __name__ == "__main__":
    main()
