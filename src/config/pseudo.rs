//! The `PSEUDO:` sub-section (a generated tree for benchmarks) and the printf-style
//! name formats it uses, which only this module knows how to check and expand.

use std::time::Duration;

use super::backend::positive;
use super::defaults as d;
use super::error::ConfigError;
use super::raw;
use super::reader::Place;
use super::scalar::{OptScalar, Whole};
use super::types::{PseudoConfig, PseudoLatencies};

pub(super) fn parse_pseudo(raw: raw::Pseudo, s: &Place<'_>) -> Result<PseudoConfig, ConfigError> {
    let dir_name_format = s.text_or(
        "dir_name_format",
        raw.dir_name_format,
        d::PSEUDO_DIR_NAME_FORMAT,
    )?;
    check_format(s, "dir_name_format", &dir_name_format)?;
    let file_name_format = s.text_or(
        "file_name_format",
        raw.file_name_format,
        d::PSEUDO_FILE_NAME_FORMAT,
    )?;
    check_format(s, "file_name_format", &file_name_format)?;
    // Listings interleave nothing: every generated directory must sort before every file.
    if format_name(&dir_name_format, 0) >= format_name(&file_name_format, 0) {
        return Err(s.invalid(
            "file_name_format",
            "generated directory names must sort before generated file names",
        ));
    }
    let files_at_depth = [
        raw.files_at_depth_0,
        raw.files_at_depth_1,
        raw.files_at_depth_2,
        raw.files_at_depth_3,
    ]
    .map(|n| n.value_or(0));
    let subdirectories_at_depth = [
        raw.subdirectories_at_depth_0,
        raw.subdirectories_at_depth_1,
        raw.subdirectories_at_depth_2,
    ]
    .map(|n| n.value_or(0));
    check_shape(s, &files_at_depth, &subdirectories_at_depth)?;
    let ms = |given: Option<Whole<u64>>| Duration::from_millis(given.value_or(0));
    Ok(PseudoConfig {
        dir_name_format,
        file_name_format,
        dir_starting_number: raw.dir_starting_number.value_or(0),
        file_starting_number: raw.file_starting_number.value_or(0),
        file_size: raw.file_size.value_or(0),
        files_at_depth,
        subdirectories_at_depth,
        max_list_page_size: positive(
            s,
            "max_list_page_size",
            raw.max_list_page_size,
            d::PSEUDO_MAX_LIST_PAGE_SIZE,
        )?,
        min_latency: PseudoLatencies {
            delete_file: ms(raw.min_latency_delete_file),
            list_directory: ms(raw.min_latency_list_directory),
            list_objects: ms(raw.min_latency_list_objects),
            read_file: ms(raw.min_latency_read_file),
            stat_directory: ms(raw.min_latency_stat_directory),
            stat_file: ms(raw.min_latency_stat_file),
        },
    })
}

impl PseudoConfig {
    /// Name of the sub-directory numbered `n` (counting from `dir_starting_number`).
    pub fn dir_name(&self, n: u64) -> String {
        format_name(
            &self.dir_name_format,
            self.dir_starting_number.saturating_add(n),
        )
    }

    /// Name of the file numbered `n` (counting from `file_starting_number`).
    pub fn file_name(&self, n: u64) -> String {
        format_name(
            &self.file_name_format,
            self.file_starting_number.saturating_add(n),
        )
    }
}

/// Files or sub-directories below a level that has no sub-directories could never
/// be reached; the Go implementation rejects those shapes and so do we.
fn check_shape(s: &Place<'_>, files: &[u32; 4], subdirs: &[u32; 3]) -> Result<(), ConfigError> {
    for depth in 0..3 {
        let below_files = files[depth + 1..].iter().any(|&n| n > 0);
        let below_dirs = subdirs[depth + 1..].iter().any(|&n| n > 0);
        if subdirs[depth] == 0 {
            if below_files || below_dirs {
                return Err(s.invalid(
                    &format!("subdirectories_at_depth_{depth}"),
                    "is 0, so deeper files_at_depth_* and subdirectories_at_depth_* must be 0 too",
                ));
            }
            return Ok(());
        }
        let next_dirs = subdirs.get(depth + 1).copied().unwrap_or(0);
        if files[depth + 1] == 0 && next_dirs == 0 {
            return Err(s.invalid(
                &format!("subdirectories_at_depth_{depth}"),
                format!(
                    "is not 0, so depth {} needs files or sub-directories",
                    depth + 1
                ),
            ));
        }
    }
    Ok(())
}

