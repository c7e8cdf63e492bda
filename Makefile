# The project's entry points. `make test` is the README's test command and what CI runs.
# Every target installs what it needs; nothing is skipped because a tool is absent.

CARGO ?= cargo
CC ?= cc
CXX ?= c++
CBINDGEN_VERSION := 0.29.4
CARGO_FUZZ_VERSION := 0.13.1
FUZZ_TARGETS := policy_read policy_merge uri sip_classify subscriber_notify c_abi
FUZZ_SECONDS ?= 30
SOAK_SECONDS ?= 60
LIBDIR := target/libloadctl
CFLAGS_C := -std=c11 -Wall -Wextra -Wpedantic -Werror -g -Iinclude
CLIBS := -lpthread -ldl -lm
C_TESTS := $(basename $(notdir $(wildcard ffi/tests/*.c)))

PREFIX ?= /usr/local
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
# the SONAME's number: the major version (ffi/abi/README.md)
SOMAJOR := $(firstword $(subst ., ,$(VERSION)))

.PHONY: test test-builds cli kamailio-release-builds lint doc unit loom fuzz-smoke soak c-test header header-check cxx-check lib symbols-check abi-dump abi-check abi-baseline install example edge edge-test tools demo bench e2e-tools e2e e2e-tls kamailio-compare kamailio-module kamailio-module-test kamailio-module-compare faults kamailio-releases kamailio-summary kamailio-summary-reset many-core

## test: formatting, lints, the API docs (no warnings, no broken links), every Rust test, the loom models (and their mutants), the C ABI
## header check, the ABI baseline check, the shared library's SONAME/exports/version, the C test
## suite, the installed library used the way a C project would
## (pkg-config), the edge against real SIP peers (SIPp), the short Kamailio comparison and the
## Kamailio module (built against Debian's Kamailio source, run in Debian's kamailio) and its short
## side-by-side with pipelimit, the fault-injection scenarios (short form), the module against the
## Kamailio releases given (KAMAILIO_E2E_SOURCES, KAMAILIO_GATE_SOURCES), and a summary of the
## Kamailio versions the module was tested with.
## How: everything the checks run is built first (test-builds); then three lanes run at once
## (tests/lanes.sh, each lane's log printed when it ends): the CPU-bound checks niced on every
## CPU but the first (TEST_CPU_LANE), the edge and Debian's Kamailio end to end (TEST_EDGE_LANE), the Kamailio
## releases and TLS end to end (TEST_RELEASE_LANE), each end-to-end lane picking its ports from its own
## range; then the two comparisons, which measure CPU, alone; then the summary
TEST_CPU_LANE := lint doc unit loom fuzz-smoke soak header-check abi-check symbols-check c-test cxx-check example
TEST_EDGE_LANE := edge-test e2e kamailio-module-test faults
TEST_RELEASE_LANE := kamailio-releases e2e-tls
test: kamailio-summary-reset test-builds
	MAKE="$(MAKE)" bash tests/lanes.sh "cpu@niced=TEST_BUILT=1 $(TEST_CPU_LANE)" \
	  "edge=TEST_BUILT=1 E2E_PORTS=10000-21299 $(TEST_EDGE_LANE)" \
	  "releases=TEST_BUILT=1 E2E_PORTS=21300-32599 $(TEST_RELEASE_LANE)"
	$(MAKE) kamailio-compare kamailio-module-compare
	$(MAKE) kamailio-summary

## test-builds: what make test's lanes run or link, built before they start: the libraries, the
## edge, the CLI, the soak test, the Kamailio module for Debian's Kamailio and the Kamailio
## releases. In the lanes (TEST_BUILT=1) the targets lib, edge, cli and kamailio-module take these
## as built, so that no lane rewrites a file that another lane is running or linking.
test-builds: tools e2e-tools lib edge cli kamailio-module kamailio-release-builds
	$(CARGO) test --release -p loadctl --test it --no-run

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## doc: the API documentation of every crate, warnings (broken intra-doc links among them) denied
doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --workspace

unit:
	$(CARGO) test --workspace

## loom: the loom models of the lock-free pieces, then the same models against deliberately
## broken engine code, which they must catch (loom-tests/; separate target directories keep
## the normal build's artefacts)
loom:
	RUSTFLAGS="--cfg loadctl_loom" $(CARGO) test -p loadctl-loom --profile loom \
		--target-dir target/loom -- --nocapture
	RUSTFLAGS="--cfg loadctl_loom --cfg loadctl_loom_mutant" $(CARGO) test -p loadctl-loom \
		--profile loom --target-dir target/loom-mutant

## soak: classifiers on real threads for SOAK_SECONDS while policies are published, a source is
## withdrawn and restored, and window tickets complete out of order (engine/tests/it/soak.rs)
soak:
	SOAK_SECONDS=$(SOAK_SECONDS) $(CARGO) test --release -p loadctl --test it -- --ignored --nocapture soak::

## fuzz-smoke: every cargo-fuzz target (fuzz/) for FUZZ_SECONDS on a copy of its committed
## corpus, under AddressSanitizer, two at a time. The machine has only the stable toolchain: RUSTC_BOOTSTRAP=1
## lets it take the sanitizer flags cargo-fuzz passes. A crash fails the target (and leaves its
## input in fuzz/artifacts/).
fuzz-smoke: tools
	@cargo fuzz --version 2>/dev/null | grep -q "$(CARGO_FUZZ_VERSION)" || \
	  $(CARGO) install --locked cargo-fuzz --version $(CARGO_FUZZ_VERSION)
	cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz build -O
	@mkdir -p fuzz/target/smoke-logs
	@$(MAKE) --no-print-directory -j2 $(addprefix fuzz-run-,$(FUZZ_TARGETS))

# One fuzz-smoke target; fuzz-smoke runs two at a time (a libFuzzer run uses one core).
fuzz-run-%:
	@rm -rf fuzz/target/smoke/$* && mkdir -p fuzz/target/smoke/$* && cp fuzz/corpus/$*/* fuzz/target/smoke/$*/
	@dict=policy.dict; case $* in uri|sip_*) dict=sip.dict;; esac; \
	  echo "fuzz-smoke: $* for $(FUZZ_SECONDS) s"; \
	  (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run -O $* target/smoke/$* -- \
	    -max_total_time=$(FUZZ_SECONDS) -dict=dict/$$dict -timeout=10 -rss_limit_mb=2048 \
	    -print_final_stats=1 > target/smoke-logs/$*.log 2>&1) || \
	    { tail -n 60 fuzz/target/smoke-logs/$*.log; echo "fuzz-smoke: $* FAILED"; exit 1; }; \
	  grep -E "^stat::(number_of_executed_units|peak_rss_mb)" fuzz/target/smoke-logs/$*.log | sed "s/^/fuzz-smoke: $*: /"

## tools: what the C side needs (valgrind, a C/C++ compiler, pkg-config, binutils' nm and
## readelf, libabigail's abidw/abidiff, the pinned cbindgen)
tools:
	@command -v valgrind >/dev/null && command -v $(CXX) >/dev/null && command -v pkg-config >/dev/null && \
	  command -v nm >/dev/null && command -v readelf >/dev/null && \
	  command -v abidw >/dev/null && command -v abidiff >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind g++ pkg-config \
	    binutils abigail-tools)
	@cbindgen --version 2>/dev/null | grep -qx "cbindgen $(CBINDGEN_VERSION)" || \
	  $(CARGO) install --locked cbindgen --version $(CBINDGEN_VERSION)

## e2e-tools: what the end-to-end tests need (tests/e2e/): SIPp (Debian's sip-tester), Kamailio
## and its tls module, taskset, python3, tshark, openssl, stunnel4 — installed without letting the
## kamailio package start its system service (tests/e2e/install-tools.sh)
e2e-tools:
	@command -v sipp >/dev/null && command -v kamailio >/dev/null && command -v taskset >/dev/null && \
	  command -v python3 >/dev/null && command -v tshark >/dev/null && command -v dumpcap >/dev/null && \
	  command -v openssl >/dev/null && command -v stunnel4 >/dev/null && \
	  dpkg -s kamailio-tls-modules >/dev/null 2>&1 || \
	  sh tests/e2e/install-tools.sh

## e2e: the edge with real SIP peers on loopback: as a proxy (tests/e2e/test_edge.py: SIPp UAC
## and UAS, rule actions over UDP, SIPp over TCP (-t t1, -t tn), validation, metrics), on
## several cores (tests/e2e/test_edge_workers.py: --workers 1 and 2), as an
## RFC 7200 subscriber (tests/e2e/test_edge_subscriber.py: a SIPp notifier sending full,
## partial, invalid, gap, terminated; no notifier at start), and with `loadctl notifier`
## (tests/e2e/test_loadctl_notifier.py: two edges sharing a global rate, the allow-list, reload
## and restarts) — the three suites all run, and the target fails if one did; then RFC
## 7339/7415 overload control (tests/e2e/test_overload.py): the edge against a SIPp UAS
## answering oc=50 (loss), and SIPp at 3x the example server's capacity with and without the
## loop closed; and against peers that do not play by it (tests/e2e/test_interconnect.py: oc
## values a next hop inserts, senders using many addresses, a participant that does not
## reduce). NEIGHBOUR=1 (here and for every suite below) keeps one CPU busy meanwhile.
E2E_EDGE_SUITES = test_edge test_edge_workers test_edge_subscriber test_loadctl_notifier
E2E_OC_SUITES = test_overload test_interconnect
e2e: e2e-tools edge cli
	python3 tests/e2e/faultrelay.py --self-test
	s=0; for t in $(E2E_EDGE_SUITES); do python3 tests/e2e/$$t.py || s=1; done; exit $$s
	s=0; for t in $(E2E_OC_SUITES); do python3 tests/e2e/$$t.py || s=1; done; exit $$s

## e2e-tls: the edge over TLS (tests/e2e/test_edge_tls.py): calls and the RFC 7339 loop through
## SIPp behind stunnel, the RFC 7200 dialog with a sips: notifier and forged NOTIFYs refused,
## untrusted notifiers, next hops and clients refused, certificates made by the test
e2e-tls: e2e-tools edge
	python3 tests/e2e/test_edge_tls.py

## kamailio-compare: Kamailio (pipelimit) and the edge measured side by side: accuracy against a
## limit, CPU per 1,000 messages, max rate on one core (tests/e2e/kamailio_compare.py; the short
## CI mode by default, KAMAILIO_COMPARE_ARGS= for the full one)
KAMAILIO_COMPARE_ARGS ?= --short
kamailio-compare: e2e-tools edge
	python3 tests/e2e/kamailio_compare.py $(KAMAILIO_COMPARE_ARGS) --out target/e2e/kamailio-compare.json

## kamailio-module: the Kamailio module (kamailio/loadctl/) built against Debian's kamailio
## 5.6.3-2 source package (fetched and configured once under target/kamailio, as debian/rules
## does), only the module compiled, linked with libloadctl.a and stripped; then Debian's
## /usr/sbin/kamailio must accept a configuration loading it (`kamailio -c`: the module_version
## and compile-flags gate). Output: target/kamailio/loadctl.so (kamailio/build.sh)
kamailio-module: e2e-tools lib
ifneq ($(TEST_BUILT),1)
	sh kamailio/build.sh
endif

## kamailio-module-test: Debian's kamailio running the module against SIPp on loopback
## (tests/e2e/test_kamailio_module.py: rate accuracy, actions, RPC publish across children;
## test_kamailio_rfc7200.py: the module as RFC 7200 subscriber and notifier; test_kamailio_oc.py:
## RFC 7339 overload control — the three suites all run, and the target fails if one did), and
## every script function and RPC command on every kind of request under each combination of the
## module's roles (tests/e2e/test_kamailio_functions.py)
E2E_MODULE_SUITES = test_kamailio_module test_kamailio_rfc7200 test_kamailio_oc test_kamailio_tls
kamailio-module-test: kamailio-module
	python3 tests/e2e/test_kamailio_functions.py
	s=0; for t in $(E2E_MODULE_SUITES); do python3 tests/e2e/$$t.py || s=1; done; exit $$s
	@echo "$$(python3 -c 'import json; print(json.load(open("target/kamailio/build.json"))["version"])') e2e Debian's kamailio package" >> target/kamailio/tested.txt

## kamailio-module-compare: pipelimit TAILDROP vs the loadctl module in the same Kamailio
## (tests/e2e/kamailio_module_compare.py, config tests/e2e/kamailio/limiter-compare.cfg):
## accuracy and CPU per 1,000 messages. The short CI mode (~30 s, children=4, R = 100) fails
## when the module admits outside R ± 3 % or r·(1 s + τ) + 1 in any second, or a call fails;
## KAMAILIO_MODULE_COMPARE_ARGS= for the full table (~25 min)
KAMAILIO_MODULE_COMPARE_ARGS ?= --short
kamailio-module-compare: kamailio-module
	python3 tests/e2e/kamailio_module_compare.py $(KAMAILIO_MODULE_COMPARE_ARGS) --out target/e2e/kamailio-module-compare.json

## faults: faults survived between real processes (tests/e2e/test_faults.py, short form, ~3 min):
## the fault relay (tests/e2e/faultrelay.py) loses, delays, reorders, duplicates and black-holes
## datagrams between the edge, SIPp and Kamailio; FAULTS_ARGS=--long for the long form
FAULTS_ARGS ?=
faults: e2e-tools edge kamailio-module
	python3 tests/e2e/test_faults.py $(FAULTS_ARGS)

## kamailio-releases: the module against Kamailio releases built from source (kamailio/build.sh
## --source: the core and the modules the tests load, under target/kamailio/VERSION/). Each
## release tarball or source tree in KAMAILIO_E2E_SOURCES is built, load-gated, and run through
## every module e2e test (test_kamailio_functions.py, test_kamailio_module.py,
## test_kamailio_rfc7200.py, test_kamailio_oc.py) and the fault
## scenarios with a Kamailio (test_faults.py --kamailio-only), and from 6.0 on RFC 7339 against
## Kamailio's own client (test_kamailio_oc_interop.py); each in KAMAILIO_GATE_SOURCES is
## built (core, sl, tm, pv) and load-gated. Both empty by default; .ci/run passes 6.1.4 and 5.8.8.
## Each Kamailio test target adds a line to target/kamailio/tested.txt for kamailio-summary.
KAMAILIO_E2E_SOURCES ?=
KAMAILIO_GATE_SOURCES ?=
kamailio-releases: e2e-tools lib edge cli
	@set -e; for src in $(KAMAILIO_E2E_SOURCES); do \
	  dir=$$(sh kamailio/build.sh --source "$$src"); \
	  [ -f "$$dir/build.json" ] || { echo "kamailio/build.sh printed '$$dir', not a build directory" >&2; exit 1; }; \
	  LOADCTL_KAMAILIO_BUILD=$$dir python3 tests/e2e/test_kamailio_functions.py; \
	  s=0; for t in $(E2E_MODULE_SUITES); do LOADCTL_KAMAILIO_BUILD=$$dir python3 tests/e2e/$$t.py || s=1; done; \
	  [ $$s = 0 ]; \
	  LOADCTL_KAMAILIO_BUILD=$$dir python3 tests/e2e/test_faults.py --kamailio-only; \
	  if [ "$$(basename $$dir | cut -d. -f1)" -ge 6 ]; then \
	    LOADCTL_KAMAILIO_BUILD=$$dir python3 tests/e2e/test_kamailio_oc_interop.py; fi; \
	  echo "$$(basename $$dir) e2e $$src" >> target/kamailio/tested.txt; \
	done
	@set -e; for src in $(KAMAILIO_GATE_SOURCES); do \
	  dir=$$(sh kamailio/build.sh --source "$$src" --modules "sl tm pv"); \
	  [ -f "$$dir/build.json" ] || { echo "kamailio/build.sh printed '$$dir', not a build directory" >&2; exit 1; }; \
	  echo "$$(basename $$dir) gate $$src" >> target/kamailio/tested.txt; \
	done

## kamailio-release-builds: the Kamailio releases of kamailio-releases built (cached under
## target/kamailio/VERSION/), without their tests
kamailio-release-builds: lib
	@set -e; for src in $(KAMAILIO_E2E_SOURCES); do sh kamailio/build.sh --source "$$src" >/dev/null; done; \
	  for src in $(KAMAILIO_GATE_SOURCES); do sh kamailio/build.sh --source "$$src" --modules "sl tm pv" >/dev/null; done

## kamailio-summary: which Kamailio versions the module was built for and tested against (since
## the last kamailio-summary-reset, which `make test` does first), in capitals when no 6.1 release
## was among them
kamailio-summary-reset:
	@rm -f target/kamailio/tested.txt

kamailio-summary:
	@mkdir -p target/kamailio
	@echo "== Kamailio versions (kamailio-releases):"
	@[ -f target/kamailio/tested.txt ] || touch target/kamailio/tested.txt
	@while read v kind src; do \
	  case $$kind in e2e) what="built, load-gated, every module e2e test and the Kamailio fault scenarios";; \
	                 *) what="built and load-gated";; esac; \
	  echo "   $$v: $$what ($$src)"; done < target/kamailio/tested.txt
	@grep -q '^6\.1\.[0-9]* e2e' target/kamailio/tested.txt || \
	  echo "   THE MODULE WAS NOT TESTED AGAINST KAMAILIO 6.1: no 6.1 source in KAMAILIO_E2E_SOURCES (e.g. make test KAMAILIO_E2E_SOURCES=/path/kamailio-6.1.4.tar.xz)"

