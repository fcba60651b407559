"""Everything ``safe_open`` accepts (files, descriptors, file objects, folders, indexes and their
shards, URLs) made into one ``RawSource``."""
