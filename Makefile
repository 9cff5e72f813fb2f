# promptcache - build, test, run.
#
#   make run     install what is missing, build, start a private redis-server
#                and the proxy on 127.0.0.1:8080 (UPSTREAM=... to choose the upstream)
#   make test    install what is missing, build, run the whole suite
#   make demo    proxy + mock upstream + a small workload; prints the hit rate
#   make SANITIZE=1 test   the same suite under ASan + UBSan
#
# Dependencies are Debian packages, installed with apt-get when missing
# (see `make deps`). Nothing else is downloaded except the npm packages of
# the client tests (npm ci from the committed lockfile).

SHELL := /bin/bash
.DEFAULT_GOAL := all

SANITIZE ?= 0
ifeq ($(SANITIZE),1)
BUILD ?= build/asan
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT ?= -O1
else
BUILD ?= build
SANFLAGS :=
OPT ?= -O2
endif

CC ?= cc
CXX ?= c++
PKGS_PC := libevent libevent_pthreads libcurl hiredis libcjson libcrypto
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith \
	-Wformat=2 -Wno-format-nonliteral -Werror
CFLAGS ?= $(OPT) -g
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -pthread $(WARN) $(SANFLAGS) -Iinclude -I$(BUILD)/gen \
	$(shell pkg-config --cflags $(PKGS_PC) 2>/dev/null) $(CFLAGS) -MMD -MP
LDLIBS_ALL = $(shell pkg-config --libs $(PKGS_PC) 2>/dev/null) -lm -pthread
ALL_LDFLAGS = $(SANFLAGS) $(LDFLAGS)

VERSION := $(shell cat VERSION 2>/dev/null || echo 0.1.0)
ALL_CFLAGS += -DPC_VERSION='"$(VERSION)"'

