//! The local file as a [`Source`]: positioned reads on the descriptor
//! opened by [`crate::io::open`], its stamp for the file-changed rule, and
//! the file itself for the fast paths.

use std::fs::File;

use super::Source;
use crate::error::Result;
use crate::io::{check_unchanged, OpenFile};

impl Source for OpenFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.read_exact_at(buf, offset)
    }

    fn check_unchanged(&self) -> Result<()> {
        check_unchanged(&self.file, &self.stamp)
    }

    fn local(&self) -> Option<&File> {
        Some(&self.file)
    }
}
