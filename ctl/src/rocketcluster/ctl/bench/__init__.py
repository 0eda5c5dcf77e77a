"""Benchmarks: each figure beside a ceiling measured in the same run."""