LIB_SRCS := $(filter-out src/main.c,$(wildcard src/*.c))
LIB_OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRCS)) $(BUILD)/obj/gen_migrations.o
BIN := $(BUILD)/promptcache
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_REPLAY := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz-replay/%,$(FUZZ_SRCS))
FUZZ_BINS := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(FUZZ_SRCS))

C_FILES := $(wildcard src/*.c include/*.h tests/unit/*.c tests/unit/*.h tests/fuzz/*.c tools/*.c)

# --- dependencies -----------------------------------------------------------

DEB_BUILD := gcc libc6-dev make pkg-config libevent-dev libcurl4-openssl-dev libhiredis-dev \
	libcjson-dev libssl-dev redis-server ca-certificates
DEB_TEST := clang-format
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Install any missing Debian package (non-interactive), then node/npm if absent.
.PHONY: deps deps-test
deps:
	@missing=""; for p in $(DEB_BUILD); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "deps: installing$$missing"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

deps-test: deps
	@missing=""; for p in $(DEB_TEST); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	command -v node >/dev/null || missing="$$missing nodejs"; \
	command -v npm >/dev/null || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then \
		echo "deps: installing$$missing"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# --- build ------------------------------------------------------------------

.PHONY: all
all: $(BIN)

$(BUILD)/obj/%.o: src/%.c | $(BUILD)/obj
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/obj/gen_migrations.o: $(BUILD)/gen/migrations.c | $(BUILD)/obj
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/gen/migrations.c: $(sort $(wildcard migrations/*.lua)) $(BUILD)/tools/embed | $(BUILD)/gen
	$(BUILD)/tools/embed $(sort $(wildcard migrations/*.lua)) > $@.tmp && mv $@.tmp $@

$(BUILD)/tools/embed: tools/embed.c | $(BUILD)/tools
	$(CC) -std=c11 -O1 $(WARN) -o $@ $<

$(BUILD)/libpc.a: $(LIB_OBJS)
	rm -f $@ && ar rcs $@ $^

$(BIN): $(BUILD)/obj/main.o $(BUILD)/libpc.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS_ALL)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libpc.a tests/unit/t.h | $(BUILD)/tests
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/libpc.a $(LDLIBS_ALL)

# Fuzz targets built with a small driver that replays the committed corpus
# (part of `make test`); `make fuzz` runs them under libFuzzer.
$(BUILD)/fuzz-replay/%: tests/fuzz/%.c tests/fuzz/replay_main.c $(BUILD)/libpc.a | $(BUILD)/fuzz-replay
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< tests/fuzz/replay_main.c $(BUILD)/libpc.a $(LDLIBS_ALL)

$(BUILD)/obj $(BUILD)/gen $(BUILD)/tools $(BUILD)/tests $(BUILD)/fuzz-replay build/fuzz:
	mkdir -p $@

-include $(wildcard $(BUILD)/obj/*.d $(BUILD)/tests/*.d)

# --- running ----------------------------------------------------------------

UPSTREAM ?= https://api.openai.com
LISTEN ?= 127.0.0.1:8080

.PHONY: run demo
# The main job: private redis-server under var/ and the proxy in the foreground.
run: deps
	@$(MAKE) --no-print-directory all
	UPSTREAM='$(UPSTREAM)' LISTEN='$(LISTEN)' PROMPTCACHE_BIN=$(abspath $(BIN)) tools/run.sh

# The proxy in front of the mock upstream, a small mixed workload, the hit rate.
demo: deps-test
	@$(MAKE) --no-print-directory all
	PROMPTCACHE_BIN=$(abspath $(BIN)) node tools/demo.js

# --- tests ------------------------------------------------------------------

.PHONY: test unit-test fuzz-replay integration-test client-test format-check
test: deps-test
	$(MAKE) --no-print-directory format-check
	$(MAKE) --no-print-directory unit-test fuzz-replay docs-check
	$(MAKE) --no-print-directory integration-test
	$(MAKE) --no-print-directory client-test
	@echo "all tests passed"

unit-test: $(UNIT_BINS)
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; $$t; done

fuzz-replay: $(FUZZ_REPLAY)
	@set -e; for t in $(FUZZ_REPLAY); do \
		n=$$(basename $$t); echo "== $$n (corpus)"; $$t tests/fuzz/corpus/$${n#fuzz_}; done

# One test file at a time (each starts its own redis-server and proxies);
# Node 18 (Debian's) has no --test-concurrency and needs none.
NODE_TEST = node --test $(shell node --test-concurrency=1 -e 0 2>/dev/null && echo --test-concurrency=1)

integration-test: $(BIN)
	PROMPTCACHE_BIN=$(abspath $(BIN)) $(NODE_TEST) tests/integration/*.test.js

client-test: $(BIN)
	cd tests/clients && npm ci --no-audit --no-fund --loglevel=error
	PROMPTCACHE_BIN=$(abspath $(BIN)) $(NODE_TEST) tests/clients/*.test.js

format-check:
	@command -v clang-format >/dev/null || { echo "clang-format missing (make deps-test)"; exit 1; }
	@clang-format --dry-run --Werror $(C_FILES)

# README's metrics table is generated from the metrics table (make docs).
.PHONY: docs docs-check
docs-check: $(BIN)
	@$(BIN) --metrics-doc > $(BUILD)/metrics.md
	@awk '/<!-- metrics:begin -->/{f=1;next} /<!-- metrics:end -->/{f=0} f' README.md \
		| diff -u $(BUILD)/metrics.md - >/dev/null \
		|| { echo "README.md's metrics table differs from promptcache --metrics-doc: run make docs"; exit 1; }

docs: $(BIN)
	@$(BIN) --metrics-doc > $(BUILD)/metrics.md
	@awk -v t=$(BUILD)/metrics.md '/<!-- metrics:end -->/{while((getline l < t)>0) print l; f=0} \
		!f{print} /<!-- metrics:begin -->/{f=1}' README.md > $(BUILD)/README.md && mv $(BUILD)/README.md README.md

.PHONY: bench
bench: deps
	@$(MAKE) --no-print-directory all
	PROMPTCACHE_BIN=$(abspath $(BIN)) bench/bench.sh

.PHONY: format
format:
	clang-format -i $(C_FILES)

# Every target in turn, FUZZ_SECONDS each, under ASan + UBSan (a UB report aborts).
# New inputs go to tests/fuzz/corpus-NAME/ (not committed); a crash stops make,
# leaving tests/fuzz/crash-* (add it to tests/fuzz/corpus/NAME/ once fixed).
.PHONY: fuzz
FUZZ_SECONDS ?= 60
fuzz: $(BUILD)/gen/migrations.c | build/fuzz
	@set -e; for f in $(FUZZ_SRCS); do \
		n=$$(basename $$f .c); \
		clang -std=c11 -D_GNU_SOURCE -DPC_VERSION='"$(VERSION)"' -g -O1 \
			-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Iinclude \
			$$(pkg-config --cflags $(PKGS_PC)) -o build/fuzz/$$n $$f \
			$$(ls src/*.c | grep -v src/main.c) $(BUILD)/gen/migrations.c $(LDLIBS_ALL); \
		mkdir -p tests/fuzz/corpus-$${n#fuzz_}; \
		echo "== $$n: $(FUZZ_SECONDS) s"; \
		build/fuzz/$$n -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
			-artifact_prefix=tests/fuzz/ tests/fuzz/corpus-$${n#fuzz_} tests/fuzz/corpus/$${n#fuzz_}; \
	done

.PHONY: clean
clean:
	rm -rf build
