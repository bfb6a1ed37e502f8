"""tasks/bench.py --data promote=1's parts: the decision (beyond the noise, never from a run with a
failed row) and the promoted file the inventories read as host data."""

from types import SimpleNamespace

import pydantic
import pytest

from sglang_pve.config.bench import BenchOptions
from sglang_pve.tools import host_files
from sglang_pve.tools.bench import promote
from sglang_pve.tools.nccl import measured
from tests.unit.bench_support import row


def test_the_fastest_beyond_the_noise_is_promoted():
    rows = [row("baseline", 82.5), row("eagle3-2step", 94.0), row("eagle3-5step", 86.7)]
    verdict = promote.decide(rows, "baseline")
    assert verdict.winner == "eagle3-2step"
    assert verdict.why == "eagle3-2step 94.0 vs baseline 82.5 output tok/s: +11.5 beyond the noise 1.0"


def at(record: dict, concurrency: int, tok_s: float, noise: float) -> dict:
    """`record` with a sweep run at `concurrency`."""
    run = {"concurrency": concurrency, "output_throughput": tok_s, "std_request_output_throughput": noise}
    return {**record, "sweep": [*record.get("sweep", []), run]}


def test_a_named_concurrency_judges_by_its_throughput_and_its_noise_scaled_by_the_level():
    """eagle3-2step wins single-stream, baseline at concurrency 8 (speculation pays less in a batch)."""
    rows = [at(row("baseline", 82.5), 8, 520.0, 1.0), at(row("eagle3-2step", 94.0), 8, 470.0, 1.0)]
    assert promote.decide(rows, "eagle3-2step").winner is None  # single-stream: it already runs and is fastest
    verdict = promote.decide(rows, "eagle3-2step", concurrency=8)
    assert verdict.winner == "baseline"
    assert verdict.why == (
        "baseline 520.0 vs eagle3-2step 470.0 output tok/s at concurrency 8: +50.0 beyond the noise 16.0"
    )
    close = [at(row("baseline", 82.5), 8, 480.0, 1.0), at(row("eagle3-2step", 94.0), 8, 470.0, 1.0)]
    assert "within the noise 16.0" in promote.decide(close, "eagle3-2step", concurrency=8).why  # 2 x 1.0 x 8
    unmeasured = [at(row("baseline", 82.5), 4, 300.0, 1.0), at(row("eagle3-2step", 94.0), 8, 470.0, 1.0)]
    assert "a row failed (baseline: failed)" in promote.decide(unmeasured, "eagle3-2step", concurrency=8).why


def test_promote_by_names_a_measured_level():
    assert BenchOptions.model_validate({"sweep": "4,8", "promote_by": 8}).promote_by == 8
    for data in ({"promote_by": 8}, {"sweep": "4", "promote_by": 8}, {"sweep": "8", "promote_by": 0}):
        with pytest.raises(pydantic.ValidationError, match="promote_by"):
            BenchOptions.model_validate(data)


@pytest.mark.parametrize(
    "rows, current, why",
    [
        ([row("baseline", 82.5, 3.0), row("eagle3-2step", 88.0, 3.0)], "baseline", "+5.5, within the noise 6.0"),
        ([row("baseline", 90.0), row("eagle3-2step", 88.0)], "baseline", "baseline runs and is the fastest"),
        ([row("baseline", 82.5), row("eagle3-2step", None, status="failed")], "baseline", "a row failed"),
        ([row("eagle3-3step", 82.5), row("eagle3-2step", 94.0)], "baseline", "baseline was not measured"),
        ([row("baseline", 82.5), row("eagle3-2step", 94.0)], None, "nothing ran before the bench"),
    ],
    ids=["within-noise", "current-fastest", "failed-row", "current-not-measured", "nothing-ran"],
)
def test_no_winner_and_the_reason(rows, current, why):
    verdict = promote.decide(rows, current)
    assert verdict.winner is None and why in verdict.why


