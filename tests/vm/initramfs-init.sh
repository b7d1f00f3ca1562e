#!/bin/busybox sh
# Stage 1 of the test VM, PID 1 inside the initramfs (busybox only).
#
# Loads the virtio and 9p modules that tests/vm/vm.py copied into /modules
# (the file /modules/order lists them in dependency order), mounts the
# host's / that QEMU shares over virtio-9p, and hands over to stage 2
# (tests/vm/guest-init.sh, read from the share) with switch_root. Any
# failure powers the VM off at once: the host sees no exit status and
# reports the console log instead of waiting for its timeout.
/bin/busybox --install -s /bin
export PATH=/bin

die() {
    echo "vm init: $*" >&2
    poweroff -f
}

mkdir -p /proc /sys /dev /newroot
mount -t proc proc /proc || die "mounting /proc failed"
mount -t devtmpfs devtmpfs /dev || die "mounting /dev failed"

for module in $(cat /modules/order); do
    insmod "/modules/$module" || die "insmod $module failed"
done

# Kernel command line: platform_stage2=PATH platform_job=DIR
stage2=
job=
for word in $(cat /proc/cmdline); do
    case "$word" in
        platform_stage2=*) stage2="${word#platform_stage2=}" ;;
        platform_job=*) job="${word#platform_job=}" ;;
    esac
done
[ -n "$stage2" ] && [ -n "$job" ] || die "platform_stage2/platform_job missing from the command line"

# cache=loose: the host tree does not change under the VM while it runs,
# and this is about 2.5 times faster than cache=none for Python imports.
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=loose hostroot /newroot \
    || die "mounting the host root over 9p failed"

# Stage 2 mounts its own /proc and /dev inside the new root.
umount /dev
umount /proc
exec switch_root /newroot /bin/sh "$stage2" "$job"
