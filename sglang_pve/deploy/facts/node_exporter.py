"""prometheus-node-exporter on a container, in one command: the package, its textfile directory,
its unit and where it reads text files from.

Debian's package (bookworm: 1.5.0-1+b6, read from its .deb; Ubuntu 24.04's comes from Debian's
packaging, not read here: the binary's own --help default is what the operation checks): the unit
prometheus-node-exporter.service runs `/usr/bin/prometheus-node-exporter $ARGS` as User=prometheus
with ARGS from /etc/default/prometheus-node-exporter (ARGS="" as shipped); the package's build
makes --collector.textfile.directory default to /var/lib/prometheus/node-exporter (its --help
says so), a directory the package ships root:root 0755, and README.textfile asks for files there
"readable by the prometheus user", written atomically (temp file + rename).
"""

import shlex

from pyinfra.api import FactBase

PACKAGE = "prometheus-node-exporter"
UNIT = f"{PACKAGE}.service"
BINARY = f"/usr/bin/{PACKAGE}"
DEFAULTS = f"/etc/default/{PACKAGE}"
TEXTFILE_FLAG = "--collector.textfile.directory"


def script(directory: str) -> str:
    """Shell printing one `key<TAB>value` line per fact: version (or -), dir (stat's `%F:%a:%U:%G`,
    a link not followed, or -), enabled, active, args (ARGS as written) and default_dir (the
    binary's compiled-in textfile directory)."""
    d, unit = shlex.quote(directory), shlex.quote(UNIT)
    return (
        f"dpkg-query -W -f='version\\t${{Status}}\\t${{Version}}\\n' {PACKAGE} 2>/dev/null || printf 'version\\t-\\n'; "
        f"if [ -L {d} ] || [ -e {d} ]; then printf 'dir\\t%s\\n' \"$(stat -c '%F:%a:%U:%G' {d})\"; "
        "else printf 'dir\\t-\\n'; fi; "
        f"printf 'enabled\\t%s\\n' \"$(systemctl is-enabled {unit} 2>/dev/null)\"; "
        f"printf 'active\\t%s\\n' \"$(systemctl is-active {unit} 2>/dev/null)\"; "
        f"printf 'args\\t%s\\n' \"$(sed -n 's/^ARGS=//p' {DEFAULTS} 2>/dev/null | tail -n 1)\"; "
        f"if [ -x {BINARY} ]; then printf 'default_dir\\t%s\\n' "
        f'"$({BINARY} --help 2>&1 | sed -n \'s/.*{TEXTFILE_FLAG}="\\([^"]*\\)".*/\\1/p\')"; fi'
    )


class NodeExporter(FactBase[dict]):
    """The exporter's state; "version" None when the package is not installed, "dir" None when
    the textfile directory is missing.

    host.get_fact(NodeExporter, textfile_dir="/var/lib/prometheus/node-exporter")
    # {"version": "1.5.0-1+b6", "dir": {"type": "directory", "mode": "755", "user": "root",
    #  "group": "root"}, "enabled": "enabled", "active": "active", "args": '""',
    #  "default_dir": "/var/lib/prometheus/node-exporter"}
    """

    def command(self, textfile_dir):
        return script(textfile_dir)

    def process(self, output):
        fields = dict(line.split("\t", 1) for line in output if "\t" in line)
        status, _, version = fields.get("version", "-").partition("\t")
        kind, mode, user, group = (fields.get("dir", "-").split(":") + ["", "", ""])[:4]
        return {
            "version": version if status == "install ok installed" else None,
            "dir": None if kind == "-" else {"type": kind, "mode": mode, "user": user, "group": group},
            "enabled": fields.get("enabled", ""),
            "active": fields.get("active", ""),
            "args": fields.get("args", ""),
            "default_dir": fields.get("default_dir") or None,
        }
