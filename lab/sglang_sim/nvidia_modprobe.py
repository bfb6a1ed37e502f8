#!/usr/bin/env python3
"""Fake `nvidia-modprobe` for the lab's node pve1, written from NVIDIA's source: it makes the
device files the real tool makes, with the same numbers, and exits as it does.

Followed: NVIDIA/nvidia-modprobe (https://github.com/NVIDIA/nvidia-modprobe, read at a9556df,
610.43.03): nvidia-modprobe.c main(); modprobe-utils/nvidia-modprobe-utils.c modprobe_helper,
is_kernel_module_loaded, nvidia_mknod, nvidia_uvm_mknod, nvidia_modeset_mknod, nvidia_nvlink_mknod,
nvidia_nvswitch_mknod, nvidia_cap_mknod, mknod_helper, get_file_state_helper,
init_device_file_parameters, symlink_char_dev, nvidia_get_chardev_major; nvidia-modprobe-utils.h
assign_device_file_name and the NV_* names; option-table.h and common-utils/nvgetopt.c nvgetopt().

What it does (main()): exactly one of these, in this order of precedence, then -m, then each -f:

  -l               load nvidia; /dev/nvidia-nvlink (nvidia-nvlink major, 0)
  -s -c N ...      load nvidia; /dev/nvidia-nvswitchN (nvidia-nvswitch major, N), N=255: nvidia-nvswitchctl
  -u -c N ...      load nvidia-uvm; for each N: nvidia_uvm_mknod(N): /dev/nvidia-uvm at (uvm major, N)
                   and /dev/nvidia-uvm-tools at (uvm major, N+1). Every -c is a base minor, so
                   `-u -c=0 -c=1` ends with uvm at 1 and tools at 2; `-u` alone makes no node.
  -a               enable online_movable (not in the lab: fails)
  (none)           load nvidia; for each -c N: /dev/nvidiaN (195, N); N=255 is /dev/nvidiactl.
                   Nothing else: no nvidiactl unless -c=255 is asked for, no uvm node.
  -m               load nvidia-modeset; /dev/nvidia-modeset (195, 254)
  -f PATH          /dev/nvidia-caps/nvidia-capM, M the "DeviceFileMinor" of PATH under /proc/driver/nvidia

Each node (mknod_helper): kept when it is a character device with the right numbers, mode and
owner; otherwise a wrong file is removed and made again (mknod), then chmod and chown; the mode,
uid and gid are 0666, 0, 0 unless /proc/driver/nvidia/params (nvidia nodes) says DeviceFileMode,
DeviceFileUID, DeviceFileGID; ModifyDeviceFiles: 0 there leaves the node alone. Then
/dev/char/MAJ:MIN is linked to it (symlink_char_dev), and a failed link fails the node.
Exit status (main's `return !ret`): 0 when every step succeeded, 1 at the first that failed,
silently; a bad command line is 1 with nvgetopt's message and main's "Invalid commandline".

Lab only: a module counts as loaded when /proc/devices lists it (the real tool reads
/sys/module/<name>/initstate; pve1 has the lab host's /sys, and the lab writes pve1's
/proc/devices as a node with the driver loaded shows it); loading one (modprobe) always fails, as
it would with no module to load. nvidia-modeset registers no major of its own, so -m fails here.
"""

import errno
import os
import re
import stat
import sys
from collections.abc import Iterator

NV_MAJOR_DEVICE_NUMBER = 195
NV_CTL_DEVICE_NUM = 255
NV_MODESET_MINOR_DEVICE_NUM = 254
NV_NVSWITCH_CTL_MINOR = 255
NV_DEVICE_FILE_MODE = 0o666
NV_DEVICE_FILE_MODE_MASK = 0o777
NV_PROC_REGISTRY_PATH = "/proc/driver/nvidia/params"
NV_PROC_PATH_PREFIX = "/proc/driver/nvidia"
MAX_MINORS = 64  # main(): int minors[64]
MAX_CAP_FILES = 256
# option-table.h: (long name, short letter, takes an integer, takes a string)
OPTIONS = {
    "version": ("v", False, False),
    "help": ("h", False, False),
    "create-nvidia-device-file": ("c", True, False),
    "unified-memory": ("u", False, False),
    "modeset": ("m", False, False),
    "nvswitch": ("s", False, False),
    "nvlink": ("l", False, False),
    "nvidia-capability-device-file": ("f", False, True),
    "auto-online-movable": ("a", False, False),
}
SHORT = {letter: (name, integer, string) for name, (letter, integer, string) in OPTIONS.items()}


