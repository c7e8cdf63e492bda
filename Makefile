# The project's entry points. `make test` is the README's test command and what CI runs.
# Every target installs what it needs; nothing is skipped because a tool is absent.

CARGO ?= cargo

.PHONY: test lint unit demo bench

## test: formatting, lints and every test of the workspace
test: lint unit

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace

## demo: the main job
demo:
	$(CARGO) run --release -p loadctl-cli -- demo

## bench: criterion benches (figures go to BENCHMARKS.md)
bench:
	$(CARGO) bench -p loadctl-bench
