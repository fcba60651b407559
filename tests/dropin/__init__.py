"""Tests of fastst._dropin: the hook serving ``import safetensors``, its facade and the
reference's private helpers, real loaders through it."""