class BadCommandLine(Exception):
    """nvgetopt's complaint; main() then prints "Invalid commandline" and exits 1."""


class Tool:
    """The tool's view of one filesystem root ("/" on pve1; a temporary dir in the unit tests)."""

    def __init__(self, root: str = "/"):
        self.root = root.rstrip("/")

    def at(self, path: str) -> str:
        return self.root + path

    def read(self, path: str) -> str | None:
        try:
            with open(self.at(path)) as handle:
                return handle.read()
        except OSError:
            return None

    # -- nvidia-modprobe-utils.c ------------------------------------------------------------

    def chardev_major(self, name: str) -> int:
        """nvidia_get_chardev_major: the first line of the "Character devices:" section whose
        first occurrence of ``name`` ends the line; -1 when there is none."""
        text = self.read("/proc/devices")
        if text is None or "Character devices:\n" not in text:
            return -1
        for line in text.split("Character devices:\n", 1)[1].splitlines(keepends=True):
            if line == "\n":
                break
            found = line.find(name)
            if found >= 0 and line[found + len(name) :].startswith("\n"):
                match = re.match(r"\s*([+-]?\d+)\s+\S", line)
                return int(match.group(1)) if match else -1
        return -1

    def module_loaded(self, name: str) -> bool:
        """is_kernel_module_loaded (lab: its /proc/devices line, see the module docstring)."""
        return self.chardev_major(name) >= 0

    def modprobe(self, name: str) -> bool:
        """modprobe_helper: loaded already is success; loading needs root and a module (none here)."""
        return self.module_loaded(name)

    def file_parameters(self, proc_path: str | None) -> tuple[int, int, int, int]:
        """init_device_file_parameters: (uid, gid, mode, modify), read like its fscanf loop,
        which stops at the first line that is not ``Name: <unsigned>``."""
        uid, gid, mode, modify = 0, 0, NV_DEVICE_FILE_MODE, 1
        text = self.read(proc_path) if proc_path else None
        for line in (text or "").splitlines():
            match = re.fullmatch(r"([^:]{1,31}): *(\d+)\s*", line)
            if not match:
                break
            name, value = match.group(1), int(match.group(2))
            if name == "DeviceFileUID":
                uid = value
            elif name == "DeviceFileGID":
                gid = value
            elif name == "DeviceFileMode":
                mode = value
            elif name in ("ModifyDeviceFiles", "DeviceFileModify"):
                modify = value
        return uid, gid, mode, modify

    def symlink_char_dev(self, major: int, minor: int, path: str) -> bool:
        link = self.at(f"/dev/char/{major}:{minor}")
        try:
            device = os.stat(self.at(path))
        except OSError:
            return False
        if not stat.S_ISCHR(device.st_mode) or not path.startswith("/dev/"):
            return False
        try:
            os.remove(link)
        except OSError:
            pass
        try:
            os.symlink("../" + path[len("/dev/") :], link)
        except OSError:
            try:
                return os.stat(link).st_ino == device.st_ino
            except OSError:
                return False
        return True

    def mknod_helper(self, major: int, minor: int, path: str, proc_path: str | None) -> bool:
        if not path:
            return False
        uid, gid, mode, modify = self.file_parameters(proc_path)
        if modify != 1:
            return self.symlink_char_dev(major, minor, path)
        wanted = os.makedev(major, minor)
        try:
            current = os.stat(self.at(path))
        except OSError:
            current = None
        if current is not None:
            right = stat.S_ISCHR(current.st_mode) and current.st_rdev == wanted
            owned = (current.st_mode & NV_DEVICE_FILE_MODE_MASK, current.st_uid, current.st_gid) == (mode, uid, gid)
            if right and owned:
                return self.symlink_char_dev(major, minor, path)
            if not right:
                try:
                    os.remove(self.at(path))
                except OSError:
                    return False
                current = None
        made = current is None
        if made:
            try:
                os.mknod(self.at(path), stat.S_IFCHR | mode, wanted)
            except OSError:
                return False
        try:
            os.chmod(self.at(path), mode)
            os.chown(self.at(path), uid, gid)
        except OSError:
            if made:
                os.remove(self.at(path))
            return False
        return self.symlink_char_dev(major, minor, path)

    def nvidia_mknod(self, minor: int) -> bool:
        """assign_device_file_name: 0..254 -> /dev/nvidiaN, 255 -> /dev/nvidiactl, else no name."""
        if minor < 0 or minor > NV_CTL_DEVICE_NUM:
            path = ""
        else:
            path = "/dev/nvidiactl" if minor == NV_CTL_DEVICE_NUM else f"/dev/nvidia{minor}"
        return self.mknod_helper(NV_MAJOR_DEVICE_NUMBER, minor, path, NV_PROC_REGISTRY_PATH)

    def nvidia_uvm_mknod(self, base_minor: int) -> bool:
        major = self.chardev_major("nvidia-uvm")
        if major < 0:
            return False
        return self.mknod_helper(major, base_minor, "/dev/nvidia-uvm", None) and self.mknod_helper(
            major, base_minor + 1, "/dev/nvidia-uvm-tools", None
        )

    def nvidia_modeset_mknod(self) -> bool:
        return self.mknod_helper(
            NV_MAJOR_DEVICE_NUMBER, NV_MODESET_MINOR_DEVICE_NUM, "/dev/nvidia-modeset", NV_PROC_REGISTRY_PATH
        )

    def nvidia_nvlink_mknod(self) -> bool:
        major = self.chardev_major("nvidia-nvlink")
        return major >= 0 and self.mknod_helper(
            major, 0, "/dev/nvidia-nvlink", "/proc/driver/nvidia-nvlink/permissions"
        )

    def nvidia_nvswitch_mknod(self, minor: int) -> bool:
        major = self.chardev_major("nvidia-nvswitch")
        if major < 0:
            return False
        name = "/dev/nvidia-nvswitchctl" if minor == NV_NVSWITCH_CTL_MINOR else f"/dev/nvidia-nvswitch{minor}"
        return self.mknod_helper(major, minor, name, "/proc/driver/nvidia-nvswitch/permissions")

    def nvidia_cap_mknod(self, cap_file_path: str) -> bool:
        if not cap_file_path.startswith(NV_PROC_PATH_PREFIX) or "./" in cap_file_path:
            return False
        major = self.chardev_major("nvidia-caps")
        text = self.read(cap_file_path)
        if major < 0 or text is None:
            return False
        minor = -1
        for line in text.splitlines():
            match = re.fullmatch(r"([^:]{1,31}): *([+-]?\d+)\s*", line)
            if not match:
                break
            if match.group(1) == "DeviceFileMinor":
                minor = int(match.group(2))
                break
        if minor < 0:
            return False
        try:
            os.mkdir(self.at("/dev/nvidia-caps"), 0o755)
            os.chmod(self.at("/dev/nvidia-caps"), 0o755)
            os.chown(self.at("/dev/nvidia-caps"), 0, 0)
        except OSError as error:
            if error.errno != errno.EEXIST:
                return False
        return self.mknod_helper(major, minor, f"/dev/nvidia-caps/nvidia-cap{minor}", cap_file_path)


