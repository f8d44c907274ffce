//! The id of a provisioned volume, which carries where the volume lives.
//!
//! CSI hands DeleteVolume (and ValidateVolumeCapabilities) nothing but the volume id and
//! secrets: no parameters, no volume context. So the id itself names the store, the bucket and
//! the prefix to empty, and whether to empty it at all:
//!
//! ```text
//! v1~MODE~REGION~ENDPOINT~BUCKET~PREFIX
//! v1~d~garage~http:%2F%2F127.0.0.1:3900~data~team%2Fpvc-0b5e…%2F
//! ```
//!
//! `MODE` is `d` (DeleteVolume removes the data) or `k` (`keepDataOnDelete`: it keeps it).
//! Every field is escaped so that the id stays one path component without `..` (node plugins
//! make it a directory name) and without `,` (it becomes a FUSE mount option): bytes other than
//! ASCII letters, digits, `.`, `:`, `_` and `-` are written `%XX`, and so is a `.` that follows
//! another. The encoding is canonical: an id that does not re-encode to itself is not ours.
//! An empty ENDPOINT is AWS's own. Ids longer than [`MAX_ID_BYTES`] are refused at creation.

use super::error::CsiError;

/// CSI's limit for string fields, which the node plugin enforces on volume ids.
pub const MAX_ID_BYTES: usize = 128;

const VERSION: &str = "v1";
const SEPARATOR: char = '~';

/// Where a provisioned volume's data lives, and what deleting it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeLocation {
    pub region: String,
    /// `None`: AWS's regional endpoint.
    pub endpoint: Option<String>,
    pub bucket: String,
    /// The volume's own prefix (ends with `/`).
    pub prefix: String,
    /// DeleteVolume leaves the objects in place.
    pub keep_data: bool,
}

impl VolumeLocation {
    /// The volume id; refused when longer than CSI allows, naming the parameter to shorten.
    pub fn encode(&self) -> Result<String, CsiError> {
        let id = self.encode_unchecked();
        if id.len() > MAX_ID_BYTES {
            // The longest of what the StorageClass sets is the one worth shortening.
            let parts = [
                ("prefix", self.prefix.len()),
                ("endpoint", self.endpoint.as_deref().map_or(0, str::len)),
                ("bucketName", self.bucket.len()),
            ];
            let longest = parts
                .iter()
                .max_by_key(|(_, len)| *len)
                .map_or("prefix", |(name, _)| name);
            return Err(CsiError::invalid(
                longest,
                format!(
                    "the volume id, which carries the region, endpoint, bucket and prefix of \
                     each volume, would be {} bytes; CSI allows {MAX_ID_BYTES}: shorten it",
                    id.len()
                ),
            ));
        }
        Ok(id)
    }

    fn encode_unchecked(&self) -> String {
        let mode = if self.keep_data { "k" } else { "d" };
        [
            VERSION,
            mode,
            &escape(&self.region),
            &escape(self.endpoint.as_deref().unwrap_or("")),
            &escape(&self.bucket),
            &escape(&self.prefix),
        ]
        .join(&SEPARATOR.to_string())
    }

    /// The location an id names; `None` for anything this controller did not create.
    pub fn decode(id: &str) -> Option<VolumeLocation> {
        let fields: Vec<&str> = id.split(SEPARATOR).collect();
        let [version, mode, region, endpoint, bucket, prefix] = fields.as_slice() else {
            return None;
        };
        if *version != VERSION {
            return None;
        }
        let keep_data = match *mode {
            "d" => false,
            "k" => true,
            _ => return None,
        };
        let endpoint = unescape(endpoint)?;
        let location = VolumeLocation {
            region: unescape(region)?,
            endpoint: (!endpoint.is_empty()).then_some(endpoint),
            bucket: unescape(bucket)?,
            prefix: unescape(prefix)?,
            keep_data,
        };
        let sane = !location.bucket.is_empty()
            && location.prefix.ends_with('/')
            && location.encode_unchecked() == id;
        sane.then_some(location)
    }
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut previous = 0u8;
    for &byte in text.as_bytes() {
        let plain = byte.is_ascii_alphanumeric()
            || matches!(byte, b':' | b'_' | b'-')
            || (byte == b'.' && previous != b'.');
        if plain {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
        previous = byte;
    }
    out
}

fn unescape(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location(prefix: &str) -> VolumeLocation {
        VolumeLocation {
            region: "garage".into(),
            endpoint: Some("http://127.0.0.1:3900".into()),
            bucket: "data".into(),
            prefix: prefix.into(),
            keep_data: false,
        }
    }

    #[test]
    fn ids_round_trip_and_stay_one_safe_path_component() {
        for prefix in ["pvc-1/", "team/a..b/pvc-2/", "sp ace,comma~tilde%/", "é/"] {
            let original = location(prefix);
            let id = original.encode().expect("short enough");
            assert!(
                !id.contains('/') && !id.contains("..") && !id.contains(','),
                "{id}"
            );
            assert_eq!(VolumeLocation::decode(&id), Some(original), "{id}");
        }
        let aws = VolumeLocation {
            endpoint: None,
            keep_data: true,
            region: "us-east-1".into(),
            ..location("pvc-3/")
        };
        let id = aws.encode().expect("id");
        assert_eq!(id, "v1~k~us-east-1~~data~pvc-3%2F");
        assert_eq!(VolumeLocation::decode(&id), Some(aws));
    }

    #[test]
    fn foreign_or_non_canonical_ids_are_not_ours() {
        for id in [
            "",
            "pv-static",
            "v2~d~r~~b~p%2F",
            "v1~x~r~~b~p%2F",
            "v1~d~r~~~p%2F",
            "v1~d~r~~b~p",
            "v1~d~r~~b~p%2f",
            "v1~d~r~~b~p%2F~extra",
            "v1~d~r~~b~p%ZZ",
        ] {
            assert_eq!(VolumeLocation::decode(id), None, "{id}");
        }
    }

    #[test]
    fn an_id_too_long_for_csi_names_the_longest_parameter() {
        let error = location(&format!("{}/", "p".repeat(120)))
            .encode()
            .expect_err("too long")
            .to_string();
        assert!(
            error.starts_with("prefix: ") && error.contains("128"),
            "{error}"
        );
    }
}
