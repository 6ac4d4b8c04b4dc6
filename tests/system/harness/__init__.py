"""Harness for the ext4lazy system tests: image builders, mount adapters, the tree walker and comparator."""
