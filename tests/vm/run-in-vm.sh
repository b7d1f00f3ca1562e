#!/usr/bin/env bash
# Run one command inside the real-kernel test VM and exit with its status:
#   tests/vm/run-in-vm.sh [--timeout S] [--env NAME=VALUE]... -- CMD ARGS...
# The working directory and the whole host tree are the same inside.
# Exit 125 means the VM itself failed (not prepared, no QEMU, timeout).
exec python3 "$(dirname "$0")/vm.py" run "$@"
