//! `NameFormat`: the `printf`-style name formats of PSEUDO directories and files, compiled once,
//! expanded and inverted. Separate because both the tree (is this name one of ours?) and the
//! listing (where does this name sort?) stand on it, and it is tested on its own against the
//! config's own expansion.

use crate::config::split_name_format;

/// A checked `printf`-style name format with one integer conversion (`dir_%08X`), compiled once.
/// It expands exactly like [`PseudoConfig::dir_name`](crate::config::PseudoConfig::dir_name)
/// (a unit test holds the two together) and, unlike it, can also be inverted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NameFormat {
    prefix: String,
    suffix: String,
    pub(super) radix: u64,
    upper: bool,
    pub(super) width: usize,
    pad: u8,
}

impl NameFormat {
    /// `None` when `fmt` is not a format the config accepts (the config parses it).
    pub(super) fn compile(fmt: &str) -> Option<NameFormat> {
        let (prefix, conversion, suffix) = split_name_format(fmt)?;
        let (radix, upper) = match conversion.conv {
            b'x' => (16, false),
            b'X' => (16, true),
            b'o' => (8, false),
            _ => (10, false),
        };
        Some(NameFormat {
            prefix,
            suffix,
            radix,
            upper,
            width: conversion.width,
            pad: if conversion.zero { b'0' } else { b' ' },
        })
    }

    pub(super) fn push(&self, value: u64, out: &mut String) {
        let digits: &[u8; 16] = if self.upper {
            b"0123456789ABCDEF"
        } else {
            b"0123456789abcdef"
        };
        let mut buf = [0u8; 64];
        let mut at = buf.len();
        let mut v = value;
        loop {
            at -= 1;
            buf[at] = digits[(v % self.radix) as usize];
            v /= self.radix;
            if v == 0 {
                break;
            }
        }
        out.push_str(&self.prefix);
        for _ in (buf.len() - at)..self.width {
            out.push(char::from(self.pad));
        }
        // Only ASCII digits were written.
        out.push_str(std::str::from_utf8(&buf[at..]).unwrap_or_default());
        out.push_str(&self.suffix);
    }

    /// Length of the digit field of `value` (before padding).
    pub(super) fn digits(&self, mut value: u64) -> usize {
        let mut n = 1;
        while value >= self.radix {
            value /= self.radix;
            n += 1;
        }
        n
    }

    /// The number whose name is exactly `name`, if any.
    pub(super) fn parse(&self, name: &str) -> Option<u64> {
        let field = name
            .strip_prefix(self.prefix.as_str())?
            .strip_suffix(self.suffix.as_str())?;
        let trimmed = field.trim_start_matches(char::from(self.pad));
        let value = if trimmed.is_empty() {
            0
        } else {
            u64::from_str_radix(trimmed, self.radix as u32).ok()?
        };
        let mut again = String::with_capacity(name.len());
        self.push(value, &mut again);
        (again == name).then_some(value)
    }
}