/// A conversion: `%` `[0]` `[width]` one of `d u x X o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameConversion {
    /// Pad with `0` rather than spaces.
    pub zero: bool,
    pub width: usize,
    /// `d`, `u`, `x`, `X` or `o`.
    pub conv: u8,
}

/// A name format the config accepts, split at its one conversion: the literal before it, the
/// conversion and the literal after it (`%%` unescaped in both); `None` for any other format.
/// The PSEUDO store compiles its names from this, so the two never parse formats two ways.
pub fn split_name_format(fmt: &str) -> Option<(String, NameConversion, String)> {
    split_checked(fmt).ok()
}

/// [`split_name_format`], or what is wrong with `fmt`.
fn split_checked(fmt: &str) -> Result<(String, NameConversion, String), String> {
    let Some((literal, spec, rest)) = next_spec(fmt)? else {
        return Err("needs exactly one integer conversion such as %08X".into());
    };
    if next_spec(rest)?.is_some() {
        return Err("has more than one conversion".into());
    }
    if literal.contains('/') || rest.contains('/') {
        return Err("names must not contain \"/\"".into());
    }
    Ok((literal, spec, rest.replace("%%", "%")))
}

/// Splits a format into (literal before, spec, rest) at its first conversion; `%%`
/// is a literal percent sign.
fn next_spec(fmt: &str) -> Result<Option<(String, NameConversion, &str)>, String> {
    let bytes = fmt.as_bytes();
    let mut literal = String::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            let ch_len = fmt[i..].chars().next().map_or(1, char::len_utf8);
            literal.push_str(&fmt[i..i + ch_len]);
            i += ch_len;
            continue;
        }
        if bytes.get(i + 1) == Some(&b'%') {
            literal.push('%');
            i += 2;
            continue;
        }
        let mut j = i + 1;
        let zero = bytes.get(j) == Some(&b'0');
        if zero {
            j += 1;
        }
        let width_start = j;
        while bytes.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        // A width too long for usize is too large, not absent: `unwrap_or(0)` let
        // "%18447000000000000000d" through as a width of 0.
        let width = match &fmt[width_start..j] {
            "" => 0,
            digits => digits.parse::<usize>().unwrap_or(usize::MAX),
        };
        if width > 64 {
            return Err("field width is larger than 64".into());
        }
        return match bytes.get(j) {
            Some(&conv) if b"duxXo".contains(&conv) => Ok(Some((
                literal,
                NameConversion { zero, width, conv },
                &fmt[j + 1..],
            ))),
            _ => Err("a conversion must look like %d, %x, %X, %o or %08X".into()),
        };
    }
    Ok(None)
}

fn check_format(s: &Place<'_>, key: &str, fmt: &str) -> Result<(), ConfigError> {
    split_checked(fmt)
        .map(drop)
        .map_err(|m| s.invalid(key, format!("{fmt:?}: {m}")))
}

/// Expands a format already accepted by `check_format`.
fn format_name(fmt: &str, n: u64) -> String {
    let Ok((mut out, spec, rest)) = split_checked(fmt) else {
        return fmt.to_string();
    };
    let digits = match spec.conv {
        b'x' => format!("{n:x}"),
        b'X' => format!("{n:X}"),
        b'o' => format!("{n:o}"),
        _ => n.to_string(),
    };
    let pad = spec.width.saturating_sub(digits.len());
    out.extend(std::iter::repeat_n(if spec.zero { '0' } else { ' ' }, pad));
    out.push_str(&digits);
    out.push_str(&rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_expand_like_printf() {
        assert_eq!(format_name("dir_%08X", 255), "dir_000000FF");
        assert_eq!(format_name("f%d.bin", 7), "f7.bin");
        assert_eq!(format_name("%%%4x%%", 10), "%   a%");
    }
}
