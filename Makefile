# digideep: `make train` runs the default training, `make test` runs the test suite.
# Both create .venv with every dependency when it is missing (only Python 3.11 and make are needed).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
PARAMS ?= params.pendulum_sac
CPANEL ?= {}
PYTEST_ARGS ?=
# test processes: the suite's processes wait on subprocesses and servers part of the time, so 3 keep
# both cores of a 2-core machine busier than 2 (docs/measurements.md gives the figures); each file runs
# whole in one process (its servers are module fixtures)
TEST_WORKERS ?= 3

export PREFECT_SERVER_ANALYTICS_ENABLED := false
export MUJOCO_GL ?= egl
export NO_MKDOCS_2_WARNING := 1

.PHONY: install train test test-slow lint format docs prefect-up stack-up stack-down demo-cluster mlflow-ui clean-data

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

install: $(BIN)/.installed ## create .venv and install digideep with its dev tools

train: install ## run the default training (PARAMS=params.x CPANEL='{"seed": 1}' to change it)
	$(BIN)/digideep train --params $(PARAMS) --cpanel '$(CPANEL)'

test: install ## run the test suite (learning runs marked slow are left out)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-slow: install ## run the slow learning tests only
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

lint: install ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

docs: install ## build the developer guide and API reference into site/ (warnings are errors)
	$(BIN)/mkdocs build --strict --site-dir site

prefect-up: install ## start a Prefect server (127.0.0.1:4200), a worker and the crash watcher, deploy prefect.yaml, make the Prefect profile digideep-local active (PREFECT_ARGS="--crash-retries N"); Ctrl-C stops
	$(BIN)/python -m digideep_stack.local_stack up --port $(or $(PREFECT_PORT),4200) $(PREFECT_ARGS)

STACK_ARGS ?=
stack-up: install ## the production stack: PostgreSQL, Prefect and MLflow servers with auth, S3, WORKERS=N workers; Prefect profile digideep-stack active; Ctrl-C stops
	$(BIN)/python -m digideep_stack up --workers $(or $(WORKERS),1) $(STACK_ARGS)

stack-down: ## stop a stack started by make stack-up (in another shell or in the background; the same STACK_ARGS)
	$(BIN)/python -m digideep_stack down $(STACK_ARGS)

demo-cluster: install ## (root) the stack on a bridge and 2 worker hosts in network namespaces; Ctrl-C tears it all down
	$(BIN)/python -m digideep_stack.cluster up --hosts $(or $(HOSTS),2) $(CLUSTER_ARGS)

mlflow-ui: install ## start the MLflow UI on 127.0.0.1:5000 over data/mlflow.db
	$(BIN)/digideep runs ui --port $(or $(MLFLOW_PORT),5000)

clean-data: ## delete every session, the MLflow store and artifacts under data/
	find data -mindepth 1 ! -name .gitkeep -exec rm -rf {} +