def strtol(text: str) -> int:
    """strtol(text, &end, 0) with nothing left over: decimal, 0x hex, 0 octal."""
    match = re.fullmatch(r"\s*([+-]?)(0[xX]([0-9a-fA-F]+)|0([0-7]*)|([1-9][0-9]*))", text)
    if not match:
        raise ValueError(text)
    sign = -1 if match.group(1) == "-" else 1
    hexadecimal, octal, decimal = match.group(3, 4, 5)
    return sign * (int(hexadecimal, 16) if hexadecimal else int(octal or "0", 8) if decimal is None else int(decimal))


def parse(argv: list[str]) -> Iterator[tuple[str, object]]:
    """nvgetopt over argv[1:], one option at a time: (short letter, value); BadCommandLine with
    its message where it stops."""
    index, prog = 1, argv[0] if argv else "nvidia-modprobe"
    while index < len(argv):
        arg = argv[index]
        if not arg.startswith("-"):
            raise BadCommandLine(f'{prog}: invalid option: "{arg}"')
        name = arg[2:] if arg.startswith("--") else arg[1:]
        name, sep, argument = name.partition("=")
        option = None
        if name == "":
            if arg.startswith("--") and not sep:
                break  # "--": the end of the options
        elif len(name) == 1:
            option = SHORT.get(name)
            letter = name
        elif name in OPTIONS:
            letter, *_ = OPTIONS[name]
            option = SHORT[letter]
        elif all(c in SHORT for c in name) and not any(SHORT[c][1] or SHORT[c][2] for c in name[:1]):
            yield name[0], None  # bundled short options, taken one at a time
            argv = [*argv[:index], "-" + name[1:] + (sep + argument if sep else ""), *argv[index + 1 :]]
            continue
        elif not sep and SHORT.get(name[0], (None, False))[1]:
            try:
                strtol(name[1:])
                letter, option, argument, sep = name[0], SHORT[name[0]], name[1:], "="  # "-c3"
            except ValueError:
                pass
        if option is None:
            raise BadCommandLine(f'{prog}: unrecognized option: "{arg}"')
        _, integer, string = option
        value: object = None
        if integer or string:
            if sep and not argument:
                raise BadCommandLine(f'{prog}: option "{arg}" requires an argument.')
            if not sep:
                index += 1
                if index >= len(argv):
                    raise BadCommandLine(f'{prog}: option "{arg}" requires an argument.')
                argument = argv[index]
            if integer:
                try:
                    value = strtol(argument)
                except ValueError:
                    raise BadCommandLine(f'{prog}: "{argument}" is not a valid argument for option "{arg}".') from None
            else:
                value = argument
        elif sep:
            raise BadCommandLine(
                f'{prog}: option "{arg}" does not take an argument, but was given an argument of "{argument}".'
            )
        yield letter, value
        index += 1


