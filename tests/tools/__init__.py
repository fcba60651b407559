"""Tests of the tools wing (fastst.tools): card, stats, signatures, SBOMs, stale temporaries."""
