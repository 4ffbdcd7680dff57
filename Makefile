# make setup: create or update .venv (fast when current); make demo: smoke grid + report; make test.
VENV   := .venv
PY     := $(VENV)/bin/python
XBENCH := $(VENV)/bin/xbench
# The CPU build of torch on disk; installed first so pip never resolves a newer (CUDA) torch.
TORCH  := torch==2.13.0
# Where the demo finds MNIST (tests read ../shared/data/mnist, see tests/conftest.py).
MNIST  ?= $(or $(XBENCH_DATA_DIR),../shared/data/mnist)

.PHONY: setup demo test clean

setup: $(VENV)/.setup-done

$(VENV)/.setup-done: pyproject.toml scripts/build_horovod.sh scripts/horovod-0.28.1.patch
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[tf,dev]'
	scripts/build_horovod.sh $(PY)
	touch $@

demo: setup
	rm -f results/demo.jsonl
	@if [ -d "$(MNIST)" ]; then \
	  $(XBENCH) grid --preset smoke --data-dir "$(MNIST)" --results results/demo.jsonl; \
	else \
	  echo "!!! MNIST not found in $(MNIST): the demo runs on SYNTHETIC data (rows say so)."; \
	  echo "!!! Get real data: $(XBENCH) data download --to data/mnist; make demo MNIST=data/mnist"; \
	  $(XBENCH) grid --preset smoke --data synthetic --results results/demo.jsonl; \
	fi
	$(XBENCH) report results/demo.jsonl --out reports/out/demo

# The report's browser test needs Debian's chromium: installed here when absent (CI runs as root).
test: setup
	@command -v chromium >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	$(PY) -m pytest

clean:
	rm -rf $(VENV) results reports/out
