#!/usr/bin/env bash
# Runs every test: Lua unit tests (busted), the host pytest suite, and the
# real-kernel node-proxy tests inside a QEMU VM (tests/vm). Exits non-zero if
# any part fails; each part still runs so one failure does not hide another.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0

if [ -d tests/lua ] && ls tests/lua/*_spec.lua >/dev/null 2>&1; then
  echo "== busted (lua unit tests)"
  busted --lpath="./lua/?.lua;./lua/?/init.lua" tests/lua || status=1
fi

# The host suite includes the slow tests, among them the image built from
# deploy/Dockerfile and run as its unprivileged user (tests/deploy/test_image_build.py).
echo "== pytest (host)"
.venv/bin/python -m pytest -q -m "not realkernel" "$@" || status=1

if [ -x tests/vm/run-realkernel-tests.sh ]; then
  echo "== pytest (real kernel VM)"
  bash tests/vm/run-realkernel-tests.sh || status=1
fi
exit $status
