"""Tests of the command (fastst.cli): every subcommand, its text, JSON and SARIF output."""
