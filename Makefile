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

.PHONY: lab test test-ipywidgets7 install nav labs run-notebooks measure clean

lab: $(STAMP) workspace  ## Copy what is new into my-work/ (never over your copies), start JupyterLab there
	$(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" --port=$(PORT) \
		--LabApp.default_url=/lab/tree/$(WORK) $(ROOT_FLAG) $(LAB_ARGS)

# The learner's own folder (git-ignored): copies of the notebooks and labs, never overwritten.
WORK ?= my-work
.PHONY: workspace fresh

workspace:  ## Create or update my-work/ without starting JupyterLab; say which copies are out of date
	@$(PYTHON) tools/workspace.py --folder "$(WORK)"

fresh:  ## A fresh copy of one notebook or lab, keeping yours: make fresh COPY=labs/02_copy_pitfall.ipynb
	@$(PYTHON) tools/workspace.py --folder "$(WORK)" --fresh "$(COPY)"

test: $(STAMP) $(STAMP7)  ## Run the whole test suite (unit tests, notebooks, browser, widgets on 7)
	$(BIN)/python -m pytest $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-ipywidgets7

test-ipywidgets7: $(STAMP7)  ## The widget tests again, with ipywidgets 7.7 as on Colab
	EXPECT_IPYWIDGETS=$(IPYW7) $(VENV7)/bin/python -m pytest -o addopts="" -p no:cacheprovider \
		-q -W ignore::DeprecationWarning tests/test_widgets.py

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

nav: $(STAMP)  ## Regenerate the README table and each notebook's badges and navigation
	$(BIN)/python tools/build_nav.py

labs: $(STAMP)  ## Regenerate student labs from labs/solutions/ and re-run both versions
	$(BIN)/python tools/build_labs.py

run-notebooks: $(STAMP)  ## Re-execute notebooks in place (all, or NB=notebooks/01_tensor_to.ipynb)
	$(BIN)/python tools/run_notebooks.py $(NB)

measure: $(STAMP)  ## Run All wall time and kernel peak RSS for each notebook
	$(BIN)/python tools/measure_notebooks.py

clean:
	rm -rf $(VENV) $(VENV7) build *.egg-info .pytest_cache .ruff_cache