# $(call update,FROM,TO): TO gets FROM's bytes unless it has them already, as a new file renamed
# into place, so that a program reading or running the old one meanwhile never sees half a file
# and an unchanged file keeps its time (what depends on it is not rebuilt)
update = cmp -s $(1) $(2) || { cp $(1) $(2).tmp$$$$ && mv -f $(2).tmp$$$$ $(2); }

## lib: libloadctl.a and libloadctl.so in target/libloadctl/
lib:
ifneq ($(TEST_BUILT),1)
	$(CARGO) build --release -p loadctl-ffi
	mkdir -p $(LIBDIR)
	$(call update,target/release/libloadctl_ffi.a,$(LIBDIR)/libloadctl.a)
	$(call update,target/release/libloadctl_ffi.so,$(LIBDIR)/libloadctl.so.$(SOMAJOR))
	ln -sf libloadctl.so.$(SOMAJOR) $(LIBDIR)/libloadctl.so
endif

## cli: the `loadctl` CLI, release build (target/release/loadctl)
cli:
ifneq ($(TEST_BUILT),1)
	$(CARGO) build --release -p loadctl-cli
endif

## symbols-check: the shared library as it is installed: SONAME libloadctl.so.$(SOMAJOR), exports exactly
## the functions include/loadctl.h declares (all `lc_`; nothing of Rust's std or of a dependency),
## and a C program built against the header and linked with it (ffi/abi/version_check.c) sees
## the header's version (LC_VERSION, LC_VERSION_MAJOR/MINOR/PATCH/NUMBER)
symbols-check: tools lib
	mkdir -p target/abi
	@readelf -d $(LIBDIR)/libloadctl.so.$(SOMAJOR) | grep -q 'Library soname: \[libloadctl.so.$(SOMAJOR)\]' || \
	  { echo "symbols-check: $(LIBDIR)/libloadctl.so.$(SOMAJOR) does not have the SONAME libloadctl.so.$(SOMAJOR)"; exit 1; }
	awk -v names=1 -f ffi/abi/stub.awk include/loadctl.h | sort > target/abi/declared.txt
	nm -D --defined-only $(LIBDIR)/libloadctl.so.$(SOMAJOR) | awk '{ print $$NF }' | sort > target/abi/exported.txt
	@diff -u target/abi/declared.txt target/abi/exported.txt >target/abi/symbols.diff || \
	  { cat target/abi/symbols.diff; echo "symbols-check: libloadctl.so exports (+) or lacks (-) symbols" \
	    "other than the functions include/loadctl.h declares"; exit 1; }
	@echo "symbols-check: SONAME libloadctl.so.$(SOMAJOR), $$(wc -l < target/abi/exported.txt) symbols, all declared in the header"
	$(CC) $(CFLAGS_C) ffi/abi/version_check.c -L$(LIBDIR) -l:libloadctl.so.$(SOMAJOR) -o target/abi/version_check
	LD_LIBRARY_PATH=$(LIBDIR) ./target/abi/version_check

