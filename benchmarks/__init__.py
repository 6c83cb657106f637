"""Scripts that measure servetune itself; each prints its figures and a headline last line.

Run them from the repository root as ``python -m benchmarks.<name>``; BENCHMARKS.md has the
commands and the numbers."""
