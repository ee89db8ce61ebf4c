# One entry point for people and CI. `make test` is the README's test command.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: install install-runtime install-audit kafka-jars spark-jars lint typecheck test test-unit test-sim-mixes test-audit-cluster bench bench-peers bench-placement bench-hot bench-hot-cpu bench-idle bench-watchdog demo demo-hot sim sim-sweep chaos clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install-runtime: $(BIN)/python ## The package alone (editable) into .venv: what the demo needs
	$(BIN)/pip install --quiet -e .
	@# An editable install has no bytecode, and with PYTHONDONTWRITEBYTECODE set every process
	@# (each supervisor, each child) would compile the package again: 0.1 s of CPU at each start.
	$(BIN)/python -m compileall -q marshal_workers plugins
	@# Likewise the dataclasses' generated methods (marshal_workers/common/classcode.py): 70-80 ms
	@# of CPU at each marshal-run start, compiled here once.
	$(BIN)/python -m marshal_workers.supervisor.precompile

install-audit: $(BIN)/python ## The package (editable) with marshal-audit's PySpark into .venv: what install-runtime gives, plus the audit
	$(BIN)/pip install --quiet -e '.[audit]'
	$(BIN)/python -m compileall -q marshal_workers plugins
	$(BIN)/python -m marshal_workers.supervisor.precompile

install: $(BIN)/python ## The package with the dev tools, the audit's PySpark and the bench peers
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/python -m compileall -q marshal_workers bench plugins
	$(BIN)/python -m marshal_workers.supervisor.precompile

kafka-jars: install-runtime ## Resolve the pinned Apache Kafka jars with Maven (cached outside the repo)
	$(BIN)/python -m marshal_workers.localkafka fetch

spark-jars: install ## Resolve the Spark Kafka connector jars for the audit with Maven (cached outside the repo)
	$(BIN)/python -m marshal_workers.audit.jars

lint: install ## ruff on the package, tests and benchmarks
	$(BIN)/ruff check marshal_workers tests bench plugins monitoring
	$(BIN)/ruff format --check marshal_workers

typecheck: install ## mypy --strict on the package
	$(BIN)/mypy marshal_workers

test: install kafka-jars spark-jars lint typecheck ## Install, resolve the jars, lint, type-check, then unit and integration tests (real Kafka, Spark)
	@# the pure tests (no broker) on both cores; then those with real Kafka and processes on
	@# both cores too, a file's tests on one worker with that worker's own brokers (a module's
	@# three-node cluster is started once), the slowest listed; then, alone, those whose bound
	@# counts on the host to itself (marker solo)
	$(BIN)/pytest -q -n 2 tests/unit tests/sim
	$(BIN)/pytest -q -n 2 --dist loadfile --durations=30 -m 'not chaos and not solo' tests/contract tests/integration
	$(BIN)/pytest -q -m 'solo and not chaos' tests/contract tests/integration

test-unit: ## Only the tests that need no broker
	$(BIN)/pytest -q tests/unit

test-sim-mixes: install ## Every fault mix a defect test uses, seeds 0-19 each without the defect: none may report a violation (about 5 min on 2 cores; make test runs seeds 0-2 of each)
	MARSHAL_TEST_MIX_SEEDS=20 $(BIN)/pytest -q -n 2 tests/sim/test_sim_runs.py -k fault_mixes

test-audit-cluster: install kafka-jars spark-jars ## marshal-audit on a standalone Spark cluster on loopback (a master, two workers; about 2 min, 1.5 GB) against a real fleet's topic: same verdict and tables as local mode
	MARSHAL_TEST_SPARK_CLUSTER=1 $(BIN)/pytest -q tests/integration/test_audit_cluster.py

demo-hot: kafka-jars ## The demo on one hot partition shared by 4 workers (ordering key, per-customer order checked)
	$(BIN)/marshal-admin demo --hot 4

demo: kafka-jars ## The main job on local defaults: a local Kafka, sample data, a fleet of 3, a verdict
	$(BIN)/marshal-admin demo