## abi-dump: the C ABI of include/loadctl.h as libabigail describes it (target/abi/libloadctl.abi):
## ffi/abi/stub.awk defines each declared function with a trapping body (plus one enum per numeric
## #define and one struct per scalar typedef), compiled with -g into a stand-in libloadctl.so.$(SOMAJOR),
## read by abidw with every type kept (ffi/abi/README.md says why not the Rust .so)
ABIDW := abidw --load-all-types --no-corpus-path --no-comp-dir-path --no-show-locs
abi-dump: tools
	mkdir -p target/abi
	awk -f ffi/abi/stub.awk include/loadctl.h > target/abi/stub.c
	$(CC) -std=c11 -Wall -Werror -Wno-unused-parameter -O0 -g -fno-eliminate-unused-debug-types \
	  -fPIC -shared -Iinclude -Wl,-soname,libloadctl.so.$(SOMAJOR) target/abi/stub.c -o target/abi/libloadctl.so.$(SOMAJOR)
	$(ABIDW) target/abi/libloadctl.so.$(SOMAJOR) > target/abi/libloadctl.abi

## abi-check: fail when the C ABI differs from the committed baseline ffi/abi/libloadctl.abi
## (abidiff --non-reachable-types: a struct, field, enum value, #define value, typedef or
## signature changed, a function or type added or removed).
## A deliberate change: `make abi-baseline`, commit ffi/abi/libloadctl.abi, and bump the version
## as ffi/abi/README.md says (an incompatible change needs a new major version and SONAME)
abi-check: abi-dump
	@abidiff --non-reachable-types ffi/abi/libloadctl.abi target/abi/libloadctl.abi || \
	  { echo "abi-check: the C ABI differs from ffi/abi/libloadctl.abi (above). If deliberate:" \
	    "\`make abi-baseline\`, commit it, and bump the version (ffi/abi/README.md)"; exit 1; }
	@echo "abi-check: the C ABI matches ffi/abi/libloadctl.abi"