def main(argv: list[str], root: str = "/") -> int:
    """nvidia-modprobe.c main(); ``argv`` includes the program name."""
    minors: list[int] = []
    cap_files: list[str] = []
    flags = set()
    options = parse(argv)
    while True:
        try:
            letter, value = next(options)
        except StopIteration:
            break
        except BadCommandLine as error:
            print(error, file=sys.stderr)
            print(
                f"ERROR: Invalid commandline, please run `{argv[0]} --help` for usage information.\n", file=sys.stderr
            )
            return 1
        if letter in ("v", "h"):
            print("nvidia-modprobe (sglang-pve lab stand-in, lab/sglang_sim/nvidia_modprobe.py)")
            return 0
        if letter == "c":
            if len(minors) == MAX_MINORS:
                print("ERROR: Too many NVIDIA character device files requested.", file=sys.stderr)
                return 1
            minors.append(int(value))  # type: ignore[arg-type]
        elif letter == "f":
            if len(cap_files) == MAX_CAP_FILES:
                print("ERROR: Too many NVIDIA capability device files requested.", file=sys.stderr)
                return 1
            cap_files.append(str(value))
        else:
            flags.add(letter)
    tool = Tool(root)
    if "l" in flags:
        steps = [lambda: tool.modprobe("nvidia"), tool.nvidia_nvlink_mknod]
    elif "s" in flags:
        steps = [lambda: tool.modprobe("nvidia"), *(lambda m=m: tool.nvidia_nvswitch_mknod(m) for m in minors)]
    elif "u" in flags:
        steps = [lambda: tool.modprobe("nvidia-uvm"), *(lambda m=m: tool.nvidia_uvm_mknod(m) for m in minors)]
    elif "a" in flags:
        steps = [lambda: False]  # nvidia_enable_auto_online_movable: no such platform in the lab
    else:
        steps = [lambda: tool.modprobe("nvidia"), *(lambda m=m: tool.nvidia_mknod(m) for m in minors)]
    if "m" in flags:
        steps += [lambda: tool.modprobe("nvidia-modeset"), tool.nvidia_modeset_mknod]
    steps += [lambda path=path: tool.nvidia_cap_mknod(path) for path in cap_files]
    return 0 if all(step() for step in steps) else 1  # all() stops at the first failure, as `goto done`


if __name__ == "__main__":
    sys.exit(main(sys.argv))
