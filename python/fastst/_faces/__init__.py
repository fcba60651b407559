"""What the public framework modules are made of: reading and writing composed for one framework.

``fastst.numpy``, ``fastst.torch``, ``fastst.flax``... are faces: each pairs
its framework's backend (:mod:`fastst._frameworks`, the leaf below reading
and writing) with the readers of :mod:`fastst._read` and the writers of
:mod:`fastst._write`. What they share lives here, above both.
"""
