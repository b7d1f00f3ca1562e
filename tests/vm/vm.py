#!/usr/bin/env python3
"""Run one command inside a QEMU VM that boots Debian's kernel (with IPVS).

The development and CI machines run a kernel without IPVS, the dummy driver
or loadable modules, so the node proxy's real-kernel tests run in a VM:

* ``prepare`` (cached under ``.cache/vm/<kernel version>/``): ``apt-get
  download`` the image package ``linux-image-amd64`` depends on, unpack it
  with ``dpkg -x`` (never installed on the host), run ``depmod`` on the
  unpacked tree, extract the uncompressed ``vmlinux`` from ``vmlinuz`` (QEMU
  boots the ELF through its PVH entry; decompressing inside an emulated guest
  costs ~11 s per boot), and build a busybox initramfs with the virtio/9p
  modules in dependency order.
* ``run``: boot that kernel with the host's ``/`` shared read-write over
  virtio-9p (so the same checkout and venv work unchanged inside), run the
  command, stream its output back over a virtio-serial port, return its exit
  status (another port), power off. QEMU is killed on timeout and when this
  process dies.

Only the Python standard library is used, so any ``python3`` can run it.
KVM is not used on purpose: ``/dev/kvm`` on these machines only runs
specially built guest kernels; Debian's kernel hangs there. The ``microvm``
machine hangs at random under TCG, hence ``q35``.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import hashlib
import lzma
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CACHE = REPO / ".cache" / "vm"
INITRAMFS_INIT = HERE / "initramfs-init.sh"
GUEST_INIT = HERE / "guest-init.sh"
META_PACKAGE = "linux-image-amd64"
# What the initramfs needs to reach the share and the serial ports;
# everything else loads inside the guest through modprobe.
BOOT_MODULES = ("virtio_pci", "virtio_console", "9pnet_virtio", "9p")
# Bump when the prepared layout changes, so old caches are rebuilt.
LAYOUT_VERSION = "1"
XZ_MAGIC = b"\xfd7zXZ\x00"


class VMError(RuntimeError):
    """The VM could not be prepared or started; the message says why."""


@dataclass(frozen=True)
class Image:
    """A prepared kernel: everything `run` needs, all under the cache."""

    kernel_version: str
    vmlinux: Path
    initramfs: Path
    modules: Path  # the guest's lib/modules (bind-mounted on /lib/modules)


# ---------------------------------------------------------------- prepare


def _log(msg: str) -> None:
    print(f"vm: {msg}", file=sys.stderr, flush=True)


def _check(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)
    except FileNotFoundError as exc:
        raise VMError(f"{cmd[0]} not found: install the packages in scripts/setup.sh") from exc
    except subprocess.CalledProcessError as exc:
        raise VMError(f"{shlex.join(cmd)} failed ({exc.returncode}): {exc.stderr.strip()}") from exc


def _image_package() -> str | None:
    """The kernel image package the meta package depends on, or None offline."""
    try:
        out = _check(["apt-cache", "depends", META_PACKAGE]).stdout
    except VMError:
        return None
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Depends:") and "linux-image-" in line:
            return line.split(":", 1)[1].strip()
    return None


def _stamp() -> str:
    h = hashlib.sha256(LAYOUT_VERSION.encode())
    h.update(INITRAMFS_INIT.read_bytes())
    return h.hexdigest()[:16]


def _image_at(folder: Path) -> Image:
    kver = folder.name
    return Image(
        kernel_version=kver,
        vmlinux=folder / "vmlinux",
        initramfs=folder / "initramfs.cpio",
        modules=folder / "root" / "lib" / "modules",
    )


def _is_ready(folder: Path) -> bool:
    stamp = folder / "ready"
    return stamp.is_file() and stamp.read_text().strip() == _stamp()


def extract_vmlinux(vmlinuz: Path, dest: Path) -> None:
    """Write the ELF kernel inside a bzImage whose payload is xz-compressed."""
    data = vmlinuz.read_bytes()
    start = data.find(XZ_MAGIC)
    if start < 0:
        raise VMError(f"{vmlinuz}: no xz payload found")
    # The payload is followed by other data; the decompressor stops at the
    # end of the xz stream and leaves the rest in unused_data.
    elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[start:])
    if not elf.startswith(b"\x7fELF"):
        raise VMError(f"{vmlinuz}: xz payload is not an ELF image")
    tmp = dest.with_suffix(".tmp")
    tmp.write_bytes(elf)
    tmp.replace(dest)


def _boot_modules(root: Path, kver: str) -> list[Path]:
    out = _check(
        ["modprobe", "-a", "-d", str(root), "-S", kver, "--show-depends", *BOOT_MODULES]
    ).stdout
    seen: dict[str, Path] = {}
    for line in out.splitlines():
        parts = line.split()
        # "builtin NAME" lines need nothing; "insmod PATH" lines are in
        # dependency order, with repeats for shared dependencies.
        if len(parts) >= 2 and parts[0] == "insmod" and parts[1] not in seen:
            seen[parts[1]] = Path(parts[1])
    return list(seen.values())


def _is_dynamic(path: Path) -> bool:
    """True when an ELF64 executable has a PT_INTERP (a dynamic loader)."""
    data = path.read_bytes()
    phoff = int.from_bytes(data[32:40], "little")
    phentsize = int.from_bytes(data[54:56], "little")
    phnum = int.from_bytes(data[56:58], "little")
    PT_INTERP = 3
    return any(
        int.from_bytes(data[phoff + i * phentsize : phoff + i * phentsize + 4], "little") == PT_INTERP
        for i in range(phnum)
    )


def _build_initramfs(folder: Path, root: Path, kver: str) -> None:
    busybox = shutil.which("busybox")
    if busybox is None:
        raise VMError("busybox not found: install busybox-static")
    if _is_dynamic(Path(busybox)):
        raise VMError(f"{busybox} is dynamically linked: install busybox-static")
    with tempfile.TemporaryDirectory(dir=folder) as staging:
        st = Path(staging)
        (st / "bin").mkdir()
        (st / "modules").mkdir()
        shutil.copy2(busybox, st / "bin" / "busybox")
        shutil.copy2(INITRAMFS_INIT, st / "init")
        os.chmod(st / "init", 0o755)
        names = []
        for i, module in enumerate(_boot_modules(root, kver)):
            name = f"{i:02d}-{module.name}"
            shutil.copy2(module, st / "modules" / name)
            names.append(name)
        (st / "modules" / "order").write_text("\n".join(names) + "\n")
        files = sorted(str(p.relative_to(st)) for p in st.rglob("*"))
        tmp = folder / "initramfs.cpio.tmp"
        with open(tmp, "wb") as out:
            subprocess.run(
                ["cpio", "--quiet", "-o", "-H", "newc", "-R", "0:0"],
                input="\n".join(files).encode(),
                cwd=st,
                stdout=out,
                check=True,
            )
        tmp.replace(folder / "initramfs.cpio")


def prepare() -> Image:
    """Return the prepared image, building what is missing (idempotent).

    Concurrent callers (two test runs at once) are serialised by a lock file,
    so only one of them downloads and builds.
    """
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _prepare_locked()


def _prepare_locked() -> Image:
    package = _image_package()
    if package is None and os.geteuid() == 0 and not any(_is_ready(p) for p in CACHE.glob("*-amd64")):
        # A fresh machine (or container) may have no package lists yet.
        _log("apt-cache cannot resolve the kernel package; running apt-get update")
        _check(["apt-get", "update", "-qq"])
        package = _image_package()
    if package is None:
        ready = sorted(p for p in CACHE.glob("*-amd64") if _is_ready(p))
        if ready:
            return _image_at(ready[-1])
        raise VMError(
            f"cannot resolve {META_PACKAGE} (apt-cache failed) and nothing is cached: "
            "run apt-get update"
        )
    kver = package.removeprefix("linux-image-")
    folder = CACHE / kver
    if _is_ready(folder):
        return _image_at(folder)

    start = time.monotonic()
    folder.mkdir(parents=True, exist_ok=True)
    root = folder / "root"
    if not (root / "boot" / f"vmlinuz-{kver}").is_file():
        _log(f"downloading {package}")
        with tempfile.TemporaryDirectory(dir=folder) as dl:
            os.chmod(dl, 0o777)  # apt's sandbox user must be able to write here
            _check(["apt-get", "download", "-q", package], cwd=dl)
            (deb,) = Path(dl).glob("*.deb")
            if root.exists():
                shutil.rmtree(root)
            _check(["dpkg", "-x", str(deb), str(root)])
        _check(["depmod", "-b", str(root), kver])
    _log("extracting vmlinux")
    extract_vmlinux(root / "boot" / f"vmlinuz-{kver}", folder / "vmlinux")
    _log("building initramfs")
    _build_initramfs(folder, root, kver)
    (folder / "ready").write_text(_stamp() + "\n")
    _log(f"prepared {kver} in {time.monotonic() - start:.1f}s")
    return _image_at(folder)


# ---------------------------------------------------------------- run


def _ensure_mount_point() -> None:
    # The guest bind-mounts its kernel's modules here; the host kernel has no
    # loadable modules, so the directory is normally absent.
    target = Path("/lib/modules")
    if target.is_dir():
        return
    try:
        target.mkdir(parents=True)
    except OSError as exc:
        raise VMError(f"cannot create {target} (the guest's mount point for its modules): {exc}") from exc


def _check_qemu() -> str:
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        raise VMError("qemu-system-x86_64 not found: install qemu-system-x86 (scripts/setup.sh)")
    return qemu


def _job_script(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    lines = ["set -e"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines += [f"cd {shlex.quote(str(cwd))}", "set +e", f"exec {shlex.join(argv)}"]
    return "\n".join(lines) + "\n"


def _guest_env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PLATFORM_IN_VM": "1",
    }
    env.update(extra)
    return env


def _die_with_parent() -> None:
    # Runs in the child before exec: QEMU gets SIGKILL if this runner dies.
    PR_SET_PDEATHSIG = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.setpgid(0, 0)


def run(
    argv: list[str],
    *,
    timeout: float = 600.0,
    cpus: int = 2,
    memory_mb: int = 1024,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    out=None,
) -> int:
    """Run argv in a fresh VM; stream its output to `out`; return its status.

    Returns the command's exit status. Raises VMError when the VM could not
    start, timed out (QEMU is killed) or stopped without reporting a status
    (the tail of the guest console is in the message).
    """
    out = out or sys.stdout.buffer
    image = prepare()
    qemu = _check_qemu()
    _ensure_mount_point()
    jobs = CACHE / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jobs) as jobdir:
        job = Path(jobdir)
        (job / "modules").write_text(str(image.modules) + "\n")
        (job / "command").write_text(
            _job_script(argv, (cwd or Path.cwd()).resolve(), _guest_env(env or {}))
        )
        for name in ("out", "status", "console"):
            (job / name).touch()
        append = " ".join(
            [
                "console=ttyS0",
                "quiet",
                "loglevel=3",
                "panic=-1",
                "oops=panic",
                f"platform_stage2={GUEST_INIT}",
                f"platform_job={job}",
            ]
        )
        cmd = [
            qemu,
            "-machine", "q35",
            "-accel", "tcg,thread=multi",
            "-cpu", os.environ.get("PLATFORM_VM_CPU", "max"),
            "-smp", str(cpus),
            "-m", str(memory_mb),
            "-nodefaults", "-display", "none", "-no-reboot", "-nic", "none",
            "-kernel", str(image.vmlinux),
            "-initrd", str(image.initramfs),
            "-append", append,
            "-serial", f"file:{job / 'console'}",
            "-fsdev", "local,id=hostroot,path=/,security_model=passthrough,multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
            "-device", "virtio-serial-pci",
            "-chardev", f"file,id=out,path={job / 'out'}",
            "-device", "virtserialport,chardev=out,name=platform.out",
            "-chardev", f"file,id=status,path={job / 'status'}",
            "-device", "virtserialport,chardev=status,name=platform.status",
        ]
        started = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}

        def _stop(signum, _frame):
            proc.kill()
            raise SystemExit(128 + signum)

        for s in previous:
            signal.signal(s, _stop)
        try:
            timed_out = _stream(proc, job / "out", out, started + timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for s, handler in previous.items():
                signal.signal(s, handler)
        elapsed = time.monotonic() - started
        qemu_output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
        status = (job / "status").read_text().strip()
        console = (job / "console").read_text(errors="replace")
        if timed_out:
            raise VMError(f"timed out after {timeout:.0f}s; QEMU killed\n{_tail(console)}")
        if not status.isdigit():
            raise VMError(
                f"VM stopped after {elapsed:.1f}s without an exit status "
                f"(QEMU exit {proc.returncode})\n{qemu_output}{_tail(console)}"
            )
        _log(f"{shlex.join(argv)[:60]}: exit {status} after {elapsed:.1f}s in the VM")
        return int(status)


def _stream(proc: subprocess.Popen, path: Path, out, deadline: float) -> bool:
    """Copy what the guest writes to `path` to `out` until QEMU exits.

    Returns True when the deadline passed (the caller kills QEMU).
    """
    with open(path, "rb") as f:
        while True:
            chunk = f.read(65536)
            if chunk:
                out.write(chunk)
                out.flush()
                continue
            if proc.poll() is not None:
                rest = f.read()
                if rest:
                    out.write(rest)
                    out.flush()
                return False
            if time.monotonic() > deadline:
                return True
            time.sleep(0.1)


def _tail(text: str, lines: int = 40) -> str:
    return "--- guest console (tail) ---\n" + "\n".join(text.splitlines()[-lines:])


# ---------------------------------------------------------------- CLI


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests/vm/vm.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("prepare", help="download and build the kernel image (cached)")
    r = sub.add_parser("run", help="run a command in a fresh VM and return its status")
    r.add_argument("--timeout", type=float, default=600.0, help="seconds before QEMU is killed")
    r.add_argument("--cpus", type=int, default=2)
    r.add_argument("--memory", type=int, default=1024, help="MiB")
    r.add_argument("--cwd", type=Path, default=None, help="working directory inside (default: this one)")
    r.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    r.add_argument("command", nargs=argparse.REMAINDER)
    ns = parser.parse_args(args)
    try:
        if ns.action == "prepare":
            image = prepare()
            print(f"{image.kernel_version} {image.vmlinux}")
            return 0
        command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
        if not command:
            parser.error("run needs a command")
        env = dict(item.split("=", 1) for item in ns.env)
        return run(command, timeout=ns.timeout, cpus=ns.cpus, memory_mb=ns.memory, cwd=ns.cwd, env=env)
    except VMError as exc:
        _log(f"error: {exc}")
        return 125


if __name__ == "__main__":
    sys.exit(main())
