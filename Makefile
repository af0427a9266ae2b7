# disklab: `make lab` runs the storage lab on this machine; `make test` runs the test suite.
PYTHON ?= python3
VENV := .venv
TEST_VENV := .venv-test
PIP_FLAGS := --quiet --disable-pip-version-check

.PHONY: lab test test-fast lint bench report clean collection ee steps locks

# Controller venv: ansible-core, ansible-runner, jinja2, pyyaml, jsonschema, matplotlib, rich, markdown-it-py,
# mdit-py-plugins, shtab, psutil, disklab.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install $(PIP_FLAGS) -e .
	touch $@

# Test venv: the controller's packages plus pytest, ruff, ansible-lint and torch==2.13.0 (CPU), safetensors.
$(TEST_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(TEST_VENV)
	$(TEST_VENV)/bin/pip install $(PIP_FLAGS) -e '.[test]'
	touch $@

lab: $(VENV)/.installed
	$(VENV)/bin/disklab run

report: $(VENV)/.installed
	$(VENV)/bin/disklab report

lint: $(TEST_VENV)/.installed
	$(TEST_VENV)/bin/ruff check src tests bench roles plugins
	$(TEST_VENV)/bin/ruff format --check src tests bench roles plugins
	cd $(CURDIR) && $(TEST_VENV)/bin/ansible-lint --profile production playbooks roles

# The whole suite: ruff, then pytest in TEST_WORKERS processes, a module to a worker at a time (pytest-xdist's
# loadfile, longest modules first: tests/conftest.py); ansible-lint runs inside it (tests/test_lint.py), beside
# the other modules. Much of the suite waits on SSH, Ansible's polls and fsync, so more workers than cores pay.
TEST_WORKERS ?= 4
test: $(TEST_VENV)/.installed
	$(TEST_VENV)/bin/ruff check src tests bench roles plugins
	$(TEST_VENV)/bin/ruff format --check src tests bench roles plugins
	$(TEST_VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The edit-and-check loop: ruff, and the tests that need no root, no test fleet and no lab experiment (the
# markers in pyproject.toml; tests/conftest.py marks heavy a test that shares a module or session set-up).
# make test runs them all.
FAST_TESTS := not slow and not fleet and not root and not heavy
test-fast: $(TEST_VENV)/.installed
	$(TEST_VENV)/bin/ruff check src tests bench roles plugins
	$(TEST_VENV)/bin/pytest -q -m "$(FAST_TESTS)" --durations=10

# The step lists Ansible reads (the step tags, lab_run's steps and sizes), written from the registry
# (disklab.stepfiles); it then names each hand-written file a step still lacks. tests/test_stepfiles.py checks.
steps: $(TEST_VENV)/.installed
	$(TEST_VENV)/bin/python -m disklab.stepfiles $(CURDIR)

# fio is the reference the bench compares disklab with; the fleet part needs the test fleet's tools, several
# of them in /usr/sbin or /sbin, which a non-root PATH lacks: the check and the bench itself run with them.
BENCH_TOOLS := fio mkfs.xfs mkfs.btrfs mkfs.ext4 sshd ssh ssh-keygen strace ip unshare nsenter losetup
BENCH_PATH := $(PATH):/usr/sbin:/sbin
bench: $(TEST_VENV)/.installed
	missing=; for t in $(BENCH_TOOLS); do PATH="$(BENCH_PATH)" command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then echo "make bench: installing what provides:$$missing"; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends fio xfsprogs btrfs-progs e2fsprogs \
	    openssh-server openssh-client strace iproute2 util-linux; fi
	PATH="$(BENCH_PATH)" $(TEST_VENV)/bin/python bench/run.py $(BENCH_ARGS)

# The lab venv's hash locks, one per platform and CPython (src/disklab_host/locks/), from the pins in
# roles/lab_venv/defaults/main.yml, and each production loader's on each (locks/loaders/NAME/), with uv;
# after a pin changes, run this and commit the locks.
# LOCK_ARGS: --only NAME (one lock and its loaders'); --extras-only (the loaders' alone); --cpu-source DIR|URL (repeatable) and --cpu-index-url URL where
# PyTorch's CPU index or PyPI is out of reach of the lab hosts (the CPU lock in the repo was made with
# --cpu-source /opt/wheels --cpu-source file:///opt/pypi-more/simple --cpu-index-url file:///opt/pypi/simple,
# the wheels this project's controller and test fleet reach).
locks: $(TEST_VENV)/.installed
	$(TEST_VENV)/bin/python -m disklab.locks $(LOCK_ARGS)

# The collection disklab.lab as a tarball in .ee/ (ansible-galaxy collection install .ee/disklab-lab.tar.gz), and
# the build context of an execution environment with it (.ee/context; podman build -t disklab-ee .ee/context).
collection: $(TEST_VENV)/.installed
	mkdir -p .ee && rm -f .ee/disklab-lab-*.tar.gz
	$(TEST_VENV)/bin/ansible-galaxy collection build --force --output-path .ee .
	mv .ee/disklab-lab-*.tar.gz .ee/disklab-lab.tar.gz

ee: collection
	$(TEST_VENV)/bin/ansible-builder create -f execution-environment.yml -c .ee/context

clean:
	rm -rf $(VENV) $(TEST_VENV) .lab .ee
