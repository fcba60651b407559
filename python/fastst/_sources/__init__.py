"""Sources: everything ``safe_open`` accepts, made into one ``RawSource``.

Files, descriptors, file objects, folders, indexes and their shards, URLs."""
