"""deploy/Dockerfile, checked without a Docker engine.

These tests pin, without building, the parts of the Dockerfile other code
depends on (tests/deploy/test_image_build.py builds and runs the image): the base image, the data plane packages (the same ones
the host set-up installs, so host tests exercise what the image ships), the
entry point and its role argument, the share directory platformd.paths reads,
the non-root user the Helm chart runs the ingress role as, and a build context
(.dockerignore) that contains every file the Dockerfile copies.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from . import dockerfile

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "Dockerfile"

INGRESS_PACKAGES = {"nginx", "libnginx-mod-http-lua", "libnginx-mod-stream", "lua-cjson"}
NODEPROXY_PACKAGES = {"ipset", "iptables", "nftables", "conntrack", "kmod"}
# Not data plane, but needed to run at all: the interpreter of the venv, the
# CA bundle for TLS to the API server, and setcap (nginx needs it anyway,
# through iproute2: purging it removed nginx).
RUNTIME_PACKAGES = {"python3", "ca-certificates", "libcap2-bin"}
SHARE_DIR = "/usr/share/platformd"


@pytest.fixture(scope="module")
def stages():
    return dockerfile.parse(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def final(stages):
    return stages[-1]


def installed_minus_purged(stage) -> set[str]:
    installed, purged = set(), set()
    for run in stage.all("RUN"):
        installed |= dockerfile.apt_packages(run.value, "install")
        purged |= dockerfile.apt_packages(run.value, "purge")
    return installed - purged


def test_every_stage_is_debian_12_slim(stages):
    assert len(stages) >= 2
    for stage in stages:
        assert stage.image == "debian:12-slim", stage.image


def test_runtime_installs_the_data_plane_and_nothing_else(final):
    assert installed_minus_purged(final) == INGRESS_PACKAGES | NODEPROXY_PACKAGES | RUNTIME_PACKAGES


def test_apt_usage_keeps_the_image_small(stages):
    for stage in stages:
        for run in stage.all("RUN"):
            if "apt-get install" in run.value:
                assert "--no-install-recommends" in run.value
                assert "rm -rf /var/lib/apt/lists/*" in run.value
                assert "apt-get update" in run.value      # same layer: never a stale index


def test_image_packages_are_installed_by_the_host_setup(final):
    """Host tests run the same nginx/Lua/ipset/iptables the image ships."""
    setup = (REPO / "scripts" / "setup.sh").read_text()
    block = re.search(r"APT_PACKAGES=\((.*?)\)", setup, re.S).group(1)
    host = set(block.split())
    assert (INGRESS_PACKAGES | NODEPROXY_PACKAGES) <= host


def test_packages_exist_in_debian_12():
    if shutil.which("apt-cache") is None:
        pytest.skip("apt-cache not available: not a Debian host")
    release = open("/etc/os-release").read()
    if 'VERSION_ID="12"' not in release:
        pytest.skip("the host is not Debian 12; its archive says nothing about bookworm")
    wanted = INGRESS_PACKAGES | NODEPROXY_PACKAGES | RUNTIME_PACKAGES | {"python3-venv"}
    proc = subprocess.run(["apt-cache", "show", "--no-all-versions", *sorted(wanted)],
                          capture_output=True, text=True, timeout=120)
    found = set(re.findall(r"^Package: (\S+)$", proc.stdout, re.M))
    assert wanted - found == set(), proc.stderr


def test_entrypoint_is_platformd_with_a_role(final):
    assert final.exec_form("ENTRYPOINT") == ["platformd"]
    cmd = final.exec_form("CMD")
    assert cmd[0] == "--role" and cmd[1] in {"ingress", "nodeproxy", "all"}


def test_entrypoint_is_the_packages_console_script(final):
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["platformd"] == "platformd.cli:main"
    path = final.env()["PATH"].split(":")
    assert path[0] == "/opt/platformd/bin"
    assert any(i.value.startswith("--from=build /opt/platformd /opt/platformd") for i in final.all("COPY"))


def test_lua_and_templates_go_to_the_share_dir(final):
    assert final.env()["PLATFORM_SHARE_DIR"] == SHARE_DIR
    copies = {tuple(i.value.split()) for i in final.all("COPY")}
    assert ("lua", f"{SHARE_DIR}/lua") in copies
    assert ("templates", f"{SHARE_DIR}/templates") in copies


def test_paths_module_follows_the_share_dir(monkeypatch, final):
    paths = pytest.importorskip("platformd.paths")
    monkeypatch.setenv("PLATFORM_SHARE_DIR", final.env()["PLATFORM_SHARE_DIR"])
    assert str(paths.lua_dir()) == f"{SHARE_DIR}/lua"
    assert str(paths.templates_dir()) == f"{SHARE_DIR}/templates"


def test_nginx_binds_low_ports_without_root(final):
    runs = " ".join(i.value for i in final.all("RUN"))
    assert "setcap cap_net_bind_service=+ep /usr/sbin/nginx" in runs


def test_runs_as_the_user_the_chart_expects(final):
    """The image's default user is the ingress role's: non-root, same uid as the chart."""
    uid_arg = next(i.value for i in final.all("ARG") if i.value.startswith("PLATFORM_UID="))
    uid = int(uid_arg.partition("=")[2])
    assert uid != 0
    (user,) = final.all("USER")
    assert user.value == "${PLATFORM_UID}:${PLATFORM_UID}"
    values = yaml.safe_load((REPO / "deploy/helm/platform/charts/ingress/values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == uid
    assert values["podSecurityContext"]["runAsGroup"] == uid


# --- build context ------------------------------------------------------------

dockerignore_excludes = dockerfile.dockerignore_excludes


def context_sources(stages) -> list[str]:
    sources = []
    for stage in stages:
        for copy in stage.all("COPY"):
            words = copy.value.split()
            if any(w.startswith("--from=") for w in words):
                continue
            sources += [w for w in words[:-1] if not w.startswith("--")]
    return sources


def test_copied_files_exist_and_are_in_the_build_context(stages):
    sources = context_sources(stages)
    assert {"pyproject.toml", "README.md", "platform", "lua", "templates"} <= set(sources)
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: missing in the repository"
        assert not dockerignore_excludes(source), f"COPY {source}: excluded by .dockerignore"


def test_build_context_leaves_out_local_state():
    for path in (".venv", ".cache/tools/helm", ".git", "tests/deploy/test_chart.py", "deploy/Dockerfile",
                 "platform/__pycache__/cli.cpython-311.pyc", "platform/common/x.pyc"):
        assert dockerignore_excludes(path), path


def test_build_context_keeps_every_source_file():
    for top in ("platform", "lua", "templates"):
        files = [p for p in (REPO / top).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
        assert files, top
        for path in files:
            rel = path.relative_to(REPO).as_posix()
            assert not dockerignore_excludes(rel), f"{rel} would be missing from the image"


def test_pyproject_readme_is_copied_for_the_build(stages):
    """setuptools reads the readme named in pyproject.toml while building."""
    readme = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["readme"]
    assert readme in context_sources(stages[:1])


def test_nginx_modules_the_config_loads_come_with_the_packages():
    """templates/nginx.conf.j2 loads modules by path; Debian's packages put them there."""
    if shutil.which("dpkg") is None:
        pytest.skip("dpkg not available: not a Debian host")
    template = (REPO / "templates" / "nginx.conf.j2").read_text()
    modules = re.findall(r"^load_module\s+(\S+);", template, re.M)
    assert modules, "nginx.conf.j2 loads no modules"
    proc = subprocess.run(["dpkg", "-L", *sorted(INGRESS_PACKAGES), "libnginx-mod-http-ndk"],
                          capture_output=True, text=True, timeout=60)
    shipped = set(proc.stdout.split())
    assert set(modules) <= shipped, set(modules) - shipped
