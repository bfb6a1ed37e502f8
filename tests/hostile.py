"""Hostile values and the fields they are tried in (tests/unit/test_hostile_input.py, and the lab's
systemd read-back in tests/lab/test_security.py).

Every field whose value reaches a unit, an env file, the shell rc, the venv hook, the server YAML
or a command: each value is either refused before any change (naming the key) or rendered so that
reading the file back yields exactly that value.
"""

import copy

import yaml

from tests.conftest import PROJECT, group_data

VALUES = [
    "a\nb",
    "a\rb",
    "a\x00b",
    "a\tb",
    "a\x0bb",
    "a\x0cb",
    "a\x7fb",
    "a\x85b",
    "a\u2028b",
    "a\u2029b",
    "\x1b[31mred\x1b[0m",
    "\x1b]0;title\x07",
    "line\n[Service]\nExecStartPre=/bin/sh -c id",
    'say "hi"',
    "it's",
    "$(id)",
    "`id`",
    "${HOME}",
    "$HOME",
    "$$",
    "a;b",
    "a && b",
    "a|b",
    "a>b",
    "100%",
    "%n%i%h",
    "%%",
    "a b",
    " lead",
    "trail ",
    "a\\b",
    "a\\",
    "\\n",
    "*",
    "~root",
    "#x",
    "--x",
    "٣",
    "１２",
    "²",
    "x" * 5000,
    "../../etc",
    "é-ü",
    "\u00a0",
    "a\u200bb",
    "=",
    ":",
]

SERVERS = yaml.safe_load((PROJECT / "group_data" / "servers.yml").read_text())


def _server(**overrides) -> dict:
    servers = copy.deepcopy(SERVERS)
    servers["servers"]["baseline"] = overrides
    return servers


def _nccl(variable: str):
    return lambda v: ({"nccl_profiles": {"p": {variable: v}}, "nccl_profile": "p"}, None)


# field -> (value -> (host data changes, servers document or None)), and the key a refusal names
FIELDS = {
    "nccl_profile": (lambda v: ({"nccl_profiles": {v: {}}, "nccl_profile": v}, None), "nccl_profile"),
    "NCCL_SOCKET_IFNAME": (_nccl("NCCL_SOCKET_IFNAME"), "NCCL_SOCKET_IFNAME"),
    "NCCL_PROTO": (_nccl("NCCL_PROTO"), "NCCL_PROTO"),
    "NCCL_MAX_NCHANNELS": (_nccl("NCCL_MAX_NCHANNELS"), "NCCL_MAX_NCHANNELS"),
    "NCCL_P2P_LEVEL": (_nccl("NCCL_P2P_LEVEL"), "NCCL_P2P_LEVEL"),
    "sglang_version": (lambda v: ({"sglang_version": v}, None), "sglang_version"),
    "sglang_venvs_dir": (lambda v: ({"sglang_venvs_dir": f"/opt/{v}"}, None), "sglang_venvs_dir"),
    "shell_rc": (lambda v: ({"shell_rc": f"/root/{v}"}, None), "shell_rc"),
    "shell_user": (lambda v: ({"shell_user": v}, None), "shell_user"),
    "sglang_index_url": (lambda v: ({"sglang_index_url": f"https://x/{v}"}, None), "sglang_index_url"),
    "unit_limits.memlock": (lambda v: ({"unit_limits": {"memlock": v}}, None), "memlock"),
    "server name": (lambda v: ({"active_server": None}, {"servers": {v: {"model-path": "/m"}}}), "servers."),
    "model-path": (lambda v: (None, _server(**{"model-path": f"/m/{v}"})), "model-path"),
    "served-model-name": (lambda v: (None, _server(**{"served-model-name": v})), "served-model-name"),
    "speculative-draft-model-path": (
        lambda v: (
            None,
            _server(
                **{
                    "speculative-algorithm": "EAGLE3",
                    "speculative-draft-model-path": f"/d/{v}",
                    "speculative-num-steps": 3,
                    "speculative-eagle-topk": 1,
                    "speculative-num-draft-tokens": 4,
                }
            ),
        ),
        "speculative-draft-model-path",
    ),
    "chat-template": (lambda v: (None, _server(**{"chat-template": v})), "chat-template"),
    "env value": (lambda v: (None, _server(env={"SGLANG_FOO": v})), "env.SGLANG_FOO"),
    "env name": (lambda v: (None, _server(env={v: "1"})), "env."),
}


def data_for(field: str, value: str, tmp_path) -> dict:
    """Host data (lab group data) with `value` put into `field`."""
    make, _ = FIELDS[field]
    changes, servers = make(value)
    data = group_data("all")
    data.update(changes or {})
    if servers is not None:
        (tmp_path / "servers.yml").write_text(yaml.safe_dump(servers))
        data["servers_file"] = str(tmp_path / "servers.yml")
    return data


def systemd_words(text: str) -> list[str]:
    """systemd's unquoting of one directive value (double quotes, backslash escapes)."""
    words, current, quoted, i = [], None, False, 0
    while i < len(text):
        char = text[i]
        if char == "\\" and quoted:
            current, i = (current or "") + text[i + 1], i + 2
            continue
        if char == '"':
            quoted, current = not quoted, current or ""
        elif char == " " and not quoted:
            if current is not None:
                words.append(current)
            current = None
        else:
            current = (current or "") + char
        i += 1
    return words + ([current] if current is not None else [])


def in_base64(secret: str, text: str) -> bool:
    """Whether `secret` appears base64-encoded in `text` at any of the three byte alignments (a line
    in the middle of a file that was sent back base64-encoded, as FileText sends a whole file)."""
    import base64

    if len(secret) < 12:
        raise ValueError("a canary this short cannot be told apart in base64 text: use 12 characters or more")
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + secret.encode()).decode()
        if encoded[4 : len(encoded) - 4] in text:  # the characters that depend on the secret alone
            return True
    return False
