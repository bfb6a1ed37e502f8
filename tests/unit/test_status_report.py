"""The status table: one row per configuration, GPUs collapsed, foreign holders named."""

from sglang_pve.tools.status_render import render

REPORT = {
    "driver": "580.95.05",
    "gpu_error": None,
    "gpus": [
        {"index": i, "memory_used_mib": 87026 if i < 7 else 3, "memory_total_mib": 97887, "utilization_pct": 0}
        for i in range(8)
    ],
    "holders": [
        {"pid": 4242, "devices": ["/dev/nvidia0"], "cmdline": "python3 rogue.py", "ours": False},
        {"pid": 17, "devices": ["/dev/nvidia1"], "cmdline": "python -m sglang.launch_server", "ours": True},
    ],
    "servers": [
        {
            "server": "baseline",
            "state": {"ActiveState": "active", "SubState": "running"},
            "phase": "ready",
            "seconds_in_phase": 3725,
            "health": {"status": 200},
            "restarts": {"in_window": 1},
            "verdict": "ready",
            "last_log_line": "[...] Decode batch, accept len: 2.85",
            "diagnosis": None,
        },
        {
            "server": "eagle3-2step",
            "state": {"ActiveState": "failed", "SubState": "failed"},
            "phase": "cuda_graph",
            "seconds_in_phase": 11,
            "health": None,
            "restarts": {"in_window": 0},
            "verdict": "failed: stalled in cuda_graph",
            "last_log_line": "Capture cuda graph begin.",
            "diagnosis": "/var/lib/sglang-pve/diagnoses/eagle3-2step-x-stall.json",
        },
    ],
}


def test_rows_and_details():
    text = render("sglang1", REPORT)
    lines = text.splitlines()
    assert lines[0] == "sglang1:"
    baseline = next(line for line in lines if line.strip().startswith("baseline "))
    assert "active/running" in baseline and "1h02m" in baseline and "200" in baseline and baseline.endswith("ready")
    assert "eagle3-2step diagnosis: /var/lib/sglang-pve/diagnoses/eagle3-2step-x-stall.json" in text
    assert "0-6: 87026/97887 MiB 0%, 7: 3/97887 MiB 0%" in text
    assert "foreign holder of /dev/nvidia0: PID 4242 python3 rogue.py" in text
    assert "PID 17" not in text


def test_not_deployed_host():
    assert "not deployed yet" in render("sglang1", None)


def test_strings_from_the_host_are_printed_with_control_characters_escaped():
    hostile = dict(
        REPORT,
        holders=[
            {
                "pid": 4242,
                "devices": ["/dev/nvidia0"],
                "ours": False,
                "cmdline": "python3 x.py\x1b[2J\x1b[1;1Hsglang1: all good\nfake line",
            }
        ],
    )
    hostile["servers"] = [dict(REPORT["servers"][1], last_log_line="boom\r\x1b]0;pwned\x07")]
    text = render("sglang1", hostile)
    assert not any(c in text for c in "\x1b\r\x07") and len(text.splitlines()) == 7  # no forged line
    assert "PID 4242 python3 x.py\\x1b[2J\\x1b[1;1Hsglang1: all good\\nfake line" in text
    assert "last log line: boom\\r\\x1b]0;pwned\\x07" in text


def test_a_tp_group_members_row_names_its_rank():
    member = {**REPORT["servers"][0], "server": "tp", "group": {"name": "kimi", "rank": 1, "nnodes": 2}}
    text = render("sglang5", {**REPORT, "servers": [member]})
    row = next(line for line in text.splitlines() if line.strip().startswith("tp "))
    assert row.strip().startswith("tp [kimi rank 1/2]") and row.endswith("ready")


def test_restarts_show_the_count_against_the_cap_and_the_crash_policy():
    crashed = {
        "server": "baseline",
        "state": {"ActiveState": "failed", "SubState": "failed"},
        "restarts": {"in_window": 1, "max": 3, "on_crash": "restart (cap 3 within 3600s)", "crash_restart_at": None},
        "verdict": "restarting in 30s: crashed after ready: the main process ended by itself",
    }
    pending = dict(crashed, restarts=dict(crashed["restarts"], crash_restart_at="2026-12-01T18:00:30Z"))
    off = dict(crashed, server="eagle3", restarts={"in_window": 0, "max": 3, "on_crash": "off"}, verdict="failed: x")
    report = dict(REPORT, servers=[crashed])
    (row,) = [line for line in render("sglang1", report).splitlines() if line.strip().startswith("baseline ")]
    assert " 1/3 " in row and " restart " in row, row
    (row,) = [line for line in render("sglang1", dict(report, servers=[pending])).splitlines() if "baseline " in line]
    assert " restart at 2026-12-01T18:00:30Z " in row, row
    (row,) = [line for line in render("sglang1", dict(report, servers=[off])).splitlines() if "eagle3 " in line]
    assert " 0/3 " in row and " off " in row, row
    assert "RESTARTS" in render("sglang1", report) and "ON CRASH" in render("sglang1", report)
