//! The core's integration tests, as one test binary (one link per build:
//! mutation testing rebuilds the tests once per mutant).

// Helpers outside `#[test]` functions may fail the test too.
#![allow(clippy::expect_used, clippy::panic)]

mod header_api;
mod header_rules;
mod parser_robustness;
mod read_api;
mod write_api;
