"""Tests of the framework modules and backends: torch (CPU and CUDA), flax, tensorflow, paddle,
mlx."""
