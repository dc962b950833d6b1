"""Benchmarks behind ``my-agent bench NAME``: each module has ``add_arguments`` and ``run``."""
