# Strata: the two commands a newcomer needs.
#   make demo   installs dependencies, builds, runs a 4-rank all-reduce/reduce-scatter/all-gather sweep and a
#               short dp=2 x tp=2 strata-train run
#   make test   installs dependencies, builds, and runs every test
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
NP ?= 4

.PHONY: all deps configure build test demo install clean format

all: build

deps:
	bash scripts/install_deps.sh

configure: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 1500 -j 1

demo: build
	@for coll in allreduce reducescatter allgather; do \
	  echo "=== strata-run -n $(NP) strata-perf $$coll -b 8 -e 64M -f 4 -d float -c 1 ==="; \
	  $(BUILD)/bin/strata-run -n $(NP) -- $(BUILD)/bin/strata-perf $$coll -b 8 -e 64M -f 4 -d float -c 1 -n 10 -w 2 || exit 1; \
	done
	@echo "=== strata-run -n 4 strata-train --dp 2 --tp 2 --steps 30 ==="
	$(BUILD)/bin/strata-run -n 4 -- $(BUILD)/bin/strata-train --dp 2 --tp 2 --steps 30

install: build
	cmake --install $(BUILD) --prefix $(or $(PREFIX),/usr/local)

clean:
	rm -rf $(BUILD)
