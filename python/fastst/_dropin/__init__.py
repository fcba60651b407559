"""The drop-in switch: the hook serving ``import safetensors``, and the modules it serves.

The drop-in switch: the hook serving ``import safetensors``, its facade modules and the
reference's private helpers."""
