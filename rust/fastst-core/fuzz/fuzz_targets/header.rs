//! Fuzzes the header parser with whole files: the length prefix, the JSON
//! and the layout rules. Any input must give Ok or an Error, never a panic,
//! an abort or an allocation driven by a claimed size.
#![no_main]

use fastst_core::{check_prefix, Header, DEFAULT_HEADER_CAP};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let file_len = data.len() as u64;
    let Ok(n) = check_prefix(data, file_len, DEFAULT_HEADER_CAP) else {
        return;
    };
    let end = 8 + n as usize;
    if let Ok(header) = Header::parse(&data[8..end], file_len - 8 - n) {
        // Everything a valid header promises must hold.
        let mut covered = 0u64;
        for t in header.tensors() {
            assert_eq!(t.begin, covered);
            covered = t.end;
            assert!(header.get(&t.name).is_some());
        }
        assert_eq!(covered, header.buffer_len());
    }
});