def test_the_promoted_configuration_is_host_data_beside_the_measured_profile(tmp_path):
    (tmp_path / "group_data").mkdir()
    all_py = tmp_path / "group_data" / "all.py"
    all_py.write_text('active_server = "baseline"\n')
    measured.write(tmp_path, "sglang1", "pcie-tuned-ll-simple", "2026-11-30T12:00:00Z", "overall")
    verdict = promote.Verdict("eagle3-2step", "eagle3-2step 94.0 vs baseline 82.5 output tok/s: +11.5")
    promote.write(tmp_path, "sglang1", verdict, "20261201T210000Z-sglang1", "2026-12-01T21:05:00Z")
    promote.write(tmp_path, "sglang2", promote.Verdict("eagle3-3step", "x"), "r", "2026-12-01T21:06:00Z")
    hosts = host_files.with_measured([("@pveguest/sglang1", {"ssh_user": "root"}), ("sglang3", {})], tmp_path)
    assert hosts == [
        (
            "@pveguest/sglang1",
            {"ssh_user": "root", "nccl_profile": "pcie-tuned-ll-simple", "active_server": "eagle3-2step"},
        ),
        ("sglang3", {}),
    ]
    text = (tmp_path / promote.PROMOTED_FILE).read_text()
    assert text.startswith("# Written by tasks/bench.py --data promote=1") and "run_id: 20261201T210000Z" in text
    assert set(promote.load(tmp_path)) == {"sglang1", "sglang2"}  # the other host's entry is kept
    assert all_py.read_text() == 'active_server = "baseline"\n'  # the user's file is never rewritten


def test_the_host_data_dir_holds_the_files_instead_of_the_project(tmp_path, monkeypatch):
    """SGLANG_PVE_HOST_DATA_DIR: a checkout kept as cloned (and the lab's parallel slots) writes and
    reads the measured and promoted host data there; the project's group_data/ stays untouched."""
    elsewhere = tmp_path / "host-data"
    monkeypatch.setenv(host_files.HOST_DATA_DIR, str(elsewhere))
    written = promote.write(tmp_path, "sglang1", promote.Verdict("eagle3-2step", "why"), "r", "2026-12-05T06:00:00Z")
    measured.write(tmp_path, "sglang1", "pcie-tuned", "2026-12-05T06:00:00Z", "overall")
    assert written == elsewhere / "bench_promoted.yml" == host_files.located(tmp_path, promote.PROMOTED_FILE)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["bench_promoted.yml", "nccl_measured.yml"]
    assert not (tmp_path / "group_data").exists()
    hosts = host_files.with_measured([("sglang1", {})], tmp_path)
    assert hosts == [("sglang1", {"nccl_profile": "pcie-tuned", "active_server": "eagle3-2step"})]
    monkeypatch.delenv(host_files.HOST_DATA_DIR)
    assert host_files.with_measured([("sglang1", {})], tmp_path) == [("sglang1", {})]  # the project's: none


@pytest.fixture
def bench(tmp_path, monkeypatch):
    """runner.run with LocalHost (test_bench_mark.py), measuring `rates` and switching as `switch_ok` says."""
    from types import SimpleNamespace

    from sglang_pve.tools.bench import runner
    from tests.unit.test_bench_mark import LocalHost, job

    for name, value in (("MARK", "mark.json"), ("REMOTE_DIR", ""), ("CLIENT", "client.py")):
        monkeypatch.setattr(runner, name, str(tmp_path / value))
    host, seen = LocalHost(), {"restored": [], "switched": [], "said": [], "warned": [], "steps": []}
    monkeypatch.setattr(runner, "logger", SimpleNamespace(info=lambda text: None, warning=seen["warned"].append))
    monkeypatch.setattr("pyinfra.host", host, raising=False)
    monkeypatch.setattr(runner, "_say", lambda h, text: seen["said"].append(text))
    monkeypatch.setattr(runner, "_running_now", lambda h, servers: "baseline")  # before, and after a revert
    monkeypatch.setattr(runner, "_restore", lambda h, previous, lease: seen["restored"].append(previous) or True)
    monkeypatch.setattr(runner, "_report", lambda *a: None)
    (tmp_path / "group_data").mkdir()

    def run(rates: dict, switch_ok: bool = True, during_switch=lambda: None, **job_data) -> None:
        def measure(h, j, name, position):
            seen["steps"].append(f"measure {name}")
            return row(name, rates[name])

        monkeypatch.setattr(runner, "_measure", measure)

        def followed(h, command, server):
            seen["switched"].append((command, server))
            seen["steps"].append(f"promote {server}")
            seen["marked_during_switch"] = (tmp_path / "mark.json").exists()
            during_switch()
            return switch_ok, SimpleNamespace(output_lines=["reverted: baseline runs again"])

        monkeypatch.setattr(runner, "run_followed", followed)
        base = job(tmp_path)
        promotions = {"eagle3-2step": "switch-to-eagle3-2step"}
        runner.run(
            runner.Job(
                **{
                    **base.__dict__,
                    "configs": list(rates),
                    "promotions": promotions,
                    "active": "baseline",
                    "project_dir": tmp_path,
                    **job_data,
                }
            )
        )

    return SimpleNamespace(run=run, seen=seen, path=tmp_path / promote.PROMOTED_FILE, mark=tmp_path / "mark.json")


