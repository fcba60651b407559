"""The drop-in switch: the hook serving ``import safetensors``, and the modules it serves.

Those are its facade modules and the reference's private helpers."""
