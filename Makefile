# Two commands do everything on a fresh Debian/Ubuntu machine (as root):
#   make demo   virtualenv + system packages + lab up + deploy + status
#   make test   the same setup, then the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
PYINFRA := $(VENV)/bin/pyinfra
SYSTEM_PACKAGES := lxc lxcfs debootstrap debian-archive-keyring gpgv nftables openssh-client iproute2 make python3-venv prometheus

.PHONY: demo demo-scale test lint venv system-packages lab-up lab-up-scale lab-down deploy deploy-scale preflight status clean

demo: venv system-packages lab-up deploy status
# The scale lab: pve1 and pve2, the replica set, the TP group and the router (inventory/lab_scale.py).
demo-scale: venv system-packages lab-up-scale deploy-scale

# The suite in TEST_WORKERS sessions side by side (pytest-xdist): the lab tests mostly wait (SSH,
# systemd, pip, deadlines), so their waits overlap even on 2 cores. Worker N drives lab slot
# SGLANG_PVE_LAB_SLOT + N (tests/conftest.py; `lab-up` starts the first, a module's lab fixture
# the others); a test module runs whole on one worker (--dist loadscope), in collection order.
TEST_WORKERS ?= 3
test: venv system-packages lint lab-up
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

# One check a line (the layers: pyproject.toml's [tool.importlinter]).
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-logo
	$(VENV)/bin/mypy

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

system-packages:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done | tr '\n' ' '); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

lab-up: venv
	$(PY) -m lab up

lab-up-scale: venv
	$(PY) -m lab up --scale

lab-down: venv
	$(PY) -m lab down

deploy: venv
	$(PYINFRA) -y inventory/lab.py deploy.py

deploy-scale: venv
	$(PYINFRA) -y inventory/lab_scale.py deploy.py
	$(PYINFRA) -y inventory/lab_scale.py tasks/status.py

preflight: venv
	$(PYINFRA) -y inventory/lab.py tasks/preflight.py

status: venv
	$(PYINFRA) -y inventory/lab.py tasks/status.py

clean: lab-down
	rm -rf $(VENV) *.egg-info
