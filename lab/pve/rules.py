"""Rules the schema does not carry, from pve-container (src/PVE/LXC.pm
check_ct_modify_config_perm; LXC/Config.pm classify_mountpoint): what only root@pam may set.
A token of root@pam is not root@pam.
"""

import re

from .errors import perm_error
from .validate import parse_boolean


def mountpoint_type(volume: str) -> str:
    """classify_mountpoint: "device" (/dev/...), "bind" (another absolute path) or "volume"."""
    if volume.startswith("/"):
        return "device" if volume.startswith("/dev/") else "bind"
    return "volume"


def default_key_value(value: str, key: str) -> str:
    """The default key's value of a property string: the part without "k=", or ``key=``."""
    for part in value.split(","):
        if "=" not in part:
            return part
        if part.startswith(f"{key}="):
            return part[len(key) + 1 :]
    return ""


def mp_volume(value: str) -> str:
    """The volume of a rootfs/mpN property string."""
    return default_key_value(value, "volume")


def dev_path(value: str) -> str:
    """The device path of a devN property string."""
    return default_key_value(value, "path")


def parse_features(value: str | None) -> dict:
    """PVE::LXC::Config->parse_features: {} for none; booleans as parse_boolean reads them."""
    res = {}
    for part in (value or "").split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            res[k] = parse_boolean(v) or v
    return res


def _by_keys(features: dict) -> str | None:
    if set(features) == {"nesting"}:
        return "nesting"
    return "other" if features else None


def feature_change(old: str | None, new: str | None) -> str | None:
    """The features branch of check_ct_modify_config_perm (pve-container src/PVE/LXC.pm, commit
    94f5585): "other" (other_changed: root@pam only), "nesting" (nesting_changed: VM.Allocate) or
    None. ``new`` None is a delete, judged by the old flags' keys; with old features, each flag
    compared old-vs-new ('' when absent); with none, the new flags' keys."""
    if new is None:
        return _by_keys(parse_features(old))
    after = parse_features(new)
    if not old:
        return _by_keys(after)
    before = parse_features(old)
    changed = {k for k in set(before) | set(after) if before.get(k, "") != after.get(k, "")}
    if changed - {"nesting"}:
        return "other"
    return "nesting" if changed else None


def check_modify_perm(node, ident, vmid: int, old: dict | None, new: dict, delete: list, unprivileged) -> None:
    """check_ct_modify_config_perm: root@pam may change anything; everyone else gets PVE's
    403 for devN, non-volume mount points, feature flags and hookscripts, and needs the
    privileges the emulator grants (all or none, see auth.py)."""
    if ident.is_root:
        return
    for key, is_delete in sorted([(k, False) for k in new] + [(k, True) for k in delete]):
        if re.match(r"^(rootfs|mp\d+)$", key):
            node.check_priv(ident, f"/vms/{vmid}", "VM.Config.Disk")
            if not is_delete:
                kind = mountpoint_type(mp_volume(new[key]))
                if kind != "volume":
                    raise perm_error(f"mount point type {kind} is only allowed for root@pam")
        elif re.match(r"^dev\d+$", key):
            raise perm_error("configuring device passthrough is only allowed for root@pam")
        elif key == "features":
            if not unprivileged:
                raise perm_error("changing feature flags for privileged container is only allowed for root@pam")
            change = feature_change((old or {}).get("features"), None if is_delete else new.get("features"))
            if change == "other":
                raise perm_error("changing feature flags (except nesting) is only allowed for root@pam")
            if change == "nesting":
                node.check_priv(ident, f"/vms/{vmid}", "VM.Allocate")
        elif key == "hookscript":
            raise perm_error("changing the hookscript is only allowed for root@pam")
        else:
            node.check_priv(ident, f"/vms/{vmid}", "VM.Config.Options")
