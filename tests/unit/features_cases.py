"""How pve-container judges a `features` change by a caller other than root@pam (src/PVE/LXC.pm
check_ct_modify_config_perm, commit 94f5585), one case per branch of its features rule:
(old features in the config, new value sent or None for a delete, verdict). The verdict is
"other" (other_changed: "changing feature flags (except nesting) is only allowed for root@pam"),
"nesting" (nesting_changed: VM.Allocate checked) or None (neither). Shared by the toolkit's
token check (tests/unit/test_proxmox_token_perm.py) and the emulator's (same file)."""

CASES = [
    # existing container with features: each flag old-vs-new, '' when absent
    ("keyctl=1,nesting=1", "keyctl=1,nesting=0", "nesting"),
    ("keyctl=1,nesting=1", "nesting=0,keyctl=1", "nesting"),
    ("fuse=1,nesting=0", "fuse=on,nesting=1", "nesting"),  # parse_boolean: on is 1
    ("keyctl=1,nesting=1", "keyctl=1,nesting=1", None),
    ("nesting=1", "nesting=1,keyctl=1", "other"),
    ("keyctl=1,nesting=1", "nesting=1", "other"),  # keyctl 1 -> '' is a change
    ("nesting=1", "nesting=1,keyctl=0", "other"),  # '' -> 0 is a change too
    ("mount=nfs", "mount=nfs;cifs", "other"),
    # new container or no features defined: the new flags' keys
    (None, "nesting=1", "nesting"),
    (None, "nesting=0", "nesting"),
    (None, "nesting=1,keyctl=0", "other"),
    (None, "fuse=1", "other"),
    # delete: the old flags' keys
    ("nesting=1", None, "nesting"),
    ("keyctl=1,nesting=1", None, "other"),
]
