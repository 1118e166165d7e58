# Set-up is implicit: the first target that needs the environment builds .venv.
VENV ?= .venv
PYTHON ?= python3
# On this kind of machine torch 2.13.0 is a local CPU wheel; it is installed first so that no other
# torch is ever resolved. On a CUDA machine: make install TORCH_SPEC="torch==2.13.0" (PyPI's CUDA build).
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install train test test-process lint docs bench bench-gpu reproduce reproduce-gao-scale clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/degen-train $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check degen_train tests bench

# The manual (docs/, mkdocs.yml) in strict mode: a broken link, anchor or a page missing from nav fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# Two tiers, set by tests/conftest.py from each test's code: `make test` runs every test that starts no Python
# process, on both cores (pytest-xdist: one worker a core, each test's runs one thread each); `make test-process` the
# ones that do (the commands as users run them, two-process DDP/FSDP2 equality, kill -9 and signal drills, a second
# writer, multirun), one at a time: their own processes take the cores. CI (.ci/run) runs both, in that order.
TEST_WORKERS ?= 2
test: $(STAMP) lint docs
	$(BIN)/python -m pytest -q --durations=15 -n $(TEST_WORKERS) --dist loadfile -m "not process" tests

test-process: $(STAMP)
	$(BIN)/python -m pytest -q --durations=15 -m process tests

bench: $(STAMP)
	$(BIN)/python bench/run.py

# One lent card's sitting (bench/gpu/): its plan and estimate printed first, at most 9 minutes; degen-train at its
# best beside a careful compiled loop, each lever off, each regularizer's cost, a default cadence end to end.
# ARGS=ROW ... (best levers terms end_to_end, and host exactness fsdp). Writes docs/gpu/sitting.json and docs/gpu.md's
# sitting table. Without a GPU: one line, exit 2.
bench-gpu: $(STAMP)
	$(BIN)/python bench/run.py gpu $(ARGS)

# The seed methods' claims at CPU scale on WikiText-2 -> docs/reproduce/ (resumable; ARGS=KEY=VALUE ...).
reproduce: $(STAMP)
	$(BIN)/degen-reproduce $(ARGS)

# Part (a) at the scale of Gao et al.'s perplexity claim, on one GPU (about 5 min by make bench-gpu's estimate; conf/reproduce/gao_scale.yaml).
reproduce-gao-scale: $(STAMP)
	$(BIN)/degen-reproduce preset=gao_scale $(ARGS)

clean:
	rm -rf $(VENV) outputs multirun site .pytest_cache .ruff_cache
