# Routine tasks. Every target installs what it needs into .venv first.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
#: the other supported Pythons, whose unit suites `make unit-versions` runs (each in .venv-<version>)
OTHER_PYTHONS ?= 3.12 3.13
#: test processes of the parallel phases: the integration tests wait on brokers and workers more than they
#: compute (at 2, the 2 cores were 50-72 % busy through make test's first phase, sampled each minute)
TEST_PROCESSES ?= 3

.PHONY: install run test test-embedded kafka-jars unit unit-versions unit-lowest integration chaos campaign bench lint format demo docs docs-serve clean

install: $(VENV)/.installed

# (pip -qq for the project: errors only; setuptools notes, as a warning, every editable install of a layout
# with a package-dir, as ours has for scheduler.avro)
$(VENV)/.installed: pyproject.toml deploy/constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install -qq -c deploy/constraints.txt -e '.[spark,test,dev,docs]'
	touch $@

run: install          ## a broker (Apache Kafka where java and mvn are, else Tansu) + one worker + HTTP on :6066
	$(BIN)/scheduler run

test: install         ## the whole suite: unit + integration on Apache Kafka from its jars (see Brokers and Tests)
	$(BIN)/pytest -n $(TEST_PROCESSES) --dist loadfile --durations=25 -m "not serial"  # at once: tests that share nothing
	$(BIN)/pytest --durations=25 -m serial  # then, one at a time, those that kill or time

test-embedded: install  ## the tests marked `embedded` again, on the embedded Tansu broker (what differs there)
	SCHEDULER_TEST_BROKER=tansu $(BIN)/pytest -n $(TEST_PROCESSES) --dist loadfile --durations=25 -m "embedded and not own_broker and not serial"
	SCHEDULER_TEST_BROKER=tansu $(BIN)/pytest --durations=25 -m "embedded and not own_broker and serial"

kafka-jars: install   ## fetch the pinned Apache Kafka's jars into the cache (mvn; once)
	$(BIN)/python -c "from scheduler.kafka.kafka_server import classpath; print(classpath())"

demo: install         ## ingest -> transform -> report on the embedded broker with Spark local
	$(BIN)/scheduler demo

chaos: install        ## 3 workers, 2000 every-second schedules, SIGKILLs, SIGSTOP pauses, network cuts and broker SIGKILLs for 3 min: 0 missed, 0 repeated on Kafka; then the `long` tests (CI runs a bounded form of each fault)
	$(BIN)/python -m tests.chaos --workers 3 --schedules 2000 --duration 180
	SCHEDULER_TEST_BROKER=kafka $(BIN)/pytest -m long

campaign: install     ## the randomized fault campaign: 20 seeds x 3 min, each choosing workers, brokers, start, command paths, schedule kinds and faults (CI runs 2 seeds x 50 s)
	$(BIN)/python -m tests.campaign --seeds $(or $(SEEDS),20) --duration $(or $(DURATION),180)

bench: install        ## benchmarks (report, never assert): results in tests/bench/results/ and the docs' Benchmarks page; ETF1=PATH puts etf1/kafka-message-scheduler (tests/bench/etf1.sh builds it) beside our delayed messages
	$(BIN)/python -m tests.bench.run
	$(BIN)/python -m tests.bench.tick --out tests/bench/results/tick.json
	$(BIN)/python -m tests.bench.command_cpu --transactions --out tests/bench/results/command-cpu.json
	$(BIN)/python -m tests.bench.command_cpu --delayed --out tests/bench/results/delayed-cpu.json
	$(BIN)/python -m tests.bench.command_cpu --deliver --out tests/bench/results/deliver-cpu.json
	$(BIN)/python -m tests.bench.history --out tests/bench/results/history.json
	$(BIN)/python -m tests.bench.idle --out tests/bench/results/idle.json
	$(BIN)/python -m tests.bench.producers
	$(BIN)/python -m tests.bench.txn_phases
	$(BIN)/python -m tests.bench.delayed --n 10000 100000 1000000 --window 60 --kill $(if $(ETF1),--etf1 $(ETF1))
	$(BIN)/python -m tests.bench.delayed_pending --n 1000000 10000000
	$(BIN)/python -m tests.bench.delayed_pending --n 1000000 --preload

docs: install         ## the documentation site into build/site (strict: a broken link, anchor or page fails)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -f docs/mkdocs.yml

docs-serve: install   ## the documentation site on http://127.0.0.1:8000, rebuilt as pages change
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve -f docs/mkdocs.yml

unit: install
	$(BIN)/pytest -m unit

unit-versions: install ## the unit suite on Python 3.12 and 3.13 too (found on PATH or in pyenv), each with the built wheel installed
# (the wheel with its extras, as a user installs it: the tests themselves import the checkout's code. Spark's
# dataset tests in a process of their own: on 3.12, in an xdist worker after other modules, their first Spark
# write hung past its timeout in each of 4 runs beside a fault campaign; alone they pass: not understood)
	@rm -rf .venv-wheel && $(BIN)/pip wheel -q --no-deps -w .venv-wheel . >/dev/null || exit 1; \
	wheel=$$(ls .venv-wheel/kafka_job_scheduler-*.whl) || exit 1; \
	for v in $(OTHER_PYTHONS); do \
	    py=$$(.ci/find-python $$v) || exit 1; \
	    echo "== Python $$v: $$py"; \
	    [ -f .venv-$$v/.installed ] || { $$py -m venv .venv-$$v && .venv-$$v/bin/pip install --quiet --upgrade pip \
	        && .venv-$$v/bin/pip install -qq -c deploy/constraints.txt "$$wheel[spark,test,dev]" \
	        && touch .venv-$$v/.installed; } || exit 1; \
	    .venv-$$v/bin/pytest -q -n 2 --dist loadfile -p no:cacheprovider -m unit --ignore=tests/unit/test_datasets.py \
	        && .venv-$$v/bin/pytest -q -p no:cacheprovider -m unit tests/unit/test_datasets.py || exit 1; \
	done

unit-lowest:          ## the unit suite with every runtime dependency at the lowest version pyproject.toml allows (.venv-lowest)
	@[ -f .venv-lowest/.installed ] || { $(PYTHON) -m venv .venv-lowest && .venv-lowest/bin/pip install --quiet --upgrade pip \
	    && $(PYTHON) .ci/lowest-constraints > .venv-lowest/constraints.txt \
	    && .venv-lowest/bin/pip install -qq -c .venv-lowest/constraints.txt -e '.[spark,test,dev]' \
	    && touch .venv-lowest/.installed; }
	.venv-lowest/bin/pytest -q -n 2 -p no:cacheprovider -m unit

integration: install
	$(BIN)/pytest -m integration

lint: install
	$(BIN)/ruff check scheduler tests docs
	$(BIN)/ruff format --check scheduler tests docs
	$(BIN)/mypy scheduler

format: install
	$(BIN)/ruff format scheduler tests docs
	$(BIN)/ruff check --fix scheduler tests docs

clean:
	rm -rf $(VENV) .venv-3.* .venv-lowest .venv-wheel data .pytest_cache .mypy_cache .ruff_cache *.egg-info
