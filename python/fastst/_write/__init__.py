"""Writing: tensors to bytes and files, sharded checkpoints, metadata edits, atomic replacement.

The streaming writer takes a layout first, then tensors in any order."""
