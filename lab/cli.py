"""Command line of the lab.

    python -m lab up                      # build/adopt what is missing, start, wait for boot
    python -m lab up --scale              # the same, with the scale lab's second node pve2
    python -m lab down                    # remove every process, mount, link and container
    python -m lab status                  # what runs
    python -m lab exec HOST -- CMD...     # run CMD in a container, like `docker exec`

HOST is a lab container (pve1, sglang1) or a guest pve1's API created, by hostname or vmid.

``exec`` hands CMD's arguments over unchanged (no shell) and ends with CMD's exit code,
stdout and stderr, because the lab process is replaced by lxc-attach.
"""

import argparse
import os
import sys

from lab import container, guests, layout, lifecycle
from lab.shell import LabError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description="The sglang-pve local test lab.")
    commands = parser.add_subparsers(dest="command", required=True)
    up_parser = commands.add_parser("up", help="start the lab (idempotent)")
    up_parser.add_argument(
        "--scale", action="store_true", help="also the scale lab's node pve2 (inventory/lab_scale.py)"
    )
    commands.add_parser("down", help="stop the lab and remove what runs")
    commands.add_parser("status", help="show what runs")
    exec_parser = commands.add_parser("exec", help="run a command in a container: exec HOST -- CMD...")
    exec_parser.add_argument("host", help=f"{', '.join(layout.HOSTS)} or a guest's name or vmid")
    return parser


def _container_name(host: str) -> str:
    """The LXC name of HOST: a container `up` made, else a guest of pve1 (hostname or vmid)."""
    if host in {**layout.HOSTS, **layout.NODES} and container.state(host) != "ABSENT":
        return host
    guest = guests.resolve(host)
    sharing = sorted(vmid for vmid, hostname in guests.known().items() if hostname == host)
    if len(sharing) > 1:  # the scale lab's sglang1 beside the default lab's: say which one runs CMD
        print(f"lab: {host} names guests {', '.join(map(str, sharing))}: {sharing[0]} (give a vmid)", file=sys.stderr)
    if guest is None and host not in layout.HOSTS:
        known = dict.fromkeys([*layout.HOSTS, *guests.known().values()])
        raise LabError(f"no lab host or guest {host!r} (known: {', '.join(known)})")
    return guest or host


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # split at the first "--" ourselves: argparse would reinterpret CMD's own options
    head, command = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = _parser().parse_args(head)
    try:
        if args.command == "exec":
            if not command:
                raise LabError("usage: python -m lab exec HOST -- CMD...")
            name = _container_name(args.host)
            if container.state(name) != "RUNNING":
                raise LabError(f"{args.host} is not running; run `python -m lab up`")
            argv = container.attach_argv(name, command)
            os.execvp(argv[0], argv)
        if args.command == "up":
            lifecycle.up(scale=args.scale)
        elif args.command == "down":
            lifecycle.down()
        else:
            print("\n".join(lifecycle.status()))
    except LabError as error:
        print(f"lab: error: {error}", file=sys.stderr)
        return 1
    return 0
