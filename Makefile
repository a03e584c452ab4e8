# Front door: `make run`, `make test`, `make bench`, `make install`. The real work is in
# scripts/ and CMake.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
PREFIX ?= /usr/local

.PHONY: all setup build run test bench gpu-pack install asan release fuzz mutants clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The main job on embedded defaults: sample videos -> latent cache -> tiny DiT training.
run: build
	bash scripts/run_quickstart.sh $(BUILD)

# Every test this machine can run (GPU tests skip with code 77 where no GPU is present).
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# Unit tests under ASan+UBSan in their own build dir.
asan: setup
	cmake -S . -B build-asan -DVFLOW_SANITIZE=address,undefined -DVFLOW_CUDA=OFF -DVFLOW_BUILD_BENCH=OFF
	cmake --build build-asan -j $(JOBS)
	ctest --test-dir build-asan --output-on-failure -j $(JOBS) -L 'unit|fuzz'

# Unit tests of a Release build (-O3) in their own build dir: no test may depend on the
# optimisation level (the default build is -O2).
release: setup
	cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release -DVFLOW_CUDA=OFF -DVFLOW_BUILD_BENCH=OFF
	cmake --build build-rel -j $(JOBS)
	ctest --test-dir build-rel --output-on-failure -j $(JOBS) -L unit

# libFuzzer targets (clang, ASan+UBSan) in their own build dir, each run FUZZ_SECONDS
# (default 600) from its committed corpus; findings land in build-fuzz/findings/.
FUZZ_TARGETS = $(basename $(notdir $(wildcard tests/fuzz/fuzz_*.c)))
fuzz: setup
	cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DVFLOW_SANITIZE=address,undefined \
	  -DVFLOW_LIBFUZZER=ON -DVFLOW_CUDA=OFF -DVFLOW_BUILD_BENCH=OFF
	cmake --build build-fuzz -j $(JOBS) --target $(FUZZ_TARGETS)
	bash scripts/fuzz.sh build-fuzz

# Plants each one-line bug of scripts/mutants.txt in a scratch copy under /tmp and runs the
# tests that must catch it; prints the survivors (minutes; not part of `make test`).
# MUTANTS="name ..." plants only those; MUTANT_JOBS build jobs (default 2).
MUTANT_JOBS ?= 2
mutants: setup
	/usr/bin/python3 scripts/mutants.py --jobs $(MUTANT_JOBS) $(MUTANTS)

bench: build
	bash scripts/bench.sh $(BUILD)

# What a lent GPU machine runs, brought up to date here: the CUDA build (build-cuda/,
# incremental) packed into .cudapack/ and the wheels it installs into .whl/
# (bench/bench_cuda_pack.sh); there, `bash bench/bench_cuda.sh` (docs/GPU_RUN.md).
gpu-pack: setup
	bash bench/bench_cuda_pack.sh

# vflow into $(PREFIX)/bin (on PATH), the pipelines to copy into $(PREFIX)/share/vflow.
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) build-asan build-rel build-fuzz
