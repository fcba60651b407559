"""Writing: tensors to bytes and files, sharded checkpoints, metadata edits, atomic replacement.

Writing: tensors to bytes and files, sharded checkpoints, metadata edits, the one atomic
replacement."""