def test_the_winner_starts_instead_of_the_restore_and_is_written_once_it_runs(bench):
    bench.run({"baseline": 82.5, "eagle3-2step": 94.0})
    assert bench.seen["switched"] == [("switch-to-eagle3-2step", "eagle3-2step")] and bench.seen["restored"] == []
    assert promote.load(bench.path.parents[1])["sglang1"]["active_server"] == "eagle3-2step"
    assert not bench.mark.exists()  # the bench ended: no mark


def test_a_winner_that_fails_its_gate_is_reverted_and_nothing_is_written(bench):
    from sglang_pve.tools.bench import runner

    with pytest.raises(runner.PromoteFailed, match="eagle3-2step failed its gate and the previous release runs again"):
        bench.run({"baseline": 82.5, "eagle3-2step": 94.0}, switch_ok=False)
    assert not bench.path.exists() and not bench.mark.exists()  # the revert runs baseline, as before


def test_without_a_winner_what_ran_before_is_restored_and_nothing_is_switched(bench):
    bench.run({"baseline": 82.5, "eagle3-2step": 82.7})
    assert bench.seen["restored"] == ["baseline"] and bench.seen["switched"] == [] and not bench.path.exists()
    assert any(
        text.startswith("promote: nothing promoted: eagle3-2step 82.7 vs baseline 82.5") for text in bench.seen["said"]
    )


def test_a_keyboard_interrupt_during_the_promote_leaves_no_mark_and_the_handlers_back(bench):
    """The promote's switch is a release switch (the agent's revert, its own unit: it goes on when
    the controller is interrupted): the mark goes before it, so no interrupt leaves it behind."""
    import signal

    before = signal.getsignal(signal.SIGINT)

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        bench.run({"baseline": 82.5, "eagle3-2step": 94.0}, during_switch=interrupted)
    assert bench.seen["switched"] and bench.seen["marked_during_switch"] is False
    assert not bench.mark.exists() and not bench.path.exists()  # not known to run: not written
    assert signal.getsignal(signal.SIGINT) is before


def test_ctrl_c_during_the_promote_lets_it_finish_then_fails_the_run(bench):
    """SIGINT while the winner's switch runs is not delivered into it (a switch cut short at the
    controller goes on on the host anyway); the run settles, writes what runs and then fails."""
    import signal

    from sglang_pve.tools.bench import runner

    def ctrl_c():
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # the bench's handler, as the signal calls it

    with pytest.raises(runner.BenchInterrupted, match=r"SIGINT \(after the measurements: what it began was finished"):
        bench.run({"baseline": 82.5, "eagle3-2step": 94.0}, during_switch=ctrl_c)
    assert promote.load(bench.path.parents[1])["sglang1"]["active_server"] == "eagle3-2step"  # it runs
    assert not bench.mark.exists()
    assert any("still putting the configuration back" in text for text in bench.seen["warned"])


