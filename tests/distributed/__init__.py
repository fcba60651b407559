"""Tests of fastst._distributed: loads across torch.distributed processes, local and remote."""
