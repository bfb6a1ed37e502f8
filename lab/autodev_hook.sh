#!/bin/sh
# lxc.hook.autodev of the lab's guests (set by lab/devn.py): the passthrough-device part of
# pve-container's src/lxc-pve-autodev-hook (https://github.com/proxmox/pve-container, read at
# 94f5585) in sh, with the entry checks of src/PVE/LXC/Tools.pm lxc_hook (hook version 0: the
# container's name, the section and the hook type as arguments) and for_devices' reading of the
# device list that lab/devn.py writes as src/lxc-pve-prestart-hook does. For each entry: an empty
# regular file at $LXC_ROOTFS_MOUNT/dev/<dev> (PVE's mknod S_IFREG: it fails when something is
# there already, e.g. a lxc.mount.entry for the same node) and the passthrough node bound over
# it. LXC runs autodev hooks in the container's mount namespace after every lxc.mount.entry and
# before it fills /dev itself (lxc/lxc src/lxc/conf.c lxc_setup).
# Lab only: the list is <container dir>/passthrough/devices (PVE: /var/lib/lxc/<vmid>/passthrough);
# the block-device list of mount points (passthrough/mounts) is not read: the lab has none.
set -eu
exec 2>&1 # LXC logs a hook's stdout at DEBUG, not its stderr (lxc/lxc src/lxc/utils.c run_buffer)
if [ $# -lt 3 ]; then
    echo "missing hook parameters, expected to be called by lxc as hook" >&2
    exit 1
fi
case $1 in '' | *[!0-9]*) exit 0 ;; esac
if [ "$2" != lxc ] || [ "$3" != autodev ]; then
    exit 0
fi
root=${LXC_ROOTFS_MOUNT:?missing LXC_ROOTFS_MOUNT env var}
passthrough=$(dirname "${LXC_CONFIG_FILE:?missing LXC_CONFIG_FILE env var}")/passthrough
list=$passthrough/devices
[ -e "$list" ] || exit 0 # an empty list may not exist
while IFS= read -r line || [ -n "$line" ]; do
    # for_devices: m@^(b|c):(\d+):(\d+):/dev/(\S+)\s*$@, no '..', never loop-control (10:237)
    if ! expr "x$line" : 'x[bc]:[0-9][0-9]*:[0-9][0-9]*:/dev/[^[:space:]][^[:space:]]*[[:space:]]*$' >/dev/null; then
        echo "invalid $list entry: $line" >&2
        continue
    fi
    # (expr exits 1 when what it prints is 0 or empty: minor 0 is /dev/nvidia0's)
    major=$(expr "x$line" : 'x[bc]:\([0-9]*\):' || :)
    minor=$(expr "x$line" : 'x[bc]:[0-9]*:\([0-9]*\):' || :)
    dev=$(expr "x$line" : 'x[bc]:[0-9]*:[0-9]*:/dev/\([^[:space:]]*\)' || :)
    case $dev in *..*)
        echo "skipping illegal device node entry: $dev" >&2
        continue
        ;;
    esac
    if [ "$major" -eq 10 ] && [ "$minor" -eq 237 ]; then
        echo "skipping illegal device entry (loop-control) for: $dev" >&2
        continue
    fi
    target=$root/dev/$dev
    mkdir -p "$(dirname "$target")"
    if [ -e "$target" ] || [ -h "$target" ]; then
        echo "Could not mknod $target: File exists" >&2
        exit 1
    fi
    (umask 777 && : >"$target") # mknod(path, S_IFREG, 0): an empty file, mode 0000
    if ! mount --bind "$passthrough/dev/$dev" "$target"; then
        echo "Bind mount of device $dev into container failed" >&2
        exit 1
    fi
done <"$list"
