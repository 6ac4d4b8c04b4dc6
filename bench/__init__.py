"""The benchmarks: `bench.suite` is `ext4lazy bench` (docs/BENCH.md). A package so that it imports from the
repository root like `harness`, which it shares with the system tests."""