bench: install kafka-jars ## Benchmarks (several minutes; each starts its own local Kafka): figures, never assertions
	$(BIN)/python bench/fold_and_catch_up.py
	$(BIN)/python bench/hot_path.py
	$(BIN)/python bench/runtime.py

bench-idle: install kafka-jars ## Idle gaps of graceful hand-overs: rolling restart and scale-downs at HB = 4 and 10 s (minutes; its own local Kafka): each hand-over's idle seconds
	$(BIN)/python bench/idle_gaps.py

bench-watchdog: install ## What 64 busy children's watchdogs cost the host's other processes: a probe's lateness beside them, per watchdog tick and, with autogroups, per session layout (about 4 min; no Kafka)
	$(BIN)/python bench/watchdog_stall.py

bench-placement: install kafka-jars ## What each member reads from the coordination topic: 20 groups of 2 members spread (version-1 topic) against placed (version 2), side by side (minutes; its own local Kafka)
	$(BIN)/python bench/placement_reads.py

bench-peers: install kafka-jars ## marshal-run against a plain loop and Arroyo, side by side (minutes; its own local Kafka): a table and docs/peers.png
	$(BIN)/python bench/peers.py

chaos: install kafka-jars ## The AMO chaos soak (minutes): real members, join, deploy, kill -9 and SIGSTOP, round after round (MARSHAL_CHAOS_ROUNDS, default 5)
	$(BIN)/pytest -q -s -m chaos tests/integration/test_amo_chaos.py

bench-hot: install kafka-jars ## Many workers on one hot partition: marshal-run against Kafka share groups and a plain loop (about 1.5 h at the defaults; its own local Kafka): a table and docs/hot.png
	$(BIN)/python bench/hot.py

bench-hot-cpu: install kafka-jars ## The CPU-bound goal run of bench-hot: the 200 µs handler at N = 4, 16, 64, slice reads host against child beside the share groups and a plain loop, no fault runs (about 15-20 min; its own local Kafka): a table and docs/hot-cpu.png
	$(BIN)/python bench/hot.py --records 300000 --workers 4,16,64 --handlers cpu \
		--systems unordered,key,unordered-child,key-child,share-default,share-tuned,plain \
		--faults none --plot docs/hot-cpu.png

clean:
	rm -rf .marshal .pytest_cache .mypy_cache .ruff_cache .hypothesis

EVERY_FAULT := kill,freeze,stall,restart,twins,compaction,eager-compaction,latency,clock,failures,pause,partitions,shared-ids,poison,forgery,feed-loss,amo-poison,mixed-modes,forged-takeover,tree-stop

sim-sweep: install ## A fresh simulator sweep (about 30 min on 2 cores): every mix of `make sim` with stalled hosts added, 30 seeds each from SWEEP_FIRST + 1000 x the row (pick seeds no sweep used: docs/simulator.md)
	$(BIN)/python bench/sim_sweep.py --first $(or $(SWEEP_FIRST),4300000)

