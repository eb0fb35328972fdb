# Nebula — one Makefile for the whole tree.
#
#   make            build everything into build/ (binaries in build/bin/)
#   make test       build and run every test (Criterion units, fuzz-corpus replay, tool checks)
#   make test-gpu   the GPU checks of the CUDA kernels and backend (fails where there is no GPU)
#   make test-asan  the engine with ASan + UBSan in build-asan/, CPU only, and its tests on it
#   make bench      CPU kernel benchmarks (results appended to docs/BENCHMARKS.md)
#   make fuzz       run each libFuzzer target for FUZZ_SECONDS (default 60) seconds
#   make clean      remove build/ and build-asan/
#
# Sources are discovered by folder: core/**.c form libnebula-core.a;
# engine/**.c (the backend interface, the CPU reference backend, the expert
# FFN, VRAM planning) with gpu-worker/*.c (the GPU→CPU mailbox) and, where
# nvcc is found, gpu-worker/cuda/**.cu (the CUDA backend) form
# libnebula-engine.a; shm/*.c (regions, rings, stats) form libnebula-shm.a;
# each process's folder (gpu-worker/proc/, cpu-moe-worker/, ssd-pager/,
# coordinator/) and each tools/nebula-*/ folder is one binary;
# tests/**/test_*.c (outside tests/fuzz) are Criterion suites;
# tests/fuzz/fuzz_*.c are libFuzzer targets.  Files named *_avx2.c and
# *_avx512.c get their ISA flags here and nowhere else (dispatch is at run time).

BUILD   ?= build
CC      ?= cc
CLANG   ?= clang
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
JOBS    ?= 2
FUZZ_SECONDS ?= 60

# The sanitizers, for the fuzz targets (clang) and the sanitized build.  A
# UB finding aborts (no recovery) so that it fails the test that hit it.
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

# SANITIZE=1 (make test-asan, BUILD=build-asan): every C object and binary
# built with $(SAN_FLAGS) by $(CC), at -O1 (as ASan's documentation advises
# and the fuzz targets are; OPT= overrides it).  CPU only: NVCC is emptied, so
# no .cu object is linked and NB_HAVE_CUDA is not defined — the CUDA runtime
# and ASan's shadow memory do not mix, and CI has no GPU.
SANITIZE ?=
ifneq ($(strip $(SANITIZE)),)
override NVCC :=
OPT ?= -O1
CFLAGS_SAN := $(SAN_FLAGS)
endif

OPT      ?= -O2
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -g $(OPT) -fopenmp -I. \
               $(shell pkg-config --cflags libcjson 2>/dev/null) $(CFLAGS_SAN)
LDLIBS_BASE := $(shell pkg-config --libs libcjson 2>/dev/null || echo -lcjson) $(shell pkg-config --libs libutf8proc) $(shell pkg-config --libs libzmq) $(shell pkg-config --libs libcrypto 2>/dev/null || echo -lcrypto) $(shell pkg-config --libs liburing 2>/dev/null || echo -luring) $(shell pkg-config --libs inih 2>/dev/null || echo -linih) -lm -lpthread -fopenmp $(CFLAGS_SAN)

# jemalloc (Debian's libjemalloc) is the heap of every process: each binary of
# build/bin/ built here from C links it, so its malloc replaces glibc's (the
# large arenas — experts, staging, rings — are mmap/shm, never malloc).  Not in
# the sanitized build (ASan brings its own allocator), not in the fuzz targets
# (ASan too) nor the Criterion suites (they test the code, not the heap).
ifeq ($(strip $(SANITIZE)),)
MALLOC_LIBS := $(shell pkg-config --libs jemalloc 2>/dev/null || echo -ljemalloc)
endif
LDLIBS_BIN = $(LDLIBS_BASE) $(MALLOC_LIBS)

AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c

CORE_SRCS := $(shell find core -name '*.c' | sort)
CORE_OBJS := $(CORE_SRCS:%.c=$(BUILD)/obj/%.o)
CORE_LIB  := $(BUILD)/lib/libnebula-core.a

