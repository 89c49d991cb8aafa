# Quick start: `make demo` runs the whole tuning job on sandbox hosts with the SGLang emulator (`make demo-slo`: the
# goodput search under a latency SLO instead; `make demo-upgrade`: the real case as an SGLang upgrade);
# `make test` runs every test and quality gate. Both install what they need (see scripts/setup.sh).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup test ee lint unit unit-py313 integration demo demo-slo demo-upgrade sandbox-up sandbox-down bench-client bench-tuning-scale \
        bench-goodput-search stage-files

setup:
	@bash scripts/setup.sh

test: setup  ## the integration tests, and beside them the gates (lint, unit tests on 3.11 and 3.13) one after another
	@bash scripts/gates.sh

unit: setup
	@bash scripts/pytest.sh tests/unit

unit-py313:  ## the unit tests and ansible-test sanity on Python 3.13 with ansible-core 2.21 (the highest supported; the project venv is 3.11 with 2.19), in .cache/venv-3.13 (makes its own)
	@bash scripts/unit-py313.sh

integration: setup  ## fails where sandbox hosts cannot run (root, namespaces) unless LLMOPS_SKIP_INTEGRATION=1
	@bash scripts/integration.sh

ee: setup  ## the execution environment's build context in ./context, with the collection's tarball (scripts/ee.sh)
	@bash scripts/ee.sh

lint: setup
	@bash scripts/lint.sh

stage-files: setup  ## the files that name the stages (tune.yml, role defaults and argument_specs, AWX, docs' lists) written from plugins/module_utils/stages.py
	@$(PY) scripts/stage_files.py

demo: setup  ## ARGS: options of `llmops-sglang tune`, e.g. make demo ARGS="-e tuning_run_sequential=null"
	@bash scripts/demo.sh $(ARGS)

demo-slo: setup  ## the goodput search on the demo host (examples/demo-slo.yml); prints the recommendation
	@bash scripts/demo-slo.sh $(ARGS)

demo-upgrade: setup  ## the real case as an upgrade, SGLang 0.5.10 (Triton 3.5.1) -> 0.5.11 (Triton 3.6.0), on the demo host (examples/demo-upgrade.yml); prints where the report is
	@bash scripts/demo-upgrade.sh $(ARGS)

sandbox-up: setup
	@$(PY) -m tests.sandbox up --hosts $${HOSTS:-1} --emulator

sandbox-down: setup
	@$(PY) -m tests.sandbox down

bench-client: setup  ## our benchmark client vs SGLang's bench_serving on the emulator (installs ~6 GB into .cache)
	@$(PY) benchmarks/client_throughput.py

bench-goodput-search: setup  ## our goodput search vs sglang.auto_benchmark on the emulator, same GPU-minute budget (~37 min)
	@$(PY) benchmarks/goodput_search.py

bench-tuning-scale: setup  ## MoE tuning wall time on 1, 2, 3 sandbox hosts over one Ray cluster (emulator, root, ~2 min)
	@$(PY) -m benchmarks.tuning_scale