## abi-baseline: regenerate include/loadctl.h from ffi/src, then the committed ABI baseline
## ffi/abi/libloadctl.abi from it (the one command to run after a deliberate ABI change)
abi-baseline:
	$(MAKE) header
	$(MAKE) abi-dump
	cp target/abi/libloadctl.abi ffi/abi/libloadctl.abi

## install: everything a user runs or links under $(DESTDIR)$(PREFIX): the header, the libraries,
## the pkg-config file and CMake config, the `loadctl` CLI and the edge (bin/loadctl-edge), and the
## Kamailio module (lib/kamailio/modules/loadctl.so) when `make kamailio-module` has built it.
## DESTDIR is for packagers: the pkg-config file names $(PREFIX), not the staging directory.
install: lib edge cli
	install -D -m 644 include/loadctl.h $(DESTDIR)$(PREFIX)/include/loadctl.h
	install -D -m 644 $(LIBDIR)/libloadctl.a $(DESTDIR)$(PREFIX)/lib/libloadctl.a
	install -D -m 755 $(LIBDIR)/libloadctl.so.$(SOMAJOR) $(DESTDIR)$(PREFIX)/lib/libloadctl.so.$(SOMAJOR)
	ln -sf libloadctl.so.$(SOMAJOR) $(DESTDIR)$(PREFIX)/lib/libloadctl.so
	install -D -m 644 ffi/cmake/loadctlConfig.cmake $(DESTDIR)$(PREFIX)/lib/cmake/loadctl/loadctlConfig.cmake
	mkdir -p $(DESTDIR)$(PREFIX)/lib/pkgconfig
	sed -e 's|@PREFIX@|$(abspath $(PREFIX))|' -e 's|@VERSION@|$(VERSION)|' ffi/loadctl.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/loadctl.pc
	install -D -m 755 target/release/loadctl $(DESTDIR)$(PREFIX)/bin/loadctl
	install -D -m 755 target/edge $(DESTDIR)$(PREFIX)/bin/loadctl-edge
	if [ -f target/kamailio/loadctl.so ]; then \
	  install -D -m 644 target/kamailio/loadctl.so $(DESTDIR)$(PREFIX)/lib/kamailio/modules/loadctl.so; \
	else echo "install: no Kamailio module (make kamailio-module builds it)"; fi

