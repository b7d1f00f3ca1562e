# The two commands the README promises:
#   make demo   set everything up, then run the ingress role on the embedded demo
#   make test   set everything up, then run every test (what .ci/run calls)
SHELL := /bin/bash
PY := .venv/bin/python

.PHONY: setup demo test test-fast test-vm image bench clean

setup:
	@bash scripts/setup.sh

demo: setup
	@$(PY) -m platformd.demo

# Default suite: unit, fake-API, real-nginx and supervisor tests on the host,
# Lua unit tests with busted, then the node-proxy tests inside a real kernel VM.
test: setup
	@bash scripts/test.sh

test-fast: setup
	@$(PY) -m pytest -q -m "not realkernel and not slow"

# The container image from deploy/Dockerfile without Docker (root; mmdebstrap + umoci):
# an OCI layout in .cache/image/oci, tag "platformd".
image: setup
	@python3 deploy/image.py --output .cache/image/oci

test-vm: setup
	@bash tests/vm/run-realkernel-tests.sh

bench: setup
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf .venv .cache build *.egg-info
