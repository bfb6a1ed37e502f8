"""The last bench's decode throughput and its noise per server, as Prometheus metrics beside the
agent's (node_exporter's textfile collector on the target: contract.TEXTFILE_DIR/sglang-pve-bench.prom).

    sglang_pve_bench_decode_tokens_per_second{server}         single-stream output tok/s
    sglang_pve_bench_decode_noise_tokens_per_second{server}   its spread (std_request_output_throughput,
                                                              tools/bench/metrics.py)
    sglang_pve_bench_timestamp_seconds{server}                when it was measured

Each configuration's newest successful single-stream run on this host, from the controller's
history (a bench of one configuration keeps the others' figures), written at the end of every
bench: atomically (a temp name node_exporter does not read, then mv), and only where the textfile
directory exists, as the agent's metrics.export. monitoring/alerts.yml's SglangDecodeBelowBench
compares it with SGLang's own sglang:gen_throughput.
"""

import calendar
import time
from io import BytesIO

from pyinfra.api import QuoteString, StringCommand

from sglang_pve.agent import contract
from sglang_pve.agent.metrics import family

FILE_NAME = "sglang-pve-bench.prom"


def latest(history: list[dict], host_name: str) -> dict[str, dict]:
    """configuration -> its newest successful single-stream record on `host_name`."""
    newest: dict[str, dict] = {}
    for record in history:
        if record["host"] == host_name and record["status"] == "ok" and record.get("single_stream"):
            newest[record["configuration"]] = record  # the history is appended in time order
    return newest


def render(newest: dict[str, dict]) -> str:
    rows = sorted(newest.items())
    noise = [(name, r["single_stream"].get("std_request_output_throughput")) for name, r in rows]
    return (
        "\n".join(
            [
                *family(
                    "sglang_pve_bench_decode_tokens_per_second",
                    "gauge",
                    "The last bench's single-stream output tokens per second (tasks/bench.py).",
                    [({"server": name}, r["single_stream"]["output_throughput"]) for name, r in rows],
                ),
                *family(
                    "sglang_pve_bench_decode_noise_tokens_per_second",
                    "gauge",
                    "The spread of that bench's per-request tokens per second (population standard deviation).",
                    [({"server": name}, value) for name, value in noise if value is not None],  # older rows: none
                ),
                *family(
                    "sglang_pve_bench_timestamp_seconds",
                    "gauge",
                    "When that bench measured the server.",
                    [
                        ({"server": name}, calendar.timegm(time.strptime(r["time"], "%Y-%m-%dT%H:%M:%SZ")))
                        for name, r in rows
                    ],
                ),
            ]
        )
        + "\n"
    )


def write(host, text: str) -> str | None:
    """Put the file on the target; None, or why it was not written."""
    directory = contract.TEXTFILE_DIR
    ok, _ = host.run_shell_command(StringCommand("test", "-d", QuoteString(directory)), print_output=False)
    if not ok:
        return f"no {directory} (node_exporter's textfile directory) on the target"
    final, temp = f"{directory}/{FILE_NAME}", f"{directory}/.{FILE_NAME}.tmp"  # *.prom only is read
    host.put_file(BytesIO(text.encode()), temp, print_output=False)
    moved = StringCommand("chmod", "0644", QuoteString(temp), "&&", "mv", "-f", QuoteString(temp), QuoteString(final))
    ok, output = host.run_shell_command(moved, print_output=False)
    return None if ok else f"{final} not written: {' '.join(output.output_lines) or 'mv failed'}"
