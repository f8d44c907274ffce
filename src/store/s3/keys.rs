//! Keys as S3 carries them: decoded from a listing made with `encoding-type=url`,
//! percent-encoded into `x-amz-copy-source`, and the cache scope a store's id and signer make.

use aws_sdk_s3::types::EncodingType;

/// A key (or prefix, or marker) as a listing returned it: decoded when the response says it
/// applied `encoding-type=url`. A server that ignores the request (not every S3-compatible one
/// supports it) leaves EncodingType out, and its keys are taken as they are.
pub(super) fn listed_key(text: &str, encoding: Option<&EncodingType>) -> Option<String> {
    match encoding {
        Some(EncodingType::Url) => decode_listed_key(text),
        _ => Some(text.to_string()),
    }
}

/// A key from a listing made with `encoding-type=url`: `+` is a space and `%XX` a byte
/// (form encoding, as S3 writes it). `None` for text that does not decode to UTF-8, which no key
/// can be.
pub fn decode_listed_key(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// `id` narrowed by a hash of `principal` that every build computes alike (std's
/// `DefaultHasher` promises no such thing): a persistent cache finds its lines by this scope
/// after an upgrade.
pub(super) fn cache_scope_of(id: &str, principal: &str) -> String {
    use md5::Digest;
    let digest = md5::Md5::digest(principal.as_bytes());
    let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{id}#{hash}")
}

/// Percent-encodes a key for `x-amz-copy-source`, keeping `/` and RFC 3986 unreserved bytes.
pub(super) fn percent_encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for byte in key.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{cache_scope_of, decode_listed_key, percent_encode_key};

    #[test]
    fn the_cache_scope_is_the_same_in_every_build_and_differs_by_signer() {
        // The first 8 bytes of MD5("AKIDEXAMPLE"): fixed, whatever the build.
        let scope = cache_scope_of("s3:http://h/b", "AKIDEXAMPLE");
        assert_eq!(scope, "s3:http://h/b#897bd3e07abcb8d4");
        assert_ne!(scope, cache_scope_of("s3:http://h/b", "anonymous"));
    }

    #[test]
    fn listed_keys_decode_form_encoding() {
        assert_eq!(
            decode_listed_key("a+b%2Bc%07%C3%BC/x").as_deref(),
            Some("a b+c\u{7}ü/x")
        );
        assert_eq!(
            decode_listed_key("plain/key.txt").as_deref(),
            Some("plain/key.txt")
        );
        assert_eq!(decode_listed_key("bad%zz"), None);
        assert_eq!(decode_listed_key("cut%4"), None);
        assert_eq!(decode_listed_key("%ff"), None, "not UTF-8");
    }

    #[test]
    fn copy_source_keys_are_percent_encoded_except_slashes() {
        assert_eq!(percent_encode_key("a/b c/ü+.txt"), "a/b%20c/%C3%BC%2B.txt");
    }
}
