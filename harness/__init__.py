"""What the system tests (tests/system) and the benchmarks (bench/suite) share: image builders, mount adapters,
the tree walker and comparator, process and mount helpers.

Imported as `harness` with the repository root on sys.path: tests/system/pytest.ini puts it there, and
`python3 bench/suite` (what `ext4lazy bench` runs) does so in its __main__.
"""
