# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install native bytecode clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (secinfer needs Python 3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) native bytecode

# The package's own modules compiled ahead (compileall skips what is up to date): where
# PYTHONDONTWRITEBYTECODE is set, Python would otherwise compile every secinfer module in
# every process it starts (a `secinfer run`: the command, its fork server) and never keep
# the result: ~0.45 s of CPU per run of W1 (issue #23 item 2).
bytecode: $(STAMP)
	@$(PY) -m compileall -q src

# The native library (Lattigo HE, FSS kernels, garbled circuits, ZK; src/secinfer/native/go)
# is built by the package's own build step.
native: $(STAMP)
	$(PY) -m secinfer.native.build

demo: install
	$(VENV)/bin/secinfer demo

test: install
	$(PY) -m pytest -q -n 2 --timeout=300

clean:
	rm -rf $(VENV) build src/*.egg-info
