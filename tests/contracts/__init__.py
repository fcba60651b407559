"""Contracts across the package: hostile input, differential tests against the reference, the
malformed corpus, the rule catalogue, the package layout, settings, path names, stubs, the
README's cookbook."""
