"""Tests of fastst._sources: everything safe_open accepts (files, file objects, folders,
sharded indexes, URLs) becoming one source, and what a file that is not safetensors is."""
