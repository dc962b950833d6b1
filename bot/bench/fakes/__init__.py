"""Protocol-faithful fake servers used by tests and benchmarks."""
