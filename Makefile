# Routine tasks. Every target installs what it needs into .venv first.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: install run test unit integration chaos bench lint format demo clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,dev]'
	touch $@

run: install          ## embedded broker + one worker + HTTP on :6066
	$(BIN)/scheduler run

test: install         ## the whole suite: unit + integration on a real broker
	$(BIN)/pytest

demo: install         ## ingest -> transform -> report on the embedded broker with Spark local
	$(BIN)/scheduler demo

chaos: install        ## 3 workers, 2000 every-second schedules, random SIGKILLs for 3 min: 0 missed
	$(BIN)/python -m tests.chaos --workers 3 --schedules 2000 --duration 180

bench: install        ## benchmarks (report, never assert): results in tests/bench/results/ and the README
	$(BIN)/python -m tests.bench.run

unit: install
	$(BIN)/pytest -m unit

integration: install
	$(BIN)/pytest -m integration

lint: install
	$(BIN)/ruff check scheduler tests
	$(BIN)/ruff format --check scheduler tests
	$(BIN)/mypy scheduler

format: install
	$(BIN)/ruff format scheduler tests
	$(BIN)/ruff check --fix scheduler tests

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache *.egg-info
