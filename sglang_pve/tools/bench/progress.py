"""The bench's live progress lines (issue 18, deliver 4), on deploy/progress.py's mechanism: while a
configuration starts, its switch's phase (the host's status); while the client runs on the target,
its progress file (agent/bench_client.py write_progress): the phase (warmup, measuring), the run,
requests done of all, output tok/s so far, and the seconds since the command began.

    [sglang1] progress: bench baseline (1/2) starting 31 s: baseline weights 20 s, starting (weights, 20s); ...
    [sglang1] progress: bench baseline (1/2) measuring: single-stream decode 7/20 requests, 81.3 output tok/s, 45 s
"""

import json
import shlex

from sglang_pve.config.safe import printable
from sglang_pve.deploy.progress import Watch, status_watch


def _prefix(name: str, position: str) -> str:
    return f"progress: bench {printable(name)} ({position})"


def starting_watch(name: str, position: str) -> Watch:
    """The transient switch of configuration `name` (position `i/n`): its phase from the host's status."""
    status = status_watch(name)
    return Watch(
        status.command,
        lambda lines, seconds: (
            f"{_prefix(name, position)} starting {seconds:.0f} s: "
            + status.say(lines, seconds).removeprefix("progress: ")
        ),
    )


def client_watch(name: str, position: str, path: str) -> Watch:
    """The client's progress file at `path` (absent before its first write: nothing is printed)."""
    command = f"cat {shlex.quote(path)} 2>/dev/null || true"
    return Watch(command, lambda lines, seconds: client_line(name, position, "\n".join(lines), seconds))


def _count(record: dict, key: str) -> int:
    value = record.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"progress file: {key} is {value!r}, not a count")
    return value


def client_line(name: str, position: str, text: str, seconds: float) -> str:
    """One line from the progress file's text (the host's: every value checked or escaped)."""
    if not text.strip():
        return f"{_prefix(name, position)} client starting, {seconds:.0f} s"
    record = json.loads(text)
    if not isinstance(record, dict):
        raise ValueError("progress file: not an object")
    done, total, tokens = _count(record, "done"), _count(record, "total"), _count(record, "output_tokens")
    run_s = record.get("seconds")
    rate = (
        f", {tokens / run_s:.1f} output tok/s"
        if isinstance(run_s, (int, float)) and not isinstance(run_s, bool) and run_s > 0 and done
        else ""
    )
    return (
        f"{_prefix(name, position)} {printable(str(record.get('phase')))}: {printable(str(record.get('label')))} "
        f"{done}/{total} requests{rate}, {seconds:.0f} s"
    )
