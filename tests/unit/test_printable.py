"""Strings from a host reach the terminal through safe.printable() on every path the controller
prints them: control characters and bidi/format characters (Trojan Source, CVE-2021-42574) are
written as escapes, so host text can neither forge a line nor show itself in another order."""

import json
import logging
import types

import pytest

from sglang_pve.config.safe import control_characters, printable, printable_tree
from sglang_pve.deploy.facts.servers import ServersState
from sglang_pve.deploy.operations import files, systemd
from sglang_pve.tools.bench import runner as bench
from sglang_pve.tools.nccl import runner as nccl
from sglang_pve.tools.status_render import releases_table, render_release

BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]
BIDI += ["\u200e", "\u200f", "\u061c"]
FORMAT = ["\u200b", "\ufeff", "\u00ad", "\u2028", "\u2029", "\x1b", "\x9b", "\r", "\n", "\x00", "\x7f"]
HOSTILE = "ok" + "".join(BIDI + FORMAT) + "end"


def raw(text: str) -> list[str]:
    """The characters of BIDI + FORMAT still present in `text` (its own line breaks aside: each
    test counts the lines, so a forged one shows)."""
    return [c for c in BIDI + FORMAT if c in text and c != "\n"]


@pytest.mark.parametrize("character", BIDI + FORMAT)
def test_every_bidi_and_control_character_is_escaped_and_refused_as_input(character):
    shown = printable(f"a{character}b")
    assert character not in shown and shown == "a" + repr(character)[1:-1] + "b"
    assert control_characters(f"a{character}b")  # the same alphabet refuses it where input enters


def test_ordinary_unicode_stays_as_it_is():
    assert printable("Grüße, 日本語, ünïcode — ok") == "Grüße, 日本語, ünïcode — ok"
    assert printable_tree({"k\u202e": ["v\n", 1, None, {"x": "\u2066"}]}) == {
        "k\\u202e": ["v\\n", 1, None, {"x": "\\u2066"}]
    }


def _report(**fields):
    record = {"id": "r1", "sglang_version": "1.0", "active_server": "a", "nccl_profile": "default", "files": {}}
    record |= fields
    return types.SimpleNamespace(releases=[record], current="r1", previous=None, current_record=record)


def test_releases_table_and_release_line_escape_the_hosts_records():
    report = _report(active_server=HOSTILE, user=HOSTILE, commit=HOSTILE, failure=HOSTILE, status="ready")
    table = releases_table("h", report)
    assert raw(table) == [] and "ok\\u202a" in table and len(table.splitlines()) == 4
    line = render_release("h", report)
    assert raw(line) == [] and "\\u202e" in line


class FakeHost:
    """What the runners call on pyinfra's host: each command's output, by the first word."""

    name, print_prefix = "sglang1", "[sglang1] "

    def __init__(self, outputs: dict[str, tuple[bool, list[str]]]):
        self.outputs, self.logged = outputs, []

    def run_shell_command(self, command, print_output=False):
        assert not print_output  # pyinfra would print the host's text raw
        ok, lines = self.outputs.get(command.bits[0], (True, []))
        return ok, types.SimpleNamespace(output_lines=lines, stdout="\n".join(lines), stderr="\n".join(lines))

    def put_file(self, *args, **kwargs):
        return True

    def log(self, text, log_func=None):
        self.logged.append(text)

    def get_fact(self, fact, **kwargs):
        return types.SimpleNamespace(text=f"line one\n{HOSTILE}\n")


def test_bench_lines_status_record_and_client_output_are_escaped(caplog, monkeypatch):
    said = [f"switch said {HOSTILE}", 'switch-timings {"stop_s": 1.0, "start_s": 2.0}']
    record = json.dumps({"verdict": f"failed: {HOSTILE}", "diagnosis": "/d/b.json"})
    client = json.dumps({"runs": [], "server_info": {"version": HOSTILE}})
    host = FakeHost({"/usr/bin/env": (False, said)})
    monkeypatch.setattr(bench.releases, "transient", lambda server, lease: bench.StringCommand("/usr/bin/env"))
    host.outputs["cat"] = (True, [record])
    started = bench._switch(host, "b", "lease")
    assert raw(" ".join(started.lines)) == [] and raw(started.diagnosis) == [] and "\\u202e" in started.diagnosis
    host.outputs |= {"python3": (True, [f"progress {HOSTILE}"]), "cat": (True, [client])}
    job = types.SimpleNamespace(endpoints={"b": ("127.0.0.1", 8000)}, plan={}, api_key=None)
    with caplog.at_level(logging.INFO, logger="pyinfra"):
        result = bench._run_client(host, job, "b", "1/1")
    assert raw(result["server_info"]["version"]) == [] and "\\u2066" in result["server_info"]["version"]
    assert "progress ok\\u202a" in caplog.text and raw(caplog.text) == [] and len(caplog.records) == 1


def test_the_nccl_probe_output_and_its_report_are_escaped(caplog, monkeypatch, tmp_path):
    host = FakeHost({"/venv/python": (True, [f"rank 0 {HOSTILE}"])})
    host.outputs["cat"] = (True, [json.dumps({"nccl_version": HOSTILE})])
    seen = []
    monkeypatch.setattr(nccl.analysis, "render", lambda data, mix: seen.append(data) or json.dumps(data))
    monkeypatch.setattr(nccl.analysis, "analyse", lambda data, mix: {"overall": types.SimpleNamespace(winner=None)})
    monkeypatch.setattr("pyinfra.host", host, raising=False)
    job = nccl.ProbeJob("/venv/python", {}, 1, 1, 1, 1.0, 1, {}, False, tmp_path, tmp_path)
    with caplog.at_level(logging.INFO, logger="pyinfra"):
        nccl.run(job)
    assert raw(seen[0]["nccl_version"]) == [] and "\n" not in seen[0]["nccl_version"]
    assert raw(caplog.text) == [] and "rank 0 ok\\u202a" in caplog.text
    assert [r.getMessage().count("\n") for r in caplog.records] == [0, 1]  # the probe's line; report + saved


def test_the_diff_of_a_hosts_file_and_foreign_unit_names_are_escaped(caplog, monkeypatch):
    host = FakeHost({})
    monkeypatch.setattr(files, "host", host)
    monkeypatch.setattr(systemd, "host", host)
    file = files.ManagedFile("/etc/x", "line one\nline two\n")
    current = types.SimpleNamespace(sha1="0" * 40)
    with caplog.at_level(logging.INFO, logger="pyinfra"):
        files.show_diff(file, current)
        systemd._warn_foreign(ServersState(installed={f"sglang-{HOSTILE}.service": False}), {})
    assert raw(caplog.text) == [] and caplog.text.count("\\u202e") == 2
    assert not any("\n" in r.getMessage() for r in caplog.records)
