"""Tests of fastst._write: tensors to bytes and files, atomic and durable saves, sharded
checkpoints, metadata edits."""
