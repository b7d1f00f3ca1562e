#!/usr/bin/env python3
"""Build deploy/Dockerfile into an OCI image on a Debian machine, without Docker.

    sudo python3 deploy/image.py [--output DIR] [--tag TAG] [--cache DIR] [--no-cache]

The Dockerfile stays the one recipe: this script *interprets* it, instruction
by instruction, so a package added to its ``apt-get install`` line or a new
``COPY`` reaches both ``docker build`` and this build. What it does per
instruction, as Docker would:

- ``FROM debian:12-slim``: a Debian 12 root filesystem made with
  ``mmdebstrap`` (variant minbase, the archive's bookworm, bookworm-updates
  and bookworm-security suites, docs, man pages and locales left out as in
  the slim image). No other base image is supported: it would need a registry.
- ``RUN``: ``/bin/sh -c`` in that root (``chroot`` inside a private mount
  namespace with ``/proc``, ``/dev`` and the host's resolv.conf, gone when it
  ends), with the stage's ``ARG`` and ``ENV`` values, ``WORKDIR`` and ``USER``,
  the host's proxy variables and CA bundle (``PIP_CERT``, ``SSL_CERT_FILE``:
  a build host behind a TLS-inspecting proxy; neither lands in the image);
- ``COPY`` from the build context (the repository filtered by
  ``.dockerignore``, Docker's matching rules) or ``--from=<stage>``;
- ``ENV``, ``ARG``, ``WORKDIR``, ``USER``, ``LABEL``, ``EXPOSE``,
  ``ENTRYPOINT``, ``CMD``: into the OCI image configuration.

The last stage becomes a single-layer OCI image layout written with
``umoci`` (Debian's daemonless OCI tool), which keeps file ownership and
extended attributes: nginx's ``security.capability`` (``setcap
cap_net_bind_service``) survives into the layer.

Cache: per stage, the root filesystem after its last ``RUN`` before its
first ``COPY`` is kept as a tarball (with xattrs) in the cache folder, under
a key made, like Docker's layer cache, from the base recipe and every
instruction up to it. Later snapshots would depend on the copied sources and
change with every commit, so they are not kept (each costs 300-450 MB). A
build resumes from a snapshot whose key matches: with an unchanged
Dockerfile only the build stage's ``pip install`` (about 15 s) and the cheap
``COPY`` lines run again. Snapshots and bases this build did not use are
deleted.

Needs root (chroot, mounts), ``mmdebstrap``, ``umoci``, ``tar`` and the
network to Debian's archive and PyPI (what the Dockerfile's RUN lines fetch).
Only the standard library, so it runs with the system ``python3``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "deploy" / "Dockerfile"
DEFAULT_CACHE = REPO / ".cache" / "image"
DEFAULT_TAG = "platformd"

# What ``FROM debian:12-slim`` means here. The slim image is Debian's
# minbase without documentation, man pages and translations.
BASE_IMAGES = {
    "debian:12-slim": {
        "suite": "bookworm",
        "sources": [
            "deb http://deb.debian.org/debian bookworm main",
            "deb http://deb.debian.org/debian bookworm-updates main",
            "deb http://deb.debian.org/debian-security bookworm-security main",
        ],
        "dpkgopts": [
            "path-exclude=/usr/share/man/*",
            "path-exclude=/usr/share/doc/*",
            "path-include=/usr/share/doc/*/copyright",
            "path-exclude=/usr/share/locale/*",
            "path-exclude=/usr/share/info/*",
        ],
    },
}
# Docker's PATH when the image sets none.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TAR_XATTRS = ["--xattrs", "--xattrs-include=*", "--numeric-owner"]
# Where RUN lines see the host's CA bundle (see Builder.run), and the proxy
# settings they inherit (Docker passes these build arguments by default too).
HOST_CA = "/.build-host-ca.pem"
PROXY_VARIABLES = ("http_proxy", "https_proxy", "no_proxy", "ftp_proxy", "all_proxy")


class BuildError(Exception):
    """The Dockerfile cannot be built here; the message says why, in one line."""


# ------------------------------------------------------------------ the Dockerfile


@dataclass
class Instruction:
    keyword: str        # upper case: FROM, RUN, COPY, ...
    value: str          # the rest of the logical line, continuations joined


@dataclass
class Stage:
    image: str                      # FROM image, ARGs substituted
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for inst in self.all("ENV"):
            env.update(_pairs(inst.value))
        return env

    def exec_form(self, keyword: str) -> list[str]:
        found = self.all(keyword)
        if len(found) != 1:
            raise BuildError(f"expected one {keyword}, found {len(found)}")
        value = json.loads(found[0].value)
        if not isinstance(value, list):
            raise BuildError(f"{keyword} must use the exec (JSON) form")
        return value


def logical_lines(text: str) -> list[str]:
    """Instructions with ``\\`` continuations joined; comments (also inside a
    continuation, as Docker allows) dropped."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        if current.strip():
            lines.append(current.strip())
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def substitute(value: str, variables: dict[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` as Docker expands them in non-RUN instructions."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)",
                  lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), value)


def parse(text: str) -> list[Stage]:
    """The stages of a Dockerfile (``ARG`` defaults before the first ``FROM``
    are substituted into ``FROM``)."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(text):
        keyword, _, value = line.partition(" ")
        keyword, value = keyword.upper(), value.strip()
        if keyword == "ARG" and not stages:
            name, _, default = value.partition("=")
            global_args[name] = default
        elif keyword == "FROM":
            parts = value.split()
            image = substitute(parts[0], global_args)
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(image=image, name=name))
        else:
            if not stages:
                raise BuildError(f"{keyword} before FROM")
            stages[-1].instructions.append(Instruction(keyword, value))
    return stages


def apt_packages(run: str, verb: str) -> set[str]:
    """Packages named after ``apt-get <verb>`` in each command of a RUN line."""
    packages: set[str] = set()
    for command in re.split(r"&&|;", run):
        words = shlex.split(command)
        if words[:1] == ["apt-get"] and verb in words:
            after = words[words.index(verb) + 1:]
            packages |= {w for w in after if not w.startswith("-")}
    return packages


def _pairs(value: str) -> dict[str, str]:
    """``KEY=value KEY2="v 2"`` (ENV, LABEL); the legacy ``ENV KEY value`` too."""
    words = shlex.split(value)
    if words and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(w.partition("=")[::2] for w in words)


# ------------------------------------------------------------------ the build context


def _docker_pattern(pattern: str) -> re.Pattern:
    """A .dockerignore pattern as a regex: Go filepath.Match plus ``**``.

    ``*`` and ``?`` stop at ``/``; ``**`` spans any number of directories.
    """
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:[^/]+/)*", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def dockerignore_patterns(repo: Path = REPO) -> list[str]:
    lines = [line.strip() for line in (repo / ".dockerignore").read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def dockerignore_excludes(relpath: str, patterns: list[str] | None = None) -> bool:
    """Docker's rule: patterns apply in order and the last one matching the
    path or one of its parent directories decides; ``!`` re-includes."""
    if patterns is None:
        patterns = dockerignore_patterns()
    parts = relpath.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _docker_pattern(pattern.lstrip("!").strip("/"))
        if any(regex.match(c) for c in candidates):
            excluded = not negate
    return excluded


def context_files(repo: Path = REPO) -> list[str]:
    """Every file of the build context (relative paths, sorted)."""
    patterns = dockerignore_patterns(repo)
    # A top-level directory excluded with nothing let back in below it is skipped whole
    # (.git, .venv, .cache: walking them would cost seconds for nothing).
    reincluded = {p.lstrip("!").strip("/").split("/")[0] for p in patterns if p.startswith("!")}
    files: list[str] = []
    for top in sorted(repo.iterdir()):
        if top.is_dir() and dockerignore_excludes(top.name, patterns) and top.name not in reincluded:
            continue
        paths = [top] if not top.is_dir() else sorted(p for p in top.rglob("*") if not p.is_dir())
        for path in paths:
            rel = path.relative_to(repo).as_posix()
            if not dockerignore_excludes(rel, patterns):
                files.append(rel)
    return files


def build_context(dest: Path, repo: Path = REPO) -> None:
    """Copy the files .dockerignore lets into the build context."""
    for rel in context_files(repo):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, target)


def _tree_digest(root: Path, sources: list[str]) -> str:
    """Content hash of what a COPY reads (paths, modes, bytes)."""
    digest = hashlib.sha256()
    for source in sources:
        base = root / source.lstrip("/")
        paths = [base] if not base.is_dir() else sorted(base.rglob("*"))
        for path in paths:
            if path.is_symlink() or path.is_dir():
                continue
            digest.update(f"{path.relative_to(root)}\0{path.stat().st_mode:o}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


# ------------------------------------------------------------------ the builder


def _run(argv: list[str], **kwargs) -> None:
    proc = subprocess.run(argv, **kwargs)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(shlex.quote(str(a)) for a in argv[:6])}... exited {proc.returncode}")


@contextlib.contextmanager
def _timed(log, what: str):
    """Log how long ``what`` took: the build's figures, step by step."""
    started = time.monotonic()
    yield
    log(f"image: {what}: {time.monotonic() - started:.1f} s")


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


@dataclass
class ImageConfig:
    """What the last stage leaves for the OCI configuration."""

    env: dict[str, str] = field(default_factory=dict)
    user: str = ""
    workdir: str = "/"
    labels: dict[str, str] = field(default_factory=dict)
    ports: list[str] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)


class Builder:
    def __init__(self, dockerfile: Path, context: Path, cache: Path, work: Path, use_cache: bool = True,
                 log=print) -> None:
        self.stages = parse(dockerfile.read_text())
        self.context = context
        self.cache = cache
        self.work = work
        self.use_cache = use_cache
        self.log = log
        self.roots: dict[str, Path] = {}       # stage name or index -> its finished root
        self.final_keys: dict[str, str] = {}   # stage name or index -> key after its last instruction
        self.used_keys: set[str] = set()   # cache files this build used or made: kept
        self.made: set[str] = set()        # cache files this build made (reused even with --no-cache)

    # -- base image ------------------------------------------------------------

    @staticmethod
    def base_key(image: str) -> str:
        recipe = BASE_IMAGES.get(image)
        if recipe is None:
            raise BuildError(f"FROM {image}: only {', '.join(BASE_IMAGES)} can be made here (with mmdebstrap)")
        return _key("base", json.dumps(recipe, sort_keys=True))

    def base(self, image: str, root: Path) -> None:
        """Unpack the base image into ``root`` (made with mmdebstrap unless cached)."""
        recipe = BASE_IMAGES[image]
        tarball = self.cache / f"base-{self.base_key(image)}.tar"
        reusable = tarball.exists() and (self.use_cache or tarball.name in self.made)
        self.made.add(tarball.name)
        if not reusable:
            self.log(f"image: FROM {image}: mmdebstrap {recipe['suite']} (minbase)")
            tmp = tarball.with_suffix(".tmp")
            argv = ["mmdebstrap", "--mode=root", "--variant=minbase", "--format=tar", "--quiet"]
            argv += [f"--dpkgopt={opt}" for opt in recipe["dpkgopts"]]
            _run([*argv, recipe["suite"], str(tmp), *recipe["sources"]])
            tmp.replace(tarball)
        root.mkdir(parents=True)
        with _timed(self.log, f"unpack the base ({tarball.stat().st_size >> 20} MB)"):
            _run(["tar", *TAR_XATTRS, "-xpf", str(tarball), "-C", str(root)])

    # -- instructions ----------------------------------------------------------

    def run(self, root: Path, command: str, env: dict[str, str], workdir: str, user: str) -> None:
        resolv = root / "etc" / "resolv.conf"
        had_resolv = resolv.exists() or resolv.is_symlink()
        if not had_resolv:
            shutil.copy("/etc/resolv.conf", resolv)
        # The host's CA bundle, for RUN lines only (never in the image): a build
        # host behind a TLS-inspecting proxy trusts its CA, and pip must too.
        host_ca = Path(os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt")
        ca_inside = root / HOST_CA.lstrip("/")
        ca_inside.touch()
        script = (
            'set -e; root="$1"; ca="$2"; shift 2\n'
            'mount -t proc proc "$root/proc"\n'
            'mount --rbind /dev "$root/dev"\n'
            'if [ -f "$ca" ]; then mount --bind -o ro "$ca" "$root' + HOST_CA + '"; fi\n'
            'exec chroot "$@"\n'
        )
        userspec = [f"--userspec={user}"] if user and user not in ("root", "0", "0:0") else []
        shell = f"cd {shlex.quote(workdir)} || exit 1\n{command}"
        passed = {k: v for k, v in os.environ.items() if k.lower() in PROXY_VARIABLES}
        try:
            _run(["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c", script, "sh",
                  str(root), str(host_ca), *userspec, str(root), "/bin/sh", "-c", shell],
                 env={"HOME": "/root", **passed, "PIP_CERT": HOST_CA, "SSL_CERT_FILE": HOST_CA,
                      "REQUESTS_CA_BUNDLE": HOST_CA, **env})
        finally:
            ca_inside.unlink(missing_ok=True)
            if not had_resolv:
                resolv.unlink(missing_ok=True)

    def copy(self, root: Path, value: str, variables: dict[str, str], workdir: str) -> str:
        """One COPY; returns the digest of what it copied (for the cache key)."""
        words = shlex.split(substitute(value, variables))
        flags = [w for w in words if w.startswith("--")]
        args = [w for w in words if not w.startswith("--")]
        sources, dest = args[:-1], args[-1]
        source_root = self.context
        digest_extra = ""
        for flag in flags:
            name, _, flag_value = flag[2:].partition("=")
            if name == "from":
                if flag_value not in self.roots:
                    raise BuildError(f"COPY --from={flag_value}: no such stage before this one")
                source_root = self.roots[flag_value]
                digest_extra = self.final_keys[flag_value]
            else:
                raise BuildError(f"COPY {flag}: not supported by this builder")
        target = dest if dest.startswith("/") else f"{workdir.rstrip('/')}/{dest}"
        into_dir = dest.endswith("/") or len(sources) > 1
        for source in sources:
            src = source_root / source.lstrip("/")
            if not src.exists():
                raise BuildError(f"COPY {source}: not in the {'stage' if digest_extra else 'build context'}")
            out = root / target.lstrip("/")
            if src.is_dir():
                out.mkdir(parents=True, exist_ok=True)
                # Contents of the directory, not the directory itself (Docker's rule).
                _run(["cp", "-a", f"{src}/.", str(out)])
            else:
                if into_dir:
                    out = out / src.name
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, out)
                os.chown(out, 0, 0)
        if not digest_extra:            # files from the context belong to root, as with Docker
            _run(["chown", "-R", "0:0", str(root / target.lstrip("/"))])
        return digest_extra or _tree_digest(source_root, sources)

    # -- stages ----------------------------------------------------------------

    def build_stage(self, index: int, stage: Stage, build_args: dict[str, str]) -> ImageConfig:
        label = stage.name or str(index)
        root = self.work / f"stage-{index}"
        config = ImageConfig()
        args: dict[str, str] = {}
        # Resume from the snapshot of the last RUN before the first COPY, if cached.
        keys = self._keys(stage, self.base_key(stage.image), build_args)
        self.used_keys.add(f"base-{self.base_key(stage.image)}.tar")  # kept for the next Dockerfile change
        copies = [i for i, inst in enumerate(stage.instructions) if inst.keyword == "COPY"]
        runs = [i for i, inst in enumerate(stage.instructions)
                if inst.keyword == "RUN" and i < (copies[0] if copies else len(stage.instructions))]
        cached_at = runs[-1] if runs else None
        start = 0
        if cached_at is not None:
            snapshot = self.cache / f"run-{keys[cached_at]}.tar"
            self.used_keys.add(snapshot.name)
            if self.use_cache and snapshot.exists():
                with _timed(self.log, f"stage {label}: restore the snapshot after instruction {cached_at + 1}"):
                    root.mkdir(parents=True)
                    _run(["tar", *TAR_XATTRS, "-xpf", str(snapshot), "-C", str(root)])
                start = cached_at + 1
        if start == 0:
            self.base(stage.image, root)
        for i, inst in enumerate(stage.instructions):
            variables = {**args, **config.env}
            replay = i < start              # cached: only the configuration is replayed
            if inst.keyword == "ARG":
                name, _, default = inst.value.partition("=")
                args[name] = build_args.get(name, default)
            elif inst.keyword == "ENV":
                config.env.update({k: substitute(v, variables) for k, v in _pairs(inst.value).items()})
            elif inst.keyword == "WORKDIR":
                config.workdir = substitute(inst.value, variables)
                if not replay:
                    (root / config.workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
            elif inst.keyword == "USER":
                config.user = substitute(inst.value, variables)
            elif inst.keyword == "LABEL":
                config.labels.update(_pairs(inst.value))
            elif inst.keyword == "EXPOSE":
                config.ports += [p if "/" in p else f"{p}/tcp" for p in inst.value.split()]
            elif inst.keyword in ("ENTRYPOINT", "CMD"):
                value = json.loads(inst.value)
                setattr(config, inst.keyword.lower(), value)
            elif inst.keyword == "RUN" and not replay:
                self.log(f"image: stage {label}: RUN {inst.value[:70]}...")
                t0 = time.monotonic()
                env = {"PATH": DEFAULT_PATH, **args, **config.env}
                self.run(root, inst.value, env, config.workdir, config.user)
                if i == cached_at:
                    snapshot = self.cache / f"run-{keys[i]}.tar"
                    tmp = snapshot.with_suffix(".tmp")
                    with _timed(self.log, f"stage {label}: save a snapshot"):
                        _run(["tar", *TAR_XATTRS, "-cpf", str(tmp), "-C", str(root), "."])
                    tmp.replace(snapshot)
                self.log(f"image: stage {label}: RUN done in {time.monotonic() - t0:.0f} s")
            elif inst.keyword == "COPY" and not replay:
                self.copy(root, inst.value, variables, config.workdir)
            elif inst.keyword not in ("RUN", "COPY"):
                raise BuildError(f"{inst.keyword}: not supported by this builder")
        self.roots[label] = root
        self.final_keys[label] = keys[-1] if keys else self.base_key(stage.image)
        return config

    def _keys(self, stage: Stage, base_key: str, build_args: dict[str, str]) -> list[str]:
        """The cache key after each instruction (see the module docstring)."""
        keys, key = [], base_key
        args: dict[str, str] = {}
        env: dict[str, str] = {}
        for inst in stage.instructions:
            extra = ""
            if inst.keyword == "ARG":
                name, _, default = inst.value.partition("=")
                args[name] = build_args.get(name, default)
                extra = args[name]
            elif inst.keyword == "ENV":
                env.update(_pairs(inst.value))
            elif inst.keyword == "COPY":
                words = shlex.split(substitute(inst.value, {**args, **env}))
                froms = [w.partition("=")[2] for w in words if w.startswith("--from=")]
                if froms:
                    extra = self.final_keys.get(froms[0], "")
                else:
                    extra = _tree_digest(self.context, [w for w in words[:-1] if not w.startswith("--")])
            key = _key(key, inst.keyword, inst.value, extra)
            keys.append(key)
        return keys

    def build(self, build_args: dict[str, str]) -> tuple[Path, ImageConfig]:
        config = ImageConfig()
        for index, stage in enumerate(self.stages):
            config = self.build_stage(index, stage, build_args)
            if stage.name:
                self.roots[str(index)] = self.roots[stage.name]
                self.final_keys[str(index)] = self.final_keys[stage.name]
        return self.roots[stage.name or str(len(self.stages) - 1)], config

    def prune_cache(self) -> None:
        for path in self.cache.glob("*.tar"):
            if path.name not in self.used_keys:
                path.unlink()


def write_oci(root: Path, config: ImageConfig, layout: Path, tag: str, work: Path) -> None:
    """The root filesystem as a one-layer OCI image at ``layout:tag`` (umoci)."""
    if layout.exists():
        shutil.rmtree(layout)
    image = f"{layout}:{tag}"
    bundle = work / "bundle"
    _run(["umoci", "init", "--layout", str(layout)])
    _run(["umoci", "new", "--image", image])
    _run(["umoci", "unpack", "--image", image, str(bundle)], stdout=subprocess.DEVNULL)
    (bundle / "rootfs").rmdir()
    root.rename(bundle / "rootfs")
    _run(["umoci", "repack", "--image", image, str(bundle)])
    argv = ["umoci", "config", "--image", image, "--config.workingdir", config.workdir]
    if config.user:
        argv += ["--config.user", config.user]
    argv += [a for k, v in sorted(config.env.items()) for a in ("--config.env", f"{k}={v}")]
    argv += [a for k, v in sorted(config.labels.items()) for a in ("--config.label", f"{k}={v}")]
    argv += [a for p in config.ports for a in ("--config.exposedports", p)]
    argv += [a for e in config.entrypoint for a in ("--config.entrypoint", e)]
    argv += [a for c in config.cmd for a in ("--config.cmd", c)]
    _run(argv)
    _run(["umoci", "gc", "--layout", str(layout)])


def image_config(layout: Path, tag: str = DEFAULT_TAG) -> dict:
    """The OCI configuration (``config`` member) of ``layout:tag``."""
    def blob(digest: str) -> dict:
        algorithm, _, value = digest.partition(":")
        return json.loads((layout / "blobs" / algorithm / value).read_text())

    index = json.loads((layout / "index.json").read_text())
    (manifest,) = [m for m in index["manifests"]
                   if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
    return blob(blob(manifest["digest"])["config"]["digest"])["config"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy/image.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_CACHE / "oci", help="OCI image layout to write")
    parser.add_argument("--tag", default=DEFAULT_TAG)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--build-arg", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    try:
        if os.geteuid() != 0:
            raise BuildError("needs root (chroot and mounts for the RUN lines)")
        for tool in ("mmdebstrap", "umoci", "unshare", "tar"):
            if shutil.which(tool) is None:
                raise BuildError(f"{tool} is not installed (Debian: apt-get install mmdebstrap umoci)")
        args.cache.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="image-build-", dir=args.cache) as tmp:
            work = Path(tmp)
            context = work / "context"
            build_context(context)
            builder = Builder(DOCKERFILE, context, args.cache, work, use_cache=not args.no_cache)
            build_args = dict(a.partition("=")[::2] for a in args.build_arg)
            root, config = builder.build(build_args)
            with _timed(print, "write the OCI layout (umoci repack: tar + gzip of one layer)"):
                write_oci(root, config, args.output.resolve(), args.tag, work)
            builder.prune_cache()
        print(f"image: {args.output}:{args.tag} built in {time.monotonic() - started:.0f} s")
    except BuildError as exc:
        print(f"image: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
