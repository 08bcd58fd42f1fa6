"""Tests of everything around the package: the test harness (tests/support), the benchmarks,
the README, the demo and the layout of the source."""
