"""The lab's fake GPUs (lab/gpus.py): the device numbers NVIDIA's modules get, from their source
and checked against a real H200 host."""

import doctest

from lab import gpus

# /proc/devices of an H200 host (NVIDIA open kernel module 580.159.04), captured with `cat /proc/devices`
H200 = """\
Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  4 ttyS
  5 /dev/tty
  5 /dev/console
  5 /dev/ptmx
  7 vcs
 10 misc
 13 input
128 ptm
136 pts
195 nvidia
195 nvidiactl
203 cpu/cpuid
231 infiniband_mad
231 infiniband_verbs
238 nvidia-uvm
239 nvidia-nvswitch
240 nvidia-nvlink
241 nvidia-caps
242 nvidia-caps-imex-channels
243 hidraw
244 infiniband_verbs
245 infiniband_mad
246 macvtap
247 mei
248 bsg
249 watchdog
250 ptp
251 pps
252 dax
253 dimmctl
254 ndctl

Block devices:
  7 loop
253 zram
254 virtblk
259 blkext
"""


def without_nvidia(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if " nvidia" not in line)


def test_docstring_examples():
    assert doctest.testmod(gpus).failed == 0


def test_the_h200_hosts_proc_devices_is_what_the_modules_would_make_of_its_other_drivers():
    base = without_nvidia(H200)
    assert "nvidia" not in base and base.count("\n") == H200.count("\n") - 7
    assert gpus.node_proc_devices(base) == H200
    assert gpus.uvm_major(base) == 238


def test_a_major_above_254_takes_its_hash_slot():
    """fs/char_dev.c: chrdevs[major % 255] holds 509 too, so slot 254 is not free for nvidia.ko."""
    base = "Character devices:\n509 ext\n\nBlock devices:\n"
    assert gpus.driver_majors(base)["nvidia-caps-imex-channels"] == 253
    assert gpus.uvm_major(base) == 249


def test_lab_nodes_are_the_drivers_numbers():
    nodes = {d.path: (d.major, d.minor) for d in gpus.lab_devices()}
    uvm = gpus.uvm_major()
    assert nodes == {
        **{f"/dev/nvidia{i}": (195, i) for i in range(8)},
        "/dev/nvidiactl": (195, 255),
        "/dev/nvidia-uvm": (uvm, 0),
        "/dev/nvidia-uvm-tools": (uvm, 1),
    }
    assert uvm not in gpus.character_majors(open("/proc/devices").read())
