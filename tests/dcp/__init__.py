"""Tests of fastst._dcp: torch.distributed.checkpoint storage (local, remote) and consolidation."""
