"""Writing: tensors to bytes and files, sharded checkpoints, metadata edits, atomic replacement.

Writing: tensors to bytes and files, the streaming writer (a layout first, then tensors in any
order), sharded checkpoints, metadata edits, the one atomic replacement."""
