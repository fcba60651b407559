//! The one size grammar: how every size setting of fastst is read.
//!
//! A size is a number of bytes, optionally followed by a unit: `KB`, `MB`,
//! `GB`, `TB` are powers of 1000 (as Hugging Face reads `max_shard_size`:
//! `"5GB"` is 5,000,000,000 bytes); `KiB`, `MiB`, `GiB`, `TiB` and the bare
//! letters `K`, `M`, `G`, `T` are powers of 1024 (as `dd` and the kernel
//! read `"512M"`); `B` is bytes. Units are read without regard to case, may
//! follow the number after blanks, and the number may have a fraction
//! (`"1.5GiB"`, rounded down to whole bytes). The Python package
//! (`fastst._settings.parse_size`) and the object-store client read sizes
//! through [`parse_size`] alone, so one string means the same bytes
//! everywhere.

use std::fmt;

/// Why a string is not a size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeGrammarError {
    /// What is wrong, e.g. "unknown unit \"XB\"".
    pub reason: String,
}

impl fmt::Display for SizeGrammarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for SizeGrammarError {}

/// The multiplier of a unit, compared without case.
fn unit_bytes(unit: &str) -> Option<u64> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        _ => return None,
    })
}

/// The bytes `text` names in the size grammar (see the module's doc).
pub fn parse_size(text: &str) -> Result<u64, SizeGrammarError> {
    let bad = |reason: String| SizeGrammarError { reason };
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim_start());
    let whole_digits = number
        .split('.')
        .all(|p| p.bytes().all(|b| b.is_ascii_digit()));
    if number.is_empty()
        || number.matches('.').count() > 1
        || number.starts_with('.') && number.len() == 1
        || number.ends_with('.')
        || !whole_digits
    {
        return Err(bad(format!(
            "{text:?} does not start with a number of bytes"
        )));
    }
    let scale = unit_bytes(unit).ok_or_else(|| {
        bad(format!(
            "unknown unit {unit:?} (KB/MB/GB/TB = powers of 1000; KiB/MiB/GiB/TiB or K/M/G/T = powers of 1024)"
        ))
    })?;
    let too_large = || bad(format!("{text:?} is more bytes than 2^64"));
    match number.split_once('.') {
        None => {
            let n: u128 = number.parse().map_err(|_| too_large())?;
            let bytes = n.checked_mul(u128::from(scale)).ok_or_else(too_large)?;
            u64::try_from(bytes).map_err(|_| too_large())
        }
        Some((int, frac)) => {
            // Exact: (int + frac / 10^len) * scale, rounded down.
            let digits = format!("{int}{frac}");
            let n: u128 = digits.parse().map_err(|_| too_large())?;
            let den = u32::try_from(frac.len())
                .ok()
                .and_then(|len| 10u128.checked_pow(len))
                .ok_or_else(too_large)?;
            let bytes = n.checked_mul(u128::from(scale)).ok_or_else(too_large)? / den;
            u64::try_from(bytes).map_err(|_| too_large())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn units_are_decimal_or_binary_by_name() {
        let cases: &[(&str, u64)] = &[
            ("4096", 4096),
            ("0", 0),
            ("5GB", 5_000_000_000),
            ("5 gb", 5_000_000_000),
            ("5GiB", 5 << 30),
            ("5G", 5 << 30),
            ("512M", 512 << 20),
            ("500MB", 500_000_000),
            ("1.5g", 3 << 29),
            ("0.5KB", 500),
            (".5K", 512),
            ("2kb", 2000),
            ("2KiB", 2048),
            ("7B", 7),
            ("1T", 1 << 40),
            ("  64MiB  ", 64 << 20),
            ("18446744073709551615", u64::MAX),
        ];
        for &(text, bytes) in cases {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn what_is_not_a_size() {
        for bad in [
            "",
            "lots",
            "-1",
            "-1M",
            "M",
            "5XB",
            "1..5G",
            "1.",
            ".",
            "nanG",
            "1e3",
            "5 G B",
            "18446744073709551616",
            "17179869184G",
            // Beyond u128 once scaled: an error, not an overflow panic.
            "340282366920938463463374607431768211455T",
            "99999999999999999999999999999999999999TiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
