"""The fixtures of the tests of saves to object storage: an S3 site per module, a key per test."""

from helpers.s3_objects import site, store  # noqa: F401
