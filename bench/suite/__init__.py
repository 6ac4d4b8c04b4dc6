"""`ext4lazy bench`: the papers' benchmarks run side by side on the same (modelled) disks.

Layout: `core` (what a workload, a group and a suite are), `suites/` (one module per suite; adding a suite is
adding a module there), `systems` (the file systems under test), `devices` (a volume on a device: image, model
server, loop device, mount), `accounting` (I/O by class for each phase), `runner` (phases, progress, resumable
results), `report` (Markdown) and `plots` (PNG, run with Debian's python3 and matplotlib).  docs/BENCH.md.
"""
