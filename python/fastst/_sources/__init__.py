"""Sources: everything ``safe_open`` accepts, made into one ``RawSource``.

Everything ``safe_open`` accepts (files, descriptors, file objects, folders, indexes and their
shards, URLs) made into one ``RawSource``."""
