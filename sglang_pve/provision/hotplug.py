"""Which config changes a running container takes at once and which wait for its next start: the
one table the diff and the container operation use, read from pve-container at commit 94f5585
(src/PVE/LXC/Config.pm update_pct_config -> vmconfig_hotplug_pending for a running CT,
vmconfig_apply_pending at start; src/PVE/LXC.pm update_net, device_passthrough_hotplug,
mountpoint_hotplug, vm_start):

- ``$LXC_FASTPLUG_OPTIONS`` are written to the config at once and nothing else happens. Of those,
  hostname and hookscript still only act at the next start (LXC/Setup/Base.pm pre_start_hook sets
  the hostname; the hookscript runs at start/stop events); cores reach a running CT through
  pvestatd's cpuset rebalancing (pve-manager PVE/Service/pvestatd.pm rebalance_lxc_containers).
- memory, swap, cpulimit, cpuunits go to the cgroup; netN through update_net (veth only, which is
  every LXC netN); a new mpN or devN is hotplugged, a changed one is skipped ("don't try to hotplug
  over existing mp/dev"): it waits.
- Deleting a fastplug key, unusedN, swap, cpulimit, cpuunits or netN is done at once; any other
  deletion waits (delete= in [pve:pending]).
- Everything else waits in [pve:pending] and is applied by vm_start (a reboot is a stop + start).
- Raw ``lxc.*`` lines are read by lxc-start only: never live.

>>> [applies_live(*change) for change in [("cores", "4", "8"), ("hostname", "a", "b"), ("features", None, "nesting=1")]]
[True, False, False]
>>> stays_pending("dev0", "/dev/nvidia0", "/dev/nvidia0,mode=0666"), stays_pending("dev8", None, "/dev/nvidia8")
(True, False)
"""

import re

FASTPLUG = frozenset(
    {"description", "onboot", "startup", "protection", "hostname", "hookscript", "cores", "tags", "lock"}
)
FASTPLUG_AT_START = frozenset({"hostname", "hookscript"})  # written at once, acted on at the next start
_CGROUP = frozenset({"memory", "swap", "cpulimit", "cpuunits"})
_DELETED_LIVE = _CGROUP - {"memory"}  # memory cannot be deleted (update_pct_config: required option)
_NET = re.compile(r"^net\d+$")
_NEW_ONLY = re.compile(r"^(mp|dev)\d+$")
_UNUSED = re.compile(r"^unused\d+$")


def stays_pending(key: str, old: str | None, new: str | None) -> bool:
    """Whether PUT /config on a running CT leaves this change in [pve:pending] (``new`` None: a
    delete; ``old`` None: the key is not in the current config)."""
    if key in FASTPLUG:
        return False
    if new is None:
        return not (key in _DELETED_LIVE or _NET.match(key) or _UNUSED.match(key))
    if key in _CGROUP or _NET.match(key):
        return False
    if _NEW_ONLY.match(key):
        return old is not None
    return True


def applies_live(key: str, old: str | None, new: str | None) -> bool:
    """Whether a running CT acts on this change without a restart."""
    return key not in FASTPLUG_AT_START and not stays_pending(key, old, new)