## example: install into target/prefix, build examples/minimal.c and examples/guide_c.c through
## pkg-config and run them, run the Rust samples (engine/examples/), and check that the README
## and the guides show them as they are (tests/docs/samples.py)
example: tools
	$(MAKE) install PREFIX=target/prefix
	$(CC) -std=c11 -Wall -Wextra -Wpedantic -Werror examples/minimal.c -o target/minimal \
	  $$(PKG_CONFIG_PATH=target/prefix/lib/pkgconfig pkg-config --cflags --libs --static loadctl)
	LD_LIBRARY_PATH=target/prefix/lib ./target/minimal
	$(CC) -std=c11 -Wall -Wextra -Wpedantic -Werror examples/guide_c.c -o target/guide_c \
	  $$(PKG_CONFIG_PATH=target/prefix/lib/pkgconfig pkg-config --cflags --libs --static loadctl)
	LD_LIBRARY_PATH=target/prefix/lib ./target/guide_c
	$(CARGO) run -q -p loadctl --example readme_taste
	$(CARGO) run -q -p loadctl --example guide_overload
	python3 tests/docs/samples.py

## edge: the edge proxy (edge/, every .c there but the tests) and the capacity-limited example
## server (examples/server/) the overload-control tests put behind it, target/edge and
## target/server, each rebuilt when its sources, the header or libloadctl.a changed
EDGE_SRC := $(filter-out edge/test_%.c,$(wildcard edge/*.c))
# TLS: Debian's OpenSSL (libssl-dev), what C appliances link
EDGE_LIBS := -lssl -lcrypto
edge: lib
ifneq ($(TEST_BUILT),1)
	@$(MAKE) --no-print-directory target/edge target/server
endif

target/edge: $(EDGE_SRC) $(wildcard edge/*.h) include/loadctl.h $(LIBDIR)/libloadctl.a Makefile
	$(CC) $(CFLAGS_C) -O2 $(EDGE_SRC) $(LIBDIR)/libloadctl.a $(EDGE_LIBS) $(CLIBS) -o $@.tmp && mv -f $@.tmp $@

target/server: examples/server/server.c include/loadctl.h $(LIBDIR)/libloadctl.a Makefile
	$(CC) $(CFLAGS_C) -O2 examples/server/server.c $(LIBDIR)/libloadctl.a $(CLIBS) -o $@.tmp && mv -f $@.tmp $@

## edge-test: the stream framer's, the request validation's and the per-source connection table's
## unit tests, then the edge driven over UDP and TCP on loopback, as built and built with
## ASan+UBSan (all under -Werror)
EDGE_SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
edge-test: edge
	$(CC) $(CFLAGS_C) $(EDGE_SAN) edge/test_stream.c -o target/test_stream
	./target/test_stream
	$(CC) $(CFLAGS_C) $(EDGE_SAN) edge/test_validate.c edge/validate.c -o target/test_validate
	./target/test_validate
	$(CC) $(CFLAGS_C) $(EDGE_SAN) edge/test_sources.c edge/sources.c $(CLIBS) -o target/test_sources
	./target/test_sources
	$(CC) $(CFLAGS_C) $(EDGE_SAN) -O1 $(EDGE_SRC) $(LIBDIR)/libloadctl.a $(EDGE_LIBS) $(CLIBS) -o target/edge-asan
	$(CC) -std=c11 -Wall -Wextra -Wpedantic -Werror edge/test_edge.c -o target/test_edge
	./target/test_edge ./target/edge
	ASAN_OPTIONS=detect_leaks=1 ./target/test_edge ./target/edge-asan

## header: regenerate include/loadctl.h with the pinned cbindgen
header: tools
	cd ffi && cbindgen --config cbindgen.toml --crate loadctl-ffi --output ../include/loadctl.h

## header-check: fail when include/loadctl.h is not what cbindgen generates
header-check: tools
	cd ffi && cbindgen --config cbindgen.toml --crate loadctl-ffi --output ../target/loadctl.h.fresh
	diff -u include/loadctl.h target/loadctl.h.fresh

## c-test: ffi/tests/*.c under ASan+UBSan, then under valgrind memcheck
c-test: tools lib
	mkdir -p target/ctest
	set -e; for t in $(C_TESTS); do \
	  $(CC) $(CFLAGS_C) -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all \
	    ffi/tests/$$t.c $(LIBDIR)/libloadctl.a $(CLIBS) -o target/ctest/$$t-asan; \
	  echo "== $$t (ASan+UBSan)"; ASAN_OPTIONS=detect_leaks=1 ./target/ctest/$$t-asan; \
	  $(CC) $(CFLAGS_C) ffi/tests/$$t.c $(LIBDIR)/libloadctl.a $(CLIBS) -o target/ctest/$$t; \
	  echo "== $$t (valgrind)"; valgrind -q --error-exitcode=1 --leak-check=full \
	    --errors-for-leak-kinds=definite,indirect ./target/ctest/$$t; \
	done

## cxx-check: the header compiles as C++17
cxx-check: tools
	printf '#include "loadctl.h"\nint main() { lc_decision d{}; return lc_version() != nullptr && d.status == 0 ? 0 : 1; }\n' > target/cxx-check.cpp
	$(CXX) -std=c++17 -Wall -Wextra -Werror -Iinclude -fsyntax-only target/cxx-check.cpp

## demo: the main job
demo:
	$(CARGO) run --release -p loadctl-cli -- demo

## bench: criterion benches and the runtime harness (figures go to BENCHMARKS.md)
bench:
	$(CARGO) bench -p loadctl-bench

## many-core: the figures for a machine with more cores, in one file (bench/many-core.sh): the
## harness's hot-rule and standard groups at 1, 2, 4, 8 and 16 threads and the edge with 16
## workers under SIPp, capped at the usable cores (about 4 min on 16). Not part of `make test`.
## A timing run: alone on the machine (flock /tmp/loadctl-traffic.lock make many-core).
## MANY_CORE_ARGS=--out FILE to write elsewhere than target/many-core.json
MANY_CORE_ARGS ?=
many-core:
	bash bench/many-core.sh $(MANY_CORE_ARGS)
