#!/usr/bin/env bash
# The real-kernel node-proxy tests: `pytest -m realkernel tests/nodeproxy_realkernel`
# inside ONE QEMU VM booting Debian's kernel (see tests/vm/vm.py). This is what
# `make test` (scripts/test.sh) and `make test-vm` run. Extra arguments go to pytest.
#
# Exits with pytest's status. When the VM cannot run at all (no QEMU, the
# kernel package cannot be fetched, boot failure, timeout) it exits 125 with a
# loud message: CI must run these tests, so "could not run" is a failure,
# never a skip.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
# The whole VM run (boot, imports, every test) normally takes 2-4 minutes
# under software emulation; the timeout only stops a hung guest.
TIMEOUT=${PLATFORM_VM_TIMEOUT:-600}

fail_loudly() {
  echo "=================================================================" >&2
  echo "REAL-KERNEL TESTS DID NOT RUN: $1" >&2
  echo "These tests are required; see tests/vm/vm.py for what the VM needs." >&2
  echo "=================================================================" >&2
  exit 125
}

python3 tests/vm/vm.py prepare >/dev/null || fail_loudly "preparing the VM kernel failed"

# Imports inside the VM read .py files over 9p and compile them under
# emulation, and PYTHONDONTWRITEBYTECODE may be set: compile once here
# (compileall skips files that are up to date).
"$PY" -m compileall -q -j 0 platform tests "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
  >/dev/null 2>&1 || true
"$PY" -m compileall -q -j 0 "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')" >/dev/null 2>&1 || true

# hypothesis is not used here and its plugin costs ~20 s of imports under emulation.
python3 tests/vm/vm.py run --timeout "$TIMEOUT" -- \
  "$PY" -m pytest -m realkernel -p no:cacheprovider -p no:hypothesispytest -q tests/nodeproxy_realkernel "$@"
status=$?
if [ "$status" = 125 ]; then
  fail_loudly "the VM failed to start or timed out (see above)"
fi
exit "$status"
