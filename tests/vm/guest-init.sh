#!/bin/sh
# Stage 2 of the test VM: PID 1 after switch_root, with the host's / (shared
# read-write over virtio-9p) as the root file system. Usage: guest-init.sh JOBDIR
#
# JOBDIR (written by tests/vm/vm.py) holds:
#   modules   the path of the guest kernel's lib/modules in the cache
#   command   the shell script to run (it sets its environment and cwd)
# The command's stdout and stderr go to the virtio-serial port
# "platform.out", its exit status to "platform.status"; then the VM powers
# off. The guest gets its own /proc, /sys, /dev, /run and /tmp so nothing it
# does there reaches the host; TMPDIR must be a tmpfs because 9p returns
# ENOENT when an open but deleted file is truncated, which breaks pytest's
# output capture.
job="$1"
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

halt() {
    sync
    /bin/busybox poweroff -f
}

fail() {
    echo "vm stage 2: $*" >/dev/console 2>&1 || echo "vm stage 2: $*" >&2
    halt
}

mount -t proc proc /proc || fail "mounting /proc failed"
mount -t sysfs sysfs /sys || fail "mounting /sys failed"
mount -t devtmpfs devtmpfs /dev || fail "mounting /dev failed"
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts || fail "mounting /dev/pts failed"
mount -t tmpfs -o mode=1777 tmpfs /dev/shm || fail "mounting /dev/shm failed"
mount -t tmpfs -o mode=755 tmpfs /run || fail "mounting /run failed"
# A checkout under the host's /tmp (CI clones anywhere) would vanish under
# the guest's tmpfs: set that one top-level folder aside and bind it back.
top=""
case "$job" in
/tmp/*)
    rest=${job#/tmp/}
    top=${rest%%/*}
    mkdir -p /run/host-tmp
    mount --bind /tmp /run/host-tmp || fail "setting the host's /tmp aside failed"
    ;;
esac
mount -t tmpfs -o mode=1777 tmpfs /tmp || fail "mounting /tmp failed"
if [ -n "$top" ]; then
    mkdir -p "/tmp/$top"
    mount --bind "/run/host-tmp/$top" "/tmp/$top" || fail "binding the checkout /tmp/$top back failed"
fi
# The host's /lib/modules is an empty directory kept as the mount point.
mount --bind "$(cat "$job/modules")" /lib/modules || fail "bind-mounting the guest modules failed"
hostname platform-vm
ip link set lo up || fail "bringing up lo failed"

port() {
    for dir in /sys/class/virtio-ports/*; do
        if [ "$(cat "$dir/name" 2>/dev/null)" = "$1" ]; then
            echo "/dev/${dir##*/}"
            return 0
        fi
    done
    return 1
}
out=$(port platform.out) || fail "virtio port platform.out not found"
status=$(port platform.status) || fail "virtio port platform.status not found"

/bin/sh "$job/command" </dev/null >"$out" 2>&1
rc=$?
echo "$rc" >"$status"
halt
