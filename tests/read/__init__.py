"""Tests of fastst._read: safe_open and its slices, owned loads, iterated loads, read-ahead,
progress, conversions, memory and threads."""
