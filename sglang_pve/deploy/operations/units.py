"""systemd units enabled and running, several with one fact (facts/units.py): pyinfra's own
systemd.service reads two facts per unit (operations/systemd.py service, 3.10.0), which this
follows otherwise: daemon-reload first, then start (restart when asked and already running),
then enable."""

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from sglang_pve.deploy.facts.units import UnitStates


@operation()
def running(units: list[str], restarted: list[str] | None = None, daemon_reload: bool = False):
    """
    Every unit enabled and running; those in `restarted` restarted when they run already (started
    when not). systemd reloads its units first when asked, or when it says one of these needs it
    (NeedDaemonReload: a run killed between a unit file's write and its reload).

    + units: full unit names, e.g. ["sglang-pve-nvidia-nodes.service"]
    + restarted: the units among them to restart
    + daemon_reload: reload systemd's units first

    **Example:**

    .. code:: python

        running(name="Device-node unit", units=["sglang-pve-nvidia-nodes.service"],
                restarted=["sglang-pve-nvidia-nodes.service"], daemon_reload=True)
    """
    states = host.get_fact(UnitStates, units=units)
    found = {unit: states.get(unit) for unit in units}
    commands = []
    if daemon_reload or any(state and state.need_reload for state in found.values()):
        commands.append(StringCommand("systemctl", "daemon-reload"))
    for unit, state in found.items():
        is_running = state is not None and state.running
        if not is_running:
            commands.append(StringCommand("systemctl", "start", QuoteString(unit)))
        elif unit in (restarted or []):
            commands.append(StringCommand("systemctl", "restart", QuoteString(unit)))
        if state is None or not state.is_enabled:
            commands.append(StringCommand("systemctl", "enable", QuoteString(unit)))
    if not commands:
        host.noop(f"{', '.join(units)} enabled and running")
        return
    yield from commands
