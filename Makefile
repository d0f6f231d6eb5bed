# Tandem: one pool of GPU Nodes for Slurm jobs and Kubernetes Pods.
#   make demo   the whole local stack up and a Pod scheduled through Slurm
#   make test   lint + unit + integration tests against the real local stack
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
PROTOS := $(wildcard proto/tandem/v1/*.proto)
GENERATED := libs/tandem/v1/.generated
PYTEST_ARGS ?=
# The unit tests on four workers (pytest-xdist): on 2 cores 66 s instead of 143 s, their waits on
# sockets and threads overlapping (issue 51).
UNIT_WORKERS ?= 4
# The second Slurm release the lab runs (devstack/slurm_root.py), on the previous Kubernetes
# release (so both Workload API versions stay tested); its leg has a stack of its own.
NEXT_SLURM := 26.05
PREVIOUS_KUBERNETES := v1.36.2
# (under the state dir `make up` would use, which others can traverse: slurmrestd runs as nobody;
# its ports below 32768, where Linux picks the local ports of outgoing connections).
NEXT_STACK = TANDEM_STATE_DIR=$$($(BIN)/python -c 'from devstack.config import default_state_dir; print(default_state_dir())')/stack-slurm-$(NEXT_SLURM) TANDEM_PORT_BASE=30000 SLURM_VERSION=$(NEXT_SLURM) KUBERNETES_VERSION=$(PREVIOUS_KUBERNETES)

.PHONY: install proto tools prebuild lint-tools real-node-tools image lint unit integration test test-next-slurm next-leg-tests test-chart up down status demo bench clean

install: $(INSTALLED) $(GENERATED)

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# Python stubs are generated from proto/ at build time, never edited by hand.
$(GENERATED): $(PROTOS) $(INSTALLED)
	$(BIN)/python hatch_build.py .  # the same generator as every wheel build
	touch $@

proto: $(GENERATED)

tools: install
	$(BIN)/python -m devstack tools

# kubelet, kube-proxy, containerd, runc, the CNI plugins, CoreDNS and the pause image of the real
# Node (lab/KUBELET.md), cached by version; only DEPLOY=chart needs them, never plain `make up`.
real-node-tools: install
	$(BIN)/python -m devstack real-node-tools

# Tandem's image as the Dockerfile builds it, without a Docker daemon, on a Debian base the lab
# debootstraps; an OCI layout tarball for `ctr images import`, cached by a hash of its inputs.
image: install
	$(BIN)/python -m devstack image

# buf and helm only: the rest of the lab's tools are built when its stack first starts, after the
# lint and the unit tests (a fresh machine reaches a broken unit test in minutes, not 25).
lint-tools: install
	$(BIN)/python -m devstack lint-tools

lint: lint-tools
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	.tandem/bin/buf lint
	bash helm/sync-scripts.sh --check
	.tandem/bin/helm lint helm/tandem
	$(BIN)/python bench/report.py --check

unit: install
	$(BIN)/pytest tests/unit -n $(UNIT_WORKERS) $(PYTEST_ARGS)

# The integration tests against one stack: those marked `parallel` side by side on
# TANDEM_INTEGRATION_WORKERS workers, then the rest one at a time (tests/integration/run.py, issue 51).
INTEGRATION := $(BIN)/python -m tests.integration.run

# Everything on Slurm 24.11 with the Kubernetes controllers: the unit tests first (about a minute,
# no stack), so a broken one fails before the lab starts (issue 51).
test: lint
	$(BIN)/pytest tests/unit -n $(UNIT_WORKERS) $(PYTEST_ARGS)
	$(INTEGRATION) $(PYTEST_ARGS)

# CI's second leg: on Slurm $(NEXT_SLURM) and Kubernetes $(PREVIOUS_KUBERNETES), the integration tests that
# reach code whose behaviour depends on the release (tests/integration/next_leg.txt, marked next_leg).
test-next-slurm: install
	$(NEXT_STACK) $(INTEGRATION) --marks next_leg $(PYTEST_ARGS)

# Which tests those are, measured: the candidates run on both release pairs with each service under
# coverage (devstack/coverage_by_test.py), and the list names the fewest that run all the code whose
# lines differ between the pairs (devstack/next_leg_tests.py). About 20 minutes; run it when
# release-specific code changes, and commit the list.
NEXT_LEG_CANDIDATES := slurm and not slurm_timer
COVERAGE_DIR := $(CURDIR)/.tandem/coverage
next-leg-tests: install
	$(MAKE) down
	$(NEXT_STACK) $(BIN)/python -m devstack down
	rm -rf $(COVERAGE_DIR)
	TANDEM_COVERAGE_DIR=$(COVERAGE_DIR)/first $(BIN)/pytest tests/integration -m '$(NEXT_LEG_CANDIDATES)' -p no:cacheprovider
	$(NEXT_STACK) TANDEM_COVERAGE_DIR=$(COVERAGE_DIR)/second $(BIN)/pytest tests/integration -m '$(NEXT_LEG_CANDIDATES)' -p no:cacheprovider
	$(BIN)/python -m devstack.next_leg_tests $(COVERAGE_DIR)/first $(COVERAGE_DIR)/second --write tests/integration/next_leg.txt

# The seed flows again on Tandem as `helm install` puts it on the lab's real Node (CI's third leg).
test-chart: install
	DEPLOY=chart $(INTEGRATION) --marks 'chart and not slurm_timer' $(PYTEST_ARGS)

up: install
	$(BIN)/python -m devstack up

# What CI's three legs build, in the order they need it. .ci/run starts it in the background at the
# lowest priority while the first leg runs; a leg that needs a product still being built waits for
# that build (devstack/build_lock.py, issue 51).
prebuild: install
	$(BIN)/python -m devstack build
	$(NEXT_STACK) $(BIN)/python -m devstack build
	$(BIN)/python -m devstack real-node-tools
	$(BIN)/python -m devstack image

down:
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m devstack down; else echo "nothing to stop"; fi

status: install
	$(BIN)/python -m devstack status

# Like `make up`, except that on a fresh machine Kueue's and LWS's controllers, which the demo does
# not use, are built and started by the next `make up`, not before the demo's Pods (issue 51).
demo: install
	$(BIN)/python -m devstack demo

clean: down
	rm -rf .tandem $(VENV) libs/tandem/v1 .mypy_cache .ruff_cache .pytest_cache
