"""``fastst.torch.dcp``: torch.distributed.checkpoint storage and consolidation on fastst.

``StorageWriter`` and ``StorageReader`` plug into ``dcp.save``,
``dcp.async_save`` and ``dcp.load`` in place of torch's
``HuggingFaceStorageWriter`` / ``HuggingFaceStorageReader`` (same
arguments, same files); ``consolidate`` and ``consolidate_on_every_rank``
turn a DCP-sharded checkpoint into the Hugging Face layout inference
loads. Importing this module imports ``torch.distributed.checkpoint``;
``fastst.torch`` imports it only when ``fastst.torch.dcp`` is first used.
"""

from __future__ import annotations

from .consolidate import consolidate, consolidate_on_every_rank
from .reader import StorageReader
from .writer import StorageWriter

__all__ = ["StorageWriter", "StorageReader", "consolidate", "consolidate_on_every_rank"]
