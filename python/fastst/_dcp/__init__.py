"""torch.distributed.checkpoint storage on fastst: writer, reader, commit, remote, consolidation.

The files of a DCP checkpoint in the Hugging Face layout (:mod:`.files`:
names, ``DCP_SHARDING_INFO``, the chunk table), saved whole or not at all in
a folder (:mod:`.commit`) or under a URL prefix (:mod:`.remote`), written and
read through torch's storage interfaces (:mod:`.writer`, :mod:`.reader`) and
turned into a Hugging Face checkpoint (:mod:`.consolidate`).
:mod:`.storage` is what ``fastst.torch.dcp`` shows; importing it imports
``torch.distributed.checkpoint``. Loading one checkpoint into many processes
is :mod:`fastst._distributed`'s job.
"""
