"""Reading: ``safe_open`` and its slices, owned loads, read-ahead, progress."""
