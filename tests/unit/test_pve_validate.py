"""The schema validator alone, on hand-written schemas shaped like the dump: PVE's messages."""

from lab.pve.validate import parse_property_string, verify

DEV = {
    "type": "string",
    "optional": 1,
    "format": {
        "path": {"type": "string", "default_key": 1, "optional": 1, "format": "pve-lxc-dev-string"},
        "mode": {"type": "string", "optional": 1, "pattern": "0[0-7]{3}"},
        "gid": {"type": "integer", "optional": 1, "minimum": 0},
        "deny-write": {"type": "boolean", "optional": 1},
    },
}
SCHEMA = {
    "additionalProperties": 0,
    "properties": {
        "vmid": {"type": "integer", "minimum": 100, "maximum": 999999999, "format": "pve-vmid"},
        "onboot": {"type": "boolean", "optional": 1},
        "cmode": {"type": "string", "optional": 1, "enum": ["shell", "console", "tty"]},
        "hostname": {"type": "string", "optional": 1, "format": "dns-name", "maxLength": 255},
        "mounts": {"type": "string", "optional": 1, "pattern": "(?^:[a-zA-Z0-9_; ]+)"},
        "dev[n]": DEV,
        "net[n]": {"type": "string", "optional": 1},
        "delete": {"type": "string", "optional": 1, "format": "pve-configid-list"},
    },
}


def test_valid_request_has_no_errors():
    assert (
        verify(
            SCHEMA,
            {
                "vmid": "129",
                "onboot": "1",
                "cmode": "tty",
                "hostname": "gpu-1",
                "mounts": "nfs;cifs",
                "dev0": "/dev/nvidia0,mode=0666,deny-write=yes",
                "dev255": "path=/dev/nvidia-uvm",
                "net31": "x",
                "delete": "dev1,mp0",
            },
        )
        == {}
    )


def test_booleans_only_0_and_1_on_the_wire_json_true_accepted():
    assert verify(SCHEMA, {"vmid": "129", "onboot": "True"}) == {"onboot": "type check ('boolean') failed - got 'True'"}
    assert verify(SCHEMA, {"vmid": "129", "onboot": True}) == {}


def test_unknown_keys_and_indexes_out_of_range():
    errors = verify(
        SCHEMA,
        {
            "vmid": "129",
            "lxc.cgroup2.devices.allow": "c 195:* rwm",
            "dev256": "/dev/x",
            "net32": "x",
            "dev01": "/dev/x",
        },
    )
    assert set(errors) == {"lxc.cgroup2.devices.allow", "dev256", "net32", "dev01"}
    assert set(errors.values()) == {
        "property is not defined in schema and the schema does not allow additional properties"
    }


def test_required_types_ranges_enums_patterns_formats():
    errors = verify(
        SCHEMA, {"vmid": "99", "cmode": "tmux", "hostname": "bad_name", "mounts": "nfs,cifs", "delete": "0bad"}
    )
    assert errors == {
        "vmid": "invalid format - value does not look like a valid VM ID\n",
        "cmode": "value 'tmux' does not have a value in the enumeration 'shell, console, tty'",
        "hostname": "invalid format - value does not look like a valid DNS name\n",
        "mounts": "value does not match the regex pattern",
        "delete": "invalid format - invalid configuration ID '0bad'\n",
    }
    assert verify(SCHEMA, {}) == {"vmid": "property is missing and it is not optional"}
    assert verify(SCHEMA, {"vmid": "1000000000"})["vmid"].startswith("invalid format")
    assert verify(SCHEMA, {"vmid": "12a"}) == {"vmid": "type check ('integer') failed - got '12a'"}


def test_property_strings():
    assert parse_property_string(DEV["format"], "/dev/nvidia0,deny-write=on") == {
        "path": "/dev/nvidia0",
        "deny-write": "1",
    }
    errors = verify(
        SCHEMA,
        {
            "vmid": "129",
            "dev0": "/dev/nvidia0,foo=1",
            "dev1": "/dev/nvidia1,mode=666",
            "dev2": "/tmp/x",
            "dev3": "/dev/a,/dev/b",
        },
    )
    assert errors == {
        "dev0": "invalid format - invalid key in comma-separated list property: foo\n",
        "dev1": "invalid format - format error\ndev1.mode: value does not match the regex pattern\n",
        "dev2": "invalid format - format error\ndev2.path: invalid format - /tmp/x is not a valid device path\n\n",
        "dev3": "invalid format - duplicate key in comma-separated list property: path\n",
    }
