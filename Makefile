# Front door: `make run`, `make test`, `make bench`, `make install`. The real work is in
# scripts/ and CMake.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
PREFIX ?= /usr/local

.PHONY: all setup build run test bench gpu-pack install asan fuzz clean

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

# libFuzzer targets (clang, ASan+UBSan) in their own build dir, each run FUZZ_SECONDS
# (default 600) from its committed corpus; findings land in build-fuzz/findings/.
FUZZ_TARGETS = $(basename $(notdir $(wildcard tests/fuzz/fuzz_*.c)))
fuzz: setup
	cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DVFLOW_SANITIZE=address,undefined \
	  -DVFLOW_LIBFUZZER=ON -DVFLOW_CUDA=OFF -DVFLOW_BUILD_BENCH=OFF
	cmake --build build-fuzz -j $(JOBS) --target $(FUZZ_TARGETS)
	bash scripts/fuzz.sh build-fuzz

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
	rm -rf $(BUILD) build-asan build-fuzz