sim: install ## The long simulator run (minutes): 1,000 seeds of small fleets, hundreds of each fault mix that found a defect (stalled hosts among them), 100 of bigger fleets, 1,300 of sliced fleets (ordering key and unordered; lost feeds among them), 500 of placed groups
	$(BIN)/marshal-sim --seeds 1000
	$(BIN)/marshal-sim --seeds 200 --members 6 --groups 2 --faults freeze,compaction --fault-count 10
	$(BIN)/marshal-sim --seeds 200 --faults twins,pause,freeze,compaction,kill --fault-count 8
	$(BIN)/marshal-sim --seeds 200 --faults kill,freeze,stall,restart,twins,compaction,latency,clock,failures,pause,partitions,shared-ids,poison,forgery,feed-loss,amo-poison --fault-count 6
	@# AMO handlers that raise or hang: each loss reported as the handler's, no record tried twice
	$(BIN)/marshal-sim --seeds 200 --members 4 --groups 2 --faults amo-poison,kill,freeze,stall,failures --fail-rate 0.1 --fault-count 6
	$(BIN)/marshal-sim --seeds 200 --members 4 --groups 2 --faults restart,pause --fault-count 4
	@# members started with the other --mode (refused at start: the group's settings hold its mode), with kills and restarts
	$(BIN)/marshal-sim --seeds 200 --faults mixed-modes,kill,restart,twins,compaction --fault-count 6
	$(BIN)/marshal-sim --seeds 200 --faults forged-takeover,twins,freeze,stall,kill,restart,compaction --fault-count 6
	$(BIN)/marshal-sim --seeds 200 --faults poison,compaction --fault-count 6
	$(BIN)/marshal-sim --seeds 100 --members 30 --groups 3 --faults kill,freeze,restart,twins,compaction,latency,clock,pause,failures,partitions
	$(BIN)/marshal-sim --seeds 100 --members 12 --groups 3 --faults shared-ids,kill,restart,twins,compaction
	$(BIN)/marshal-sim --seeds 200 --faults freeze,eager-compaction --fault-count 10
	$(BIN)/marshal-sim --seeds 200 --faults read-latency,clock-jumps,kill,freeze,restart,twins,compaction,pause,poison --fault-count 6
	$(BIN)/marshal-sim --seeds 200 --members 4 --groups 1 --faults poison,failures --fail-rate 0.2 --fault-count 6
	@# a hostile writer on the coordination topic, with the faults that restart and compact
	$(BIN)/marshal-sim --seeds 200 --members 6 --groups 3 --faults forgery,kill,restart,compaction,pause,poison --fault-count 6
	$(BIN)/marshal-sim --seeds 200 --members 4 --groups 2 --faults poison,failures,stall --fail-rate 0.2 --fault-count 6
	@# writes that fail or time out and land, read by members whose view of the log lags (AMO losses reported, none twice)
	$(BIN)/marshal-sim --seeds 200 --faults failures,read-latency,stall --fail-rate 0.2 --fault-count 8
	@# whole process trees stopped past their leases and continued (each child ends before its call goes on), with the faults that stop or end a member
	$(BIN)/marshal-sim --seeds 200 --faults tree-stop,freeze,stall,kill,restart,twins,compaction --fault-count 8
	@# a host stopped with its lease clock held (a paused VM), under both cleaners
	$(BIN)/marshal-sim --seeds 200 --faults stall,eager-compaction --fault-count 10
	$(BIN)/marshal-sim --seeds 200 --faults stall,compaction --fault-count 10 --ordering unordered --workers-per-partition 4
	@# the ordering modes (docs/design.md#ordering-modes-slices-claimed-like-partitions), each slice of a partition claimed like one, with every fault
	$(BIN)/marshal-sim --seeds 300 --ordering key --workers-per-partition 3 --faults $(EVERY_FAULT) --fault-count 6
	$(BIN)/marshal-sim --seeds 300 --ordering unordered --workers-per-partition 4 --faults $(EVERY_FAULT) --fault-count 6
	$(BIN)/marshal-sim --seeds 100 --ordering key --workers-per-partition 3 --members 12 --groups 3 --faults shared-ids,kill,restart,twins,compaction
	$(BIN)/marshal-sim --seeds 100 --ordering unordered --workers-per-partition 4 --faults twins,pause,freeze,compaction,kill --fault-count 8
	@# a host's reader of a partition that fails (slice reads per host): its slice children there end with the Kafka exit code, with the faults that end or stop their member
	$(BIN)/marshal-sim --seeds 200 --ordering unordered --workers-per-partition 4 --faults feed-loss,kill,freeze,stall,restart,twins --fault-count 8
	$(BIN)/marshal-sim --seeds 100 --ordering key --workers-per-partition 3 --faults feed-loss,kill,freeze,stall,restart,twins --fault-count 8
	@# placed groups (docs/design.md, decision 23), each on its home and window only, with every fault
	$(BIN)/marshal-sim --seeds 300 --placement placed --coordination-partitions 8 --faults $(EVERY_FAULT) --fault-count 6
	$(BIN)/marshal-sim --seeds 200 --placement placed --coordination-partitions 8 --span 2 --members 12 --groups 3 --faults kill,freeze,stall,restart,twins,compaction,pause,poison,forgery --fault-count 6
