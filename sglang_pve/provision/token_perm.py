"""What an API token may not change even when it belongs to root@pam, as pve-container decides it
(src/PVE/LXC.pm check_ct_modify_config_perm, commit 94f5585): the caller of a token request is
``root@pam!name``, which is not ``root@pam``, so every root-only rule applies to it.

`features` is judged old-vs-new, as PVE does: on a container whose config has features, a flag
whose value differs (a flag absent on one side reads as '') is a change; nesting alone may change,
any other flag needs root@pam. With no features yet (create, or none set), or on a delete, what
counts is the flags of the one string there is: only `nesting` is allowed, any other key is not.
A privileged container's features are root-only whatever changes.

>>> feature_change("keyctl=1,nesting=1", "keyctl=1,nesting=0")
'nesting'
>>> feature_change("keyctl=1,nesting=1", None)  # a delete drops keyctl too
'other'
>>> feature_change(None, "nesting=1,keyctl=0")  # no old features: any key but nesting counts
'other'
>>> feature_change("fuse=1", "fuse=on") is None
True
"""

from sglang_pve.config.errors import Problem
from sglang_pve.provision.diff import ConfigDiff
from sglang_pve.provision.propstring import FORMATS

_FEATURES = FORMATS["features"]


def _flags(value: str | None) -> dict[str, str]:
    """PVE::LXC::Config->parse_features: {} for none, booleans read by parse_boolean."""
    return _FEATURES.normalized(value) if value else {}


def _by_keys(flags: dict[str, str]) -> str | None:
    if set(flags) == {"nesting"}:
        return "nesting"
    return "other" if flags else None


def feature_change(old: str | None, new: str | None) -> str | None:
    """What a features change is to check_ct_modify_config_perm: "other" (root@pam only),
    "nesting" (VM.Allocate) or None (nothing changed). ``new`` None is a delete."""
    if new is None:
        return _by_keys(_flags(old))
    after = _flags(new)
    if not old:
        return _by_keys(after)
    before = _flags(old)
    changed = {k for k in before.keys() | after.keys() if before.get(k, "") != after.get(k, "")}
    if changed - {"nesting"}:
        return "other"
    return "nesting" if changed else None


def token_refusals(diff: ConfigDiff, unprivileged: bool) -> list[Problem]:
    """What an API token may not do even for root@pam: device passthrough (devN), and features
    of a privileged container or beyond nesting (feature_change)."""
    problems = []
    devices = [c.key for c in diff.changes if c.key.startswith("dev")]
    if devices:
        problems.append(
            Problem(
                "proxmox_api.token_name",
                ", ".join(devices),
                "an API token cannot configure device passthrough (devN), even for root@pam: "
                "Proxmox allows it only for root@pam itself",
                "use root@pam with a password (password_env or password_file), or passthrough: raw",
            )
        )
    features = next((c for c in diff.changes if c.key == "features"), None)
    if features is None:
        return problems
    what = f"{features.old or '(unset)'} -> {features.new or '(deleted)'}"
    if not unprivileged:
        reason = "an API token cannot change any feature of a privileged container, even for root@pam"
    elif feature_change(features.old, features.new) == "other":
        reason = "an API token cannot change a feature other than nesting, even for root@pam"
    else:
        return problems
    problems.append(
        Problem(
            "proxmox_api.token_name",
            what,
            f"{reason}: Proxmox allows it only for root@pam itself",
            "use root@pam with a password (password_env or password_file)",
        )
    )
    return problems
