"""tests/lab/pressure.py: the lab tests' scheduling allowance, read from PSI files (here fakes)."""

from tests.lab import pressure as module
from tests.lab.pressure import SlotPressure, some_total_s

PSI = "some avg10=1.00 avg60=0.50 avg300=0.10 total={}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def write(cgroup, cpu_us: int, io_us: int) -> None:
    (cgroup / "cpu.pressure").write_text(PSI.format(cpu_us))
    (cgroup / "io.pressure").write_text(PSI.format(io_us))  # memory.pressure absent: skipped


def test_some_totals_of_every_resource_are_summed_in_seconds(tmp_path):
    write(tmp_path, 1_500_000, 250_000)
    assert some_total_s(tmp_path) == 1.75


def test_waited_covers_the_whole_window_from_the_samples_around_it(tmp_path):
    pressure = SlotPressure(tmp_path)
    pressure.samples = [(100.0, 1.0), (101.0, 1.5), (102.0, 4.0), (103.0, 4.25)]
    assert pressure.waited(101.0, 102.0) == 2.5  # the samples at both ends
    assert pressure.waited(100.5, 102.5) == 3.25  # widened to the samples outside it
    assert pressure.waited(90.0, 200.0) == 3.25  # past the samples: the first and the last
    assert pressure.waited(102.0, 102.0) == 0.0


def test_without_psi_the_allowance_is_zero_the_strict_bound(monkeypatch):
    monkeypatch.setattr(module, "slot_cgroup", lambda: None)  # no cpu.pressure anywhere
    with SlotPressure() as pressure:
        pass
    assert pressure.samples == [] and pressure.waited(0, 1e12) == 0.0


def test_samples_are_taken_while_in_the_block(tmp_path):
    write(tmp_path, 1_000_000, 0)
    with SlotPressure(tmp_path, every_s=0.01) as pressure:
        write(tmp_path, 3_000_000, 0)
    assert pressure.samples[0][1] == 1.0 and pressure.samples[-1][1] == 3.0
