"""prometheus-node-exporter, the distribution's package, serving the agent's metrics file through its
textfile collector (sglang_pve/agent/metrics.py writes it; facts/node_exporter.py says what the
package ships)."""

import shlex

from pyinfra import host
from pyinfra.api import OperationError, QuoteString, StringCommand, operation

from sglang_pve.agent import contract
from sglang_pve.deploy.facts.node_exporter import BINARY, DEFAULTS, PACKAGE, TEXTFILE_FLAG, UNIT

DIRECTORY = {"type": "directory", "mode": "755", "user": "root", "group": "root"}  # as the package ships it


def _flag(args: str) -> str | None:
    """The textfile directory ARGS sets (`--flag=DIR` or `--flag DIR`), "" where it turns the collector
    off, None where it says nothing of it. ARGS reaches the unit as systemd's $ARGS: split on spaces."""
    words = " ".join(shlex.split(args)).split()
    for i, word in enumerate(words):
        if word == "--no-collector.textfile":
            return ""
        if word.startswith(TEXTFILE_FLAG + "="):
            return word.split("=", 1)[1]
        if word == TEXTFILE_FLAG and i + 1 < len(words):
            return words[i + 1]
    return None


@operation()
def exporter(found: dict, textfile_dir: str = contract.TEXTFILE_DIR):
    """
    Install prometheus-node-exporter (no Recommends: the collectors package's timers are not
    needed for the agent's file), make its textfile directory root:root 0755 (the agent writes as
    root, the exporter's user reads), and keep the unit enabled and running. Refuses an exporter
    configured to read another directory (ARGS in /etc/default/prometheus-node-exporter) or a
    directory that is a link or not a directory.

    + found: the NodeExporter fact of `textfile_dir`, read among the host's basics in one command
      (facts/host_basics.py, context.basics(): no command of its own in a no-change run)
    + textfile_dir: where the agent writes its metrics (contract.TEXTFILE_DIR)

    **Example:**

    .. code:: python

        exporter(name="prometheus-node-exporter (the agent's metrics)", found=context.basics().node_exporter)
    """
    problems = []
    flag = _flag(found["args"]) if found["version"] else None
    if flag is not None and flag != textfile_dir:
        reads = f"reads text files from {flag}" if flag else "has its textfile collector off"
        problems.append(
            f"{PACKAGE} {reads} (ARGS in {DEFAULTS}: {found['args']}), the agent writes {textfile_dir}: "
            f"remove {TEXTFILE_FLAG if flag else '--no-collector.textfile'} from ARGS"
        )
    elif flag is None and found["version"] and found["default_dir"] != textfile_dir:
        problems.append(
            f"{BINARY} reads text files from {found['default_dir']} by default, the agent writes {textfile_dir}: "
            f'set ARGS="{TEXTFILE_FLAG}={textfile_dir}" in {DEFAULTS}'
        )
    if found["dir"] is not None and found["dir"]["type"] != "directory":
        problems.append(f"{textfile_dir} is a {found['dir']['type']}, not a directory: remove it")
    if problems:
        raise OperationError(f"{host.name}: " + "; ".join(problems))
    if found["version"] and found["dir"] == DIRECTORY and found["enabled"] == "enabled" and found["active"] == "active":
        host.noop(f"{PACKAGE} {found['version']} runs, reading {textfile_dir}")
        return
    if not found["version"]:
        yield StringCommand("apt-get", "update", "-q")
        install = ("apt-get", "install", "-y", "-q", "--no-install-recommends", PACKAGE)
        yield StringCommand("env", "DEBIAN_FRONTEND=noninteractive", *install)
        # the new binary's compiled-in directory, as the refusal above checks an installed one
        wanted = f'{TEXTFILE_FLAG}="{textfile_dir}"'
        yield StringCommand(
            f"{BINARY} --help 2>&1 | grep -qF -- {shlex.quote(wanted)} || "
            f"{{ echo {shlex.quote(f'{BINARY} does not default to {wanted}')} >&2; exit 1; }}"
        )
    if found["dir"] != DIRECTORY:
        yield StringCommand("install", "-d", "-m", "755", "-o", "root", "-g", "root", QuoteString(textfile_dir))
    # Debian's package enables and starts its unit itself (its postinst, dh_installsystemd): after an
    # install here the host is asked again, as `systemctl enable` reloads systemd even where nothing
    # changes (0.6 s of a container's CPU in the lab)
    installed_now = not found["version"]
    if found["enabled"] != "enabled":
        enable = f"systemctl enable --quiet {UNIT}"
        yield StringCommand(f"systemctl is-enabled --quiet {UNIT} || {enable}" if installed_now else enable)
    if found["active"] != "active":
        start = f"systemctl start {UNIT}"
        yield StringCommand(f"systemctl is-active --quiet {UNIT} || {start}" if installed_now else start)
