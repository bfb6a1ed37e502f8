"""Following the server log: \\r and \\n both end lines, unfinished lines are progress."""

from sglang_pve.agent.logfollow import LogFollower, size, tail
from tests.unit.agent_support import append


def test_splits_on_carriage_return_and_newline_and_keeps_the_partial_line(tmp_path):
    log = str(tmp_path / "server.log")
    follower = LogFollower(log, 0)
    assert not follower.poll().grew  # no file yet
    append(
        log,
        "[2026-07-20 10:00:10 TP0] Load weight begin. avail mem=93.46 GB\n"
        "\rMulti-thread loading shards:   0% Completed | 0/64",
    )
    update = follower.poll()
    assert update.lines == ["[2026-07-20 10:00:10 TP0] Load weight begin. avail mem=93.46 GB"]
    assert update.partial_grew  # the bar is being drawn: progress without a newline
    append(log, "\rMulti-thread loading shards:  50% Completed | 32/64")
    update = follower.poll()
    assert update.lines == ["Multi-thread loading shards:   0% Completed | 0/64"] and update.partial_grew
    append(log, "\n")
    update = follower.poll()
    assert update.lines == ["Multi-thread loading shards:  50% Completed | 32/64"] and not update.partial_grew
    assert not follower.poll().grew


def test_starts_at_the_offset_and_restarts_after_truncation(tmp_path):
    log = str(tmp_path / "server.log")
    append(log, "old run line\n")
    follower = LogFollower(log, size(log))
    append(log, "new run line\n")
    assert follower.poll().lines == ["new run line"]
    open(log, "w").close()
    append(log, "after rotate\n")
    assert follower.poll().lines == ["after rotate"]


def test_partial_multibyte_character_is_not_broken(tmp_path):
    log = str(tmp_path / "server.log")
    follower = LogFollower(log, 0)
    data = "Capturing batches: 100%|██████████| 52/52\n".encode()
    with open(log, "ab") as handle:
        handle.write(data[:25])
    assert follower.poll().lines == []
    with open(log, "ab") as handle:
        handle.write(data[25:])
    assert follower.poll().lines == ["Capturing batches: 100%|██████████| 52/52"]


def test_tail_returns_last_lines_split_on_both_breaks(tmp_path):
    log = str(tmp_path / "server.log")
    append(log, "".join(f"line {i}\n" for i in range(100)) + "\rbar 1\rbar 2")
    assert tail(log, 3) == ["line 99", "bar 1", "bar 2"]
    assert tail(str(tmp_path / "missing.log")) == []


def test_any_new_byte_is_growth():
    from sglang_pve.agent.logfollow import Update

    assert Update(["a line"], False).grew and Update([], True).grew and not Update([], False).grew
