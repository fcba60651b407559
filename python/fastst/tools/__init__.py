"""fastst's tools: what the ``fastst`` command does, as libraries.

Built on the library (:mod:`fastst`), which never imports them:

- :mod:`fastst.tools.inspect`: facts, verification findings, hashes and the
  metadata card of files and checkpoints;
- :mod:`fastst.tools.checkpoint`: sharded checkpoints (index and shards) as wholes,
  on disk or behind URLs; :mod:`fastst.tools.checkpoint_verify`: their
  index verified against their shards;
- :mod:`fastst.tools.card`: the metadata card, from a file's ``__metadata__``;
- :mod:`fastst.tools.diff`: two files or checkpoints compared tensor by tensor;
- :mod:`fastst.tools.convert`: PyTorch pickle checkpoints to safetensors;
- :mod:`fastst.tools.stale_temp`: temporary files an interrupted save left;
- :mod:`fastst.tools.provenance`: model signatures (OpenSSF model signing)
  and CycloneDX ML-BOMs (the ``fastst[signing]`` extra).
"""