def test_benches_on_several_hosts_share_one_handler_and_the_last_puts_back_the_one_before():
    """Each host's bench runs in its own greenlet: a signal reaches every one that measures, and not
    one that settles; the handler from before the first is back after the last."""
    import signal
    from types import SimpleNamespace

    from sglang_pve.tools.bench import runner

    before = signal.getsignal(signal.SIGINT)
    killed: list[str] = []

    def bench(name: str):
        worker = SimpleNamespace(kill=lambda error, block: killed.append(f"{name}: {error}"))
        return runner._Interrupts.enter(worker, SimpleNamespace(print_prefix=f"[{name}] "))

    one, two = bench("sglang1"), bench("sglang2")
    two.settling = True
    handler = signal.getsignal(signal.SIGINT)
    handler(signal.SIGINT, None)
    assert killed == ["sglang1: SIGINT"] and two.deferred == "SIGINT" and one.deferred is None
    one.leave()
    assert signal.getsignal(signal.SIGINT) is handler  # sglang2 still settles
    two.leave()
    assert signal.getsignal(signal.SIGINT) is before


@pytest.fixture
def replica(bench, monkeypatch):
    """bench on sglang2 of replica set llama: rollout's turn and the agent's router commands recorded."""

    from sglang_pve.tools.bench import runner

    routed = ["--router", "http://10.200.0.14:30000", "--address", "10.200.0.12", "--drain-s", "30"]
    steps, fails = bench.seen["steps"], set()
    monkeypatch.setattr(runner.rollout, "begin", lambda host: steps.append("turn") or routed)
    monkeypatch.setattr(runner.rollout, "end", lambda host: steps.append("turn over"))

    def step(host, verb, args, *extra):  # rollout.router_step: the agent's command on the replica, its outcome
        command = runner.rollout.router_command(verb, args, *extra)  # the words it would run
        steps.append(f"{verb} {str(command).split(' --dir /var/lib/sglang-pve/releases ', 1)[1]}")
        return verb not in fails

    monkeypatch.setattr(runner.rollout, "router_step", step)
    members = ("sglang1", "sglang2", "sglang3")
    return SimpleNamespace(bench=bench, steps=steps, fails=fails, job={"replica_set": "llama", "members": members})


def test_a_replica_is_benched_out_of_its_router_and_its_winner_is_the_sets(replica):
    replica.bench.run({"baseline": 82.5, "eagle3-2step": 94.0}, **replica.job)
    assert replica.steps == [
        "turn",  # fewer than max_unavailable of llama out: its turn
        "router-leave --router http://10.200.0.14:30000 --address 10.200.0.12 --drain-s 30",
        "measure baseline",
        "measure eagle3-2step",
        "promote eagle3-2step",  # out of the router still: the switch needs no --router of its own
        "router-join --router http://10.200.0.14:30000 --address 10.200.0.12",
        "turn over",
    ]
    written = promote.load(replica.bench.path.parents[1])
    assert sorted(written) == list(replica.job["members"])  # the set serves one configuration
    assert {entry["active_server"] for entry in written.values()} == {"eagle3-2step"}
    assert "replica set llama: the next deploy.py rolls its other members to it" in replica.bench.seen["said"][-1]


def test_a_replica_that_cannot_leave_its_router_is_not_touched(replica):
    from sglang_pve.tools.bench import runner

    replica.fails.add("router-leave")
    with pytest.raises(runner.RouterFailed, match="bench not run: it could not leave the router of llama"):
        replica.bench.run({"baseline": 82.5, "eagle3-2step": 94.0}, **replica.job)
    assert replica.steps[-1].startswith("router-leave") and not any("measure" in step for step in replica.steps)
    assert replica.bench.seen["restored"] == [] and not replica.bench.mark.exists()  # nothing was started


def test_a_replica_that_cannot_come_back_fails_the_run_after_the_restore(replica):
    from sglang_pve.tools.bench import runner

    replica.fails.add("router-join")
    with pytest.raises(runner.RouterFailed, match="not back in the router of replica set llama"):
        replica.bench.run({"baseline": 82.5, "eagle3-2step": 82.7}, **replica.job)
    assert replica.bench.seen["restored"] == ["baseline"] and replica.steps[-1].startswith("router-join")
    assert "turn over" not in replica.steps  # the set's other members benched in this run do not go on