ENGINE_SRCS := $(shell find engine -name '*.c' | sort) $(sort $(wildcard gpu-worker/*.c))
ENGINE_OBJS := $(ENGINE_SRCS:%.c=$(BUILD)/obj/%.o)
ENGINE_LIB  := $(BUILD)/lib/libnebula-engine.a

SHM_SRCS := $(sort $(wildcard shm/*.c))
SHM_OBJS := $(SHM_SRCS:%.c=$(BUILD)/obj/%.o)
SHM_LIB  := $(BUILD)/lib/libnebula-shm.a

TOOL_DIRS := $(sort $(patsubst %/,%,$(dir $(wildcard tools/nebula/*.c tools/nebula-*/*.c))))
TOOL_BINS := $(TOOL_DIRS:tools/%=$(BUILD)/bin/%)
# Tools written in CUDA (a main.cu, no .c): built by the cuda target when nvcc is found.
CU_TOOL_DIRS := $(sort $(patsubst %/,%,$(dir $(wildcard tools/nebula-*/main.cu))))
CU_TOOL_BINS := $(CU_TOOL_DIRS:tools/%=$(BUILD)/bin/%)

# Worker processes whose code lives in their room's folder (one binary each,
# built once the folder has sources).
PROC_BINS := $(if $(wildcard cpu-moe-worker/*.c),$(BUILD)/bin/nebula-cpu-moe-worker) \
             $(if $(wildcard ssd-pager/*.c),$(BUILD)/bin/nebula-ssd-pager) \
             $(if $(wildcard coordinator/*.c),$(BUILD)/bin/nebula-coordinator) \
             $(if $(wildcard gpu-worker/proc/*.c),$(BUILD)/bin/nebula-gpu-worker) \
             $(if $(wildcard tools/nebulactl/*.c),$(BUILD)/bin/nebulactl)

TEST_SRCS := $(shell find tests -name 'test_*.c' -not -path 'tests/fuzz/*' 2>/dev/null | sort)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TEST_HELPERS := $(wildcard tests/common/*.c)

FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ_COMMON := -std=c11 -D_GNU_SOURCE -g -O1 -I. $(SAN_FLAGS) $(shell pkg-config --cflags libcjson 2>/dev/null)
FUZZ_CFLAGS := $(FUZZ_COMMON) -fsanitize=fuzzer
# The fuzzed parsers do not need the SIMD kernels; the whole core is built with
# sanitizers except the ISA files, which clang builds with their flags too.
# Core objects get the coverage instrumentation without libFuzzer's main().
FUZZ_OBJ_CFLAGS := $(FUZZ_COMMON) -fsanitize=fuzzer-no-link

CU_SRCS := $(shell find gpu-worker/cuda -name '*.cu' 2>/dev/null | sort)
CU_OBJS := $(CU_SRCS:%.cu=$(BUILD)/obj/%.o)
NVCC_FLAGS ?= -O2 -std=c++17 -I. -gencode arch=compute_86,code=sm_86 -gencode arch=compute_89,code=sm_89 \
              -gencode arch=compute_90,code=sm_90

# Where nvcc is found, the CUDA backend (gpu-worker/cuda/*.cu) goes into
# libnebula-engine.a with the CUDA runtime linked statically, so every binary can
# pick the "cuda" kind; without a GPU or driver creating one fails with "no
# CUDA device".  Without nvcc (or its static runtime) the library is CPU-only
# ("built without CUDA").
# libcudart_static.a is looked for beside nvcc's toolkit, then where Debian's package puts it.
CUDA_LIBDIR := $(if $(strip $(NVCC)),$(firstword $(foreach d,$(abspath $(dir $(NVCC))../lib64) \
                 $(abspath $(dir $(NVCC))../targets/x86_64-linux/lib) /usr/lib/x86_64-linux-gnu,\
                 $(if $(wildcard $(d)/libcudart_static.a),$(d)))))
ifneq ($(strip $(CUDA_LIBDIR)),)
ifneq ($(strip $(CU_SRCS)),)
CFLAGS_BASE += -DNB_HAVE_CUDA
ENGINE_OBJS += $(CU_OBJS)
LDLIBS_BASE += -L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt -lstdc++
CUDA_CHECK  := $(BUILD)/tests/cuda/check_backend $(BUILD)/tests/cuda/check_seq_state $(BUILD)/tests/cuda/check_attn
endif
endif
# The backend follows the CPU reference's rounding: no fused multiply-adds
# (every file of it but matvec.cu, the fast kernels, which sum in fp32 anyway).
CU_REF_OBJS := $(filter-out $(BUILD)/obj/gpu-worker/cuda/matvec.o,$(CU_OBJS))
$(CU_REF_OBJS): NVCC_FLAGS += --fmad=false

.PHONY: all test test-build test-gpu test-asan deps run stop install bench fuzz clean cuda cuda-check unit
all: $(CORE_LIB) $(ENGINE_LIB) $(SHM_LIB) $(TOOL_BINS) $(PROC_BINS) cuda

# Installs missing Debian packages (a no-op when all are present).
deps:
	@bash deploy/install-deps.sh

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(AVX2_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(AVX512_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -MMD -MP -c $< -o $@

$(CORE_LIB): $(CORE_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(ENGINE_LIB): $(ENGINE_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(SHM_LIB): $(SHM_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# One binary per tools/nebula-NAME/ folder.
.SECONDEXPANSION:
# (No '%' inside the list: make would replace it with the stem.)
$(BUILD)/bin/%: $$(addprefix $(BUILD)/obj/,$$(addsuffix .o,$$(basename $$(wildcard tools/$$*/*.c)))) $(ENGINE_LIB) $(SHM_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(filter %.o,$^) $(ENGINE_LIB) $(SHM_LIB) $(CORE_LIB) $(LDLIBS_BIN) -o $@

# nebula-gen is a front end over nebula-convert's plan, quant mixes and writer.
$(BUILD)/bin/nebula-gen: $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out tools/nebula-convert/main.c,$(wildcard tools/nebula-convert/*.c)))

$(BUILD)/bin/nebula-cpu-moe-worker: $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard cpu-moe-worker/*.c)) $(ENGINE_LIB) $(SHM_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(filter %.o,$^) $(ENGINE_LIB) $(SHM_LIB) $(CORE_LIB) $(LDLIBS_BIN) -o $@

$(BUILD)/bin/nebula-ssd-pager: $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard ssd-pager/*.c)) $(SHM_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(filter %.o,$^) $(SHM_LIB) $(CORE_LIB) $(LDLIBS_BIN) -o $@

# The coordinator (coordinator/*.c) and the gpu-worker process (its main in
# gpu-worker/proc/; the engine it runs is libnebula-engine.a).  nebulactl
# (tools/nebulactl/) is built by the tools rule below.
# The HTTP API links libmicrohttpd; its pure parts (coordinator/api_request.c,
# api_text.c) are also linked into the tests/api/ suites and fuzz_api_request.
MHD_LIBS := $(shell pkg-config --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)
API_PURE_SRCS := coordinator/api_request.c coordinator/api_text.c coordinator/api_format.c coordinator/api_tools.c coordinator/api_toolcall.c coordinator/api_logprobs.c coordinator/api_dialects.c coordinator/api_error.c
$(BUILD)/bin/nebula-coordinator: $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard coordinator/*.c)) $(ENGINE_LIB) $(SHM_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(filter %.o,$^) $(ENGINE_LIB) $(SHM_LIB) $(CORE_LIB) $(LDLIBS_BIN) $(MHD_LIBS) -o $@

$(BUILD)/tests/api/%: tests/api/%.c $(API_PURE_SRCS:%.c=$(BUILD)/obj/%.o) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -MMD -MP $< $(API_PURE_SRCS:%.c=$(BUILD)/obj/%.o) $(CORE_LIB) $(LDLIBS_BASE) -lcriterion -o $@

# tests/coordinator/: the coordinator's pure pieces, linked one object each
# (test_X.c tests coordinator/X.c).
$(BUILD)/tests/coordinator/test_%: tests/coordinator/test_%.c $(BUILD)/obj/coordinator/%.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -MMD -MP $< $(BUILD)/obj/coordinator/$*.o $(LDLIBS_BASE) -lcriterion -o $@

$(BUILD)/bin/nebula-gpu-worker: $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard gpu-worker/proc/*.c)) $(ENGINE_LIB) $(SHM_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(filter %.o,$^) $(ENGINE_LIB) $(SHM_LIB) $(CORE_LIB) $(LDLIBS_BIN) -o $@

$(BUILD)/tests/%: tests/%.c $(TEST_HELPERS) $(ENGINE_LIB) $(SHM_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -MMD -MP $< $(TEST_HELPERS) $(ENGINE_LIB) $(SHM_LIB) $(CORE_LIB) $(LDLIBS_BASE) -lcriterion -o $@

# The model and backend suites convert the HF fixtures to GGUF on first use (build/fixtures/).
$(filter $(BUILD)/tests/engine/% $(BUILD)/tests/gpu-worker/% $(BUILD)/tests/core/test_model,$(TEST_BINS)): | $(filter $(BUILD)/bin/nebula-convert,$(TOOL_BINS))

# CUDA objects and tools as plain prerequisites (not a sub-make: the objects
# are also in libnebula-engine.a's, and two makes building one object under -j2
# raced — one archived matvec.o while the other was still writing it).
ifeq ($(strip $(NVCC)),)
cuda:
	@echo "$(if $(SANITIZE),sanitized build,nvcc not found): skipping CUDA objects ($(words $(CU_SRCS)) sources)"
else
cuda: $(CU_OBJS) $(CU_TOOL_BINS)
endif

$(CU_TOOL_BINS): $(BUILD)/bin/%: tools/%/main.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $< -o $@ -lpthread

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -MMD -MP -c $< -o $@

# The GPU checks of the CUDA backend against the CPU reference (no Criterion:
# they run on the GPU machine; tests/cuda/run-backend-on-gpu.sh).
cuda-check: $(CUDA_CHECK)
CUDA_CHECK_SRCS := tests/cuda/check_backend.c tests/cuda/check_util.c tests/cuda/check_verify.c
$(BUILD)/tests/cuda/check_backend: $(CUDA_CHECK_SRCS) tests/cuda/check.h $(ENGINE_LIB) $(SHM_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CUDA_CHECK_SRCS) $(ENGINE_LIB) $(SHM_LIB) $(CORE_LIB) $(LDLIBS_BASE) -o $@
# The attention kernels alone (gpu-worker/cuda/attn.cu: split-K vs the reference and the host, timing;
# tools/dev/device-checks.sh attn), with --fmad=false as the backend's object has it.
$(BUILD)/tests/cuda/check_attn: tests/cuda/check_attn.cu gpu-worker/cuda/attn.cu gpu-worker/cuda/attn.h gpu-worker/cuda/device.cuh engine/vram.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) --fmad=false -Xcompiler -Wall tests/cuda/check_attn.cu gpu-worker/cuda/attn.cu -o $@
# The prompt cache's state save/load on the device (tests/cuda/run-seq-state-on-gpu.sh).
$(BUILD)/tests/cuda/check_seq_state: tests/cuda/check_seq_state.c $(ENGINE_LIB) $(SHM_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -MMD -MP $< $(ENGINE_LIB) $(SHM_LIB) $(CORE_LIB) $(LDLIBS_BASE) -o $@

# The ggml oracle: Nebula's quant formats against a prebuilt libggml-base.so
# (dlopen'd; tests/tools/test_ggml_oracle.sh installs it and runs this).
GGML_ORACLE := $(BUILD)/tests/ggml/ggml_oracle
$(GGML_ORACLE): tests/ggml/ggml_oracle.c $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -MMD -MP $< $(CORE_LIB) $(LDLIBS_BASE) -ldl -o $@

# ---- tests ----
test: deps
	@$(MAKE) --no-print-directory test-build
	@bash tests/run-tests.sh $(BUILD)

# (A sanitized build leaves out the fuzz targets: build/fuzz/ has them sanitized.)
test-build: all $(TEST_BINS) $(GGML_ORACLE) $(if $(SANITIZE),,$(FUZZ_BINS))

# The GPU checks, not in make test (they need the GPU machine): the matvec
# kernels against the CPU decode (tests/cuda/run-on-gpu.sh, correctness only),
# then the attention kernels alone (check_attn), the CUDA backend against the CPU reference (run-backend-on-gpu.sh), then
# verify windows and speculative decoding on it (run-verify-on-gpu.sh).
# Where there is no GPU they fail and say so (tests/lib/gpu.sh) rather than
# pass having run nothing; run-on-gpu.sh builds its own binary, so it comes
# first and a machine without a GPU fails before anything is built.
test-gpu: deps
	@bash tests/cuda/run-on-gpu.sh --no-timing
	@$(MAKE) --no-print-directory all cuda-check
	@$(BUILD)/tests/cuda/check_attn --no-timing
	@bash tests/cuda/run-backend-on-gpu.sh
	@bash tests/cuda/run-verify-on-gpu.sh
	@bash tests/cuda/run-seq-state-on-gpu.sh
	@python3 tests/train/test_forward.py

# The sanitized engine (SANITIZE=1 above) in its own build directory, then
# under it the Criterion suites, the pipeline test and the HTTP API's tests
# (tests/run-asan.sh: every process's sanitizer report goes to a file there,
# and any report fails the run, even one from a worker the coordinator
# restarted).  The other tool tests and the browser tests stay in make test:
# they drive the same code through the same binaries, and under ASan they
# would add about 5 minutes on 2 cores (test_nebula_gen.sh alone ~3); run by
# hand once under it (BUILD=build-asan and these ASAN_OPTIONS), they passed
# with no report.
ASAN_BUILD ?= build-asan
test-asan: deps
	@$(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) SANITIZE=1 test-build
	@bash tests/run-asan.sh $(ASAN_BUILD)

# make run [MODEL=M.gguf] [MTP=mtp.gguf] [PORT=8090] [API_PORT=8091]: builds the engine and
# the page, starts Nebula (deploy/run.sh, docs/RUNNING.md); make stop stops it.
run: deps
	@$(MAKE) --no-print-directory all web
	@bash deploy/run.sh $(BUILD) "$(MODEL)" "$(MTP)"

stop:
	@NEBULA_BIN=$(abspath $(BUILD))/bin bash deploy/stop.sh

# make install MODEL=URL|FILE|DIR [MTP=URL|FILE] [INSTALL_ARGS="--dest DIR ..."]: builds,
# then deploy/install.sh fetches, verifies, prepares and starts the model (docs/INSTALL.md).
install: deps
	@$(MAKE) --no-print-directory all web
	@test -n "$(MODEL)" || { echo "make install: give MODEL=URL, a file or a directory (docs/INSTALL.md)"; exit 2; }
	@NEBULA_BIN=$(abspath $(BUILD))/bin bash deploy/install.sh --model "$(MODEL)" $(if $(MTP),--mtp "$(MTP)") $(INSTALL_ARGS)

unit: $(TEST_BINS)
	@for t in $(TEST_BINS); do echo "== $$t"; $$t || exit 1; done

# ---- fuzzing ----
# (-MMD -MP as everywhere: a header change rebuilds the fuzz objects too; a
# stale quant table once overran its new length here.)
FUZZ_CORE_OBJS := $(CORE_SRCS:%.c=$(BUILD)/fuzz-obj/%.o)
.SECONDARY: $(FUZZ_CORE_OBJS) # kept between runs: make would delete them as intermediates

$(BUILD)/fuzz-obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_OBJ_CFLAGS) $(AVX2_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/fuzz-obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_OBJ_CFLAGS) $(AVX512_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/fuzz-obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_OBJ_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/fuzz/fuzz_api_request: tests/fuzz/fuzz_api_request.c $(API_PURE_SRCS:%.c=$(BUILD)/fuzz-obj/%.o) $(FUZZ_CORE_OBJS)
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_CFLAGS) -MMD -MP -MF $(BUILD)/fuzz-obj/$(notdir $@).d $< $(API_PURE_SRCS:%.c=$(BUILD)/fuzz-obj/%.o) $(FUZZ_CORE_OBJS) $(LDLIBS_BASE:-fopenmp=) -o $@

$(BUILD)/fuzz/fuzz_tool_call: tests/fuzz/fuzz_tool_call.c $(API_PURE_SRCS:%.c=$(BUILD)/fuzz-obj/%.o) $(FUZZ_CORE_OBJS)
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_CFLAGS) -MMD -MP -MF $(BUILD)/fuzz-obj/$(notdir $@).d $< $(API_PURE_SRCS:%.c=$(BUILD)/fuzz-obj/%.o) $(FUZZ_CORE_OBJS) $(LDLIBS_BASE:-fopenmp=) -o $@

$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_CORE_OBJS)
	@mkdir -p $(dir $@)
	$(CLANG) $(FUZZ_CFLAGS) -MMD -MP -MF $(BUILD)/fuzz-obj/$(notdir $@).d $< $(FUZZ_CORE_OBJS) $(LDLIBS_BASE:-fopenmp=) -o $@

fuzz: $(FUZZ_BINS)
	@bash tests/fuzz/run-fuzz.sh $(BUILD) $(FUZZ_SECONDS)

# ---- benchmarks ----
bench: all
	@bash tools/bench/run-bench.sh $(BUILD)

# ---- the web page ----
# make web: the page's npm packages (marked, DOMPurify, highlight.js) installed
# from web/package-lock.json and copied into web/vendor/ (gitignored), which
# nginx serves next to the page; redone when the lock or the script changes.
.PHONY: web
web: web/vendor/versions.json

web/vendor/versions.json: web/package.json web/package-lock.json web/build-vendor.mjs
	cd web && npm ci --no-audit --no-fund --loglevel=error
	node web/build-vendor.mjs

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
