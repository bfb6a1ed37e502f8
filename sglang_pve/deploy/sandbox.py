"""The server's sandbox: ONE list of systemd properties, for the unit's [Service] section
(templates/sglang-server.service.j2) and the preflight judge's `systemd-run -p NAME=VALUE`
(sglang_pve/agent/preflight_probe.py gets them in its spec, from deploy/preflight's judge_sandbox),
so the judge, which runs SGLang's parser and with it a model's remote code, is held exactly as the
server is (tests/lab/test_sandbox.py). Add a hardening property here, not in the template.

    identity("sglang", ["video"])  # [("User", "sglang"), ("DynamicUser", "yes"), ("SupplementaryGroups", "video")]
    PROPERTIES[:2]                 # (("UMask", "0077"), ("NoNewPrivileges", "yes"))

Every property must be settable on a transient unit too (systemd-run's bus_append_execute_property,
src/shared/bus-unit-util.c in systemd/systemd; the lab test runs it). Values are literal systemd
syntax: no specifiers, no quoting needed.
"""

# A DynamicUser's UID: allocated by systemd unless a static user of that name exists; the judge
# of a root server ("root" asked for explicitly) still runs as one of these, never as root.
JUDGE_USER = "sglang-pve-judge"

PROPERTIES: tuple[tuple[str, str], ...] = (
    ("UMask", "0077"),
    ("NoNewPrivileges", "yes"),
    ("CapabilityBoundingSet", ""),
    ("AmbientCapabilities", ""),
    ("ProtectSystem", "strict"),
    ("ProtectHome", "yes"),
    ("PrivateTmp", "yes"),
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectKernelLogs", "yes"),
    ("ProtectControlGroups", "yes"),
    ("ProtectClock", "yes"),
    ("ProtectHostname", "yes"),
    ("RestrictSUIDSGID", "yes"),
    ("RestrictRealtime", "yes"),
    ("RestrictNamespaces", "yes"),
    ("LockPersonality", "yes"),
    ("SystemCallArchitectures", "native"),
    ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6 AF_NETLINK"),
)


def identity(user: str, groups: list[str]) -> list[tuple[str, str]]:
    """Who the sandboxed process is: a dedicated (dynamic) user and its supplementary groups."""
    return [("User", user), ("DynamicUser", "yes")] + ([("SupplementaryGroups", " ".join(groups))] if groups else [])
