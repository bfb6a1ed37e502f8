"""The lab's nvidia-modprobe against NVIDIA's source (NVIDIA/nvidia-modprobe at a9556df): each case
names the function of nvidia-modprobe.c or modprobe-utils/nvidia-modprobe-utils.c it comes from.
Real device nodes are made in a temporary root (mknod needs root, as the lab does)."""

import os
import stat
from pathlib import Path

import pytest

from lab.sglang_sim import nvidia_modprobe

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root (the lab runs as root)")

UVM = 238
PROC_DEVICES = f"Character devices:\n  1 mem\n195 nvidia\n195 nvidiactl\n{UVM} nvidia-uvm\n\nBlock devices:\n  7 loop\n"


@pytest.fixture
def root(tmp_path) -> Path:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/devices").write_text(PROC_DEVICES)
    (tmp_path / "dev/char").mkdir(parents=True)
    return tmp_path


def run(root: Path, *args: str) -> int:
    return nvidia_modprobe.main(["nvidia-modprobe", *args], root=str(root))


def nodes(root: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for path in sorted((root / "dev").rglob("*")):
        info = os.lstat(path)
        if stat.S_ISCHR(info.st_mode):
            found[f"/{path.relative_to(root)}"] = (os.major(info.st_rdev), os.minor(info.st_rdev))
    return found


def test_u_c0_makes_the_uvm_pair_at_minors_0_and_1_and_nothing_else(root):
    """main(): under -u each -c is nvidia_uvm_mknod(minor): uvm at the base, tools at base + 1."""
    assert run(root, "-u", "-c=0") == 0
    assert nodes(root) == {"/dev/nvidia-uvm": (UVM, 0), "/dev/nvidia-uvm-tools": (UVM, 1)}


def test_u_with_one_c_per_gpu_leaves_uvm_at_the_last_minor(root):
    """What the node unit ran before: mknod_helper replaces a node with other numbers, so each
    -c moves the pair up; eight GPUs end with uvm at 7 and tools at 8."""
    assert run(root, "-u", *(f"-c={i}" for i in range(8))) == 0
    assert nodes(root) == {"/dev/nvidia-uvm": (UVM, 7), "/dev/nvidia-uvm-tools": (UVM, 8)}


def test_u_alone_loads_the_module_and_makes_no_node(root):
    assert run(root, "-u") == 0 and nodes(root) == {}


def test_without_u_each_c_is_one_gpu_node_and_255_is_nvidiactl(root):
    """nvidia_mknod(minor) with assign_device_file_name: no nvidiactl unless asked, no uvm node."""
    assert run(root, "-c=3") == 0
    assert nodes(root) == {"/dev/nvidia3": (195, 3)}
    assert run(root, "-c", "0", "-c255", "--create-nvidia-device-file=0x1") == 0
    assert nodes(root) == {
        "/dev/nvidia0": (195, 0),
        "/dev/nvidia1": (195, 1),
        "/dev/nvidia3": (195, 3),
        "/dev/nvidiactl": (195, 255),
    }


def test_nodes_are_0666_root_and_linked_from_dev_char(root):
    """mknod_helper: NV_DEVICE_FILE_MODE, uid/gid 0; symlink_char_dev: /dev/char/MAJ:MIN -> ../name."""
    assert run(root, "-c=0") == 0
    info = os.stat(root / "dev/nvidia0")
    assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (0o666, 0, 0)
    assert os.readlink(root / "dev/char/195:0") == "../nvidia0"


def test_a_node_that_is_right_is_kept_a_wrong_one_replaced_a_wrong_mode_fixed(root):
    """get_file_state_helper then mknod_helper: right numbers kept (same inode), other numbers
    removed and made again, right numbers with another mode chmod'ed."""
    os.mknod(root / "dev/nvidia-uvm", stat.S_IFCHR | 0o666, os.makedev(UVM, 0))
    os.chmod(root / "dev/nvidia-uvm", 0o666)
    kept = os.stat(root / "dev/nvidia-uvm").st_ino
    os.mknod(root / "dev/nvidia-uvm-tools", stat.S_IFCHR | 0o666, os.makedev(UVM, 8))
    (root / "dev/nvidia0").write_text("not a device")
    assert run(root, "-u", "-c=0") == 0 and run(root, "-c=0") == 0
    assert os.stat(root / "dev/nvidia-uvm").st_ino == kept
    assert nodes(root) == {"/dev/nvidia-uvm": (UVM, 0), "/dev/nvidia-uvm-tools": (UVM, 1), "/dev/nvidia0": (195, 0)}
    os.chmod(root / "dev/nvidia0", 0o600)
    assert run(root, "-c=0") == 0 and stat.S_IMODE(os.stat(root / "dev/nvidia0").st_mode) == 0o666


def test_the_driver_params_set_mode_and_owner_or_forbid_changes(root):
    """init_device_file_parameters reads /proc/driver/nvidia/params for the nvidia nodes only."""
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/params").write_text("DeviceFileUID: 0\nDeviceFileGID: 44\nDeviceFileMode: 432\n")
    assert run(root, "-c=0", "-u") == 0  # -u anywhere: the uvm branch; its nodes ignore params
    assert run(root, "-c=0") == 0
    info = os.stat(root / "dev/nvidia0")
    assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o660, 44)
    assert stat.S_IMODE(os.stat(root / "dev/nvidia-uvm").st_mode) == 0o666
    (root / "proc/driver/nvidia/params").write_text("ModifyDeviceFiles: 0\n")
    assert run(root, "-c=1") == 1 and "/dev/nvidia1" not in nodes(root)  # no node to link


def test_failures_exit_1_at_the_first_failed_step(root):
    """main() returns !ret and stops at the first failure (goto done)."""
    assert run(root, "-c=256", "-c=0") == 1 and nodes(root) == {}  # no file name for 256
    (root / "dev/char").rmdir()
    assert run(root, "-c=0") == 1  # symlink_char_dev fails: /dev/char is missing
    (root / "proc/devices").write_text("Character devices:\n  1 mem\n\nBlock devices:\n")
    assert run(root, "-u", "-c=0") == 1  # nvidia-uvm not loaded, and nothing to load
    assert run(root) == 1  # nvidia not loaded either


def test_a_bad_command_line_exits_1_with_nvgetopts_message(root, capsys):
    assert run(root, "--no-such-option") == 1
    assert 'unrecognized option: "--no-such-option"' in capsys.readouterr().err
    assert run(root, "-c") == 1 and 'option "-c" requires an argument.' in capsys.readouterr().err
    assert run(root, "-c=x") == 1 and '"x" is not a valid argument for option "-c=x"' in capsys.readouterr().err
    assert run(root, "-u=1") == 1 and "does not take an argument" in capsys.readouterr().err
    assert run(root, "-v", "--no-such-option") == 0  # -v exits before the next option is read


def test_bundled_short_options(root):
    """nvgetopt: -uc... is -u then -c (options with an argument cannot lead a bundle)."""
    assert run(root, "-uc", "0") == 0
    assert nodes(root) == {"/dev/nvidia-uvm": (UVM, 0), "/dev/nvidia-uvm-tools": (UVM, 1)}
