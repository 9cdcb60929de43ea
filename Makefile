# The two commands: `make lab` and `make test`. Both build .venv first if needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8888
# JupyterLab refuses to run as root unless told; containers and CI machines often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
# A second environment with the ipywidgets Colab ships (requirements-ipywidgets7.txt).
VENV7  ?= .venv-ipyw7
STAMP7 := $(VENV7)/.installed
IPYW7  := $(shell sed -n 's/^ipywidgets==\([^ ]*\).*/\1/p' requirements-ipywidgets7.txt)
# Its other versions come from requirements.txt, the one source of versions.
PINS7  := $(shell grep -oE '^(torch|numpy|matplotlib|pytest)==[^ ]+' requirements.txt)
# The teacher's environment: everything a learner has plus nbgrader (requirements-teacher.txt).
VENVT  ?= .venv-teacher
STAMPT := $(VENVT)/.installed
COURSE ?= course

.PHONY: lab test test-ipywidgets7 test-classroom teacher classroom install nav labs run-notebooks measure clean

lab: $(STAMP)  ## Start JupyterLab on the notebooks
	$(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" --port=$(PORT) \
		--LabApp.default_url=/lab/tree/notebooks $(ROOT_FLAG) $(LAB_ARGS)

test: $(STAMP) $(STAMP7)  ## Run the whole test suite (unit tests, notebooks, browser, widgets on 7)
	$(BIN)/python -m pytest $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-ipywidgets7

test-ipywidgets7: $(STAMP7)  ## The widget tests again, with ipywidgets 7.7 as on Colab
	EXPECT_IPYWIDGETS=$(IPYW7) $(VENV7)/bin/python -m pytest -o addopts="" -p no:cacheprovider \
		-q -W ignore::DeprecationWarning tests/test_widgets.py

# Not part of `make test` (it would add about 100 s of CPU, about 50 s on two idle cores);
# .ci/run runs it after `make test`.
test-classroom: $(STAMPT)  ## nbgrader generates, autogrades and returns feedback on every lab
	$(VENVT)/bin/python -m pytest -o addopts="" -p no:cacheprovider -q -n 2 tests/classroom

teacher: $(STAMPT)  ## Build .venv-teacher: the learner's environment plus nbgrader

classroom: $(STAMPT)  ## An nbgrader course folder with every lab released (COURSE=course)
	$(VENVT)/bin/python tools/classroom.py $(COURSE)

install: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

$(STAMP7): requirements-ipywidgets7.txt requirements.txt pyproject.toml
	test -x $(VENV7)/bin/python || $(PYTHON) -m venv $(VENV7)
	$(VENV7)/bin/python -m pip install --quiet -r requirements-ipywidgets7.txt $(PINS7)
	$(VENV7)/bin/python -m pip install --quiet --no-deps -e .
	touch $(STAMP7)

$(STAMPT): requirements-teacher.txt requirements.txt pyproject.toml
	test -x $(VENVT)/bin/python || $(PYTHON) -m venv $(VENVT)
	$(VENVT)/bin/python -m pip install --quiet -r requirements.txt -r requirements-teacher.txt
	$(VENVT)/bin/python -m pip install --quiet --no-deps -e .
	touch $(STAMPT)

nav: $(STAMP)  ## Regenerate the README table and each notebook's badges and navigation
	$(BIN)/python tools/build_nav.py

labs: $(STAMP)  ## Regenerate student labs from labs/solutions/ and re-run both versions
	$(BIN)/python tools/build_labs.py

run-notebooks: $(STAMP)  ## Re-execute notebooks in place (all, or NB=notebooks/01_tensor_to.ipynb)
	$(BIN)/python tools/run_notebooks.py $(NB)

measure: $(STAMP)  ## Run All wall time and kernel peak RSS for each notebook
	$(BIN)/python tools/measure_notebooks.py

clean:
	rm -rf $(VENV) $(VENV7) $(VENVT) build *.egg-info .pytest_cache .ruff_cache
