# make setup: create or update .venv (fast when current); make demo: smoke grid + report;
# make check: ruff and the tests that start no process (minutes); make test: everything (CI).
VENV   := .venv
PY     := $(VENV)/bin/python
XBENCH := $(VENV)/bin/xbench
GPU         ?= auto
TORCH_INDEX ?=
GPU_PYTHON  ?= python3
# Where the demo finds MNIST (tests read ../shared/data/mnist, see tests/conftest.py).
MNIST  ?= $(or $(XBENCH_DATA_DIR),../shared/data/mnist)

.PHONY: setup demo check test gpu-check clean

setup: $(VENV)/.setup-done

# GPU=auto (default): CUDA builds when nvidia-smi lists a GPU; GPU=1 or GPU=0 decide. TORCH_INDEX:
# a pip index for torch's CUDA wheel (e.g. https://download.pytorch.org/whl/cu128). The plan is
# common/machine.py's; scripts/check_frameworks.py then fails if a GPU set-up cannot use the GPUs.
$(VENV)/.setup-done: pyproject.toml scripts/build_horovod.sh scripts/horovod-0.28.1.patch common/machine.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	eval "$$(python3 common/machine.py --gpu '$(GPU)' --torch-index '$(TORCH_INDEX)')" && \
	$(PY) -m pip install -q $$TORCH_ARGS && \
	$(PY) -m pip install -q -e ".[$$EXTRAS]" && \
	scripts/build_horovod.sh $(PY) && \
	$(PY) scripts/check_frameworks.py --expect-gpu $$EXPECT_GPU
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

# Python may be told not to write bytecode (PYTHONDONTWRITEBYTECODE, set on these machines):
# xbench's own modules are compiled once here, or each of the thousands of processes the suite
# starts (and each run of the fast lane) would compile them again.
PACKAGES := cli common reports pt_backend tf_backend jax_backend keras_models examples tests

# The fast lane: ruff, then every test that starts no process (tests/lanes.py derives which when
# it collects them, and refuses any process one of them starts). Its tests are compute, not
# waiting (the models' parity tests take half of it): 205 s of CPU in one process here, so two
# xdist workers, each taking the next test (their fixtures are cheap): 236 s of CPU in all.
# Where its time went: .test-durations/fast-lane.json.
check: setup
	$(PY) -m ruff check .
	$(PY) -m compileall -q $(PACKAGES)
	$(PY) -m pytest --fast-lane -n 2 --dist load

# The report's browser test needs Debian's chromium, the capped-link fault iproute2's ip and tc:
# installed here when absent (CI runs as root). Two xdist workers, a test file each at a time (a
# file's module fixtures run once), the longest files first (tests/conftest.py): 1.3x faster
# than one process on 2 cores, measured.
# .test-durations/latest.json keeps where the time went.
test: setup
	@command -v chromium >/dev/null && command -v tc >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium iproute2 >/dev/null; }
	$(PY) -m compileall -q $(PACKAGES)
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder

# On a machine with CUDA PyTorch (no venv, no TensorFlow needed): the PyTorch backends on every
# GPU count, the probe, rates, MFU and memory per GPU. Refuses (exit 2) where torch sees no GPU.
gpu-check:
	$(GPU_PYTHON) scripts/gpu_check.py

clean:
	rm -rf $(VENV) results reports/out
