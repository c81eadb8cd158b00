# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install native clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (secinfer needs Python 3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) native

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
