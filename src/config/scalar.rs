//! The value types a config key can hold, as `Deserialize` adapters over the parsed (and
//! env-expanded) tree, each with the message an operator sees when the value is of the wrong
//! kind.
//!
//! They are lenient where the file formats are: numbers and booleans are also accepted as
//! strings, because after env expansion `"${PORT}"` is a string even when it holds a number, and
//! a string key also takes a number (YAML reads `bucket_container_name: 2024` as one).

use serde::de::{Deserialize, Deserializer, Error as _};
use serde_json::Value;

use super::secret::Secret;

/// One adapter's plain value.
pub(super) trait Scalar {
    type Out;
    fn get(self) -> Self::Out;
}

/// `raw.key.value_or(default)` for a key that may be absent.
pub(super) trait OptScalar<T> {
    fn value(self) -> Option<T>;
    fn value_or(self, default: T) -> T;
}

impl<S: Scalar> OptScalar<S::Out> for Option<S> {
    fn value(self) -> Option<S::Out> {
        self.map(Scalar::get)
    }

    fn value_or(self, default: S::Out) -> S::Out {
        self.map_or(default, Scalar::get)
    }
}

/// Reads the key's value as a tree, then `parse` turns it into the adapter or a message.
fn from_tree<'de, D: Deserializer<'de>, T>(
    d: D,
    parse: impl FnOnce(&Value) -> Result<T, String>,
) -> Result<T, D::Error> {
    let value = Value::deserialize(d)?;
    parse(&value).map_err(D::Error::custom)
}

macro_rules! adapter {
    ($name:ident, $out:ty, $parse:expr) => {
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                from_tree(d, $parse).map($name)
            }
        }
        impl Scalar for $name {
            type Out = $out;
            fn get(self) -> $out {
                self.0
            }
        }
    };
}

/// A string (or a number, read as the digits written).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Text(pub(super) String);
adapter!(Text, String, text);

/// A credential: read like [`Text`], never quoted in a message.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SecretText(pub(super) Secret);
adapter!(SecretText, Secret, |v| text(v).map(Secret::new));

/// A scalar of any kind as its text (telemetry attribute values).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Label(pub(super) String);
adapter!(Label, String, |v| match v {
    Value::Bool(b) => Ok(b.to_string()),
    other => text(other),
});

/// `true` or `false`, also as a string in any case.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Flag(pub(super) bool);
adapter!(Flag, bool, |v| match v {
    Value::Bool(b) => Ok(*b),
    Value::String(s) if s.trim().eq_ignore_ascii_case("true") => Ok(true),
    Value::String(s) if s.trim().eq_ignore_ascii_case("false") => Ok(false),
    other => Err(format!("expected true or false, found {}", describe(other))),
});

/// A finite number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Real(pub(super) f64);
adapter!(Real, f64, |v| {
    let parsed = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    parsed
        .filter(|f| f.is_finite())
        .ok_or_else(|| format!("expected a number, found {}", describe(v)))
});

/// Permission bits written as octal digits: `"555"`, `"0755"` or the YAML number `555`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Perm(pub(super) u16);
adapter!(Perm, u16, |v| {
    let digits = match v {
        Value::String(s) => s.trim().to_string(),
        // A bare 555 is the digits the user typed, not the decimal value 555.
        Value::Number(n) if n.is_u64() => n.to_string(),
        other => {
            return Err(format!(
                "expected octal permission digits such as \"755\", found {}",
                describe(other)
            ));
        }
    };
    let valid = !digits.is_empty()
        && digits.len() <= 4
        && digits.bytes().all(|b| (b'0'..=b'7').contains(&b));
    match u16::from_str_radix(&digits, 8) {
        Ok(mode) if valid && mode <= 0o777 => Ok(mode),
        _ => Err(format!(
            "{digits:?} is not an octal permission between 000 and 777 (for example \"755\")"
        )),
    }
});

/// Integer types a key can be read into, with their upper bound for the error message.
pub(super) trait Int: TryFrom<u64> + Copy {
    const MAX: u64;
}

macro_rules! int {
    ($($t:ty),*) => {$(impl Int for $t { const MAX: u64 = <$t>::MAX as u64; })*};
}
int!(u8, u16, u32, u64, usize);

/// A non-negative whole number that fits `T`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Whole<T>(pub(super) T);

impl<'de, T: Int> Deserialize<'de> for Whole<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        from_tree(d, |v| {
            let n = whole(v)?;
            T::try_from(n)
                .map(Whole)
                .map_err(|_| format!("{n} is too large; at most {}", T::MAX))
        })
    }
}

impl<T> Scalar for Whole<T> {
    type Out = T;
    fn get(self) -> T {
        self.0
    }
}

fn text(v: &Value) -> Result<String, String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        // The kind only: this also reads secrets.
        other => Err(format!("expected a string, found {}", kind(other))),
    }
}

fn whole(v: &Value) -> Result<u64, String> {
    let parsed = match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    };
    match parsed {
        Some(n) => Ok(n),
        None if matches!(v, Value::String(s) if s.trim().is_empty()) => Err(
            "expected a whole number, found an empty string (is the environment variable set?)"
                .into(),
        ),
        None => Err(format!(
            "expected a non-negative whole number, found {}",
            describe(v)
        )),
    }
}

/// "a string", "a list", … for type errors.
pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The value itself for scalars (shortened), the kind otherwise. Only used for
/// keys that never hold secrets.
fn describe(v: &Value) -> String {
    match v {
        Value::String(s) if s.chars().count() > 40 => {
            let head: String = s.chars().take(40).collect();
            format!("\"{head}…\"")
        }
        Value::String(s) => format!("{s:?}"),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => kind(other).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read<T: for<'de> Deserialize<'de>>(v: Value) -> Result<T, String> {
        T::deserialize(v).map_err(|e| e.to_string())
    }

    #[test]
    fn numbers_and_flags_are_accepted_as_strings() {
        assert_eq!(read::<Whole<u32>>(json!(" 42 ")), Ok(Whole(42)));
        assert_eq!(read::<Flag>(json!("TRUE")), Ok(Flag(true)));
        assert_eq!(read::<Real>(json!("1.5")), Ok(Real(1.5)));
        assert_eq!(read::<Text>(json!(2024)), Ok(Text("2024".into())));
    }

    #[test]
    fn integral_floats_read_as_integers() {
        assert_eq!(read::<Whole<u64>>(json!(10.0)), Ok(Whole(10)));
        assert!(read::<Whole<u64>>(json!(10.5)).is_err());
    }

    #[test]
    fn negative_oversized_or_empty_integers_are_rejected() {
        assert!(
            read::<Whole<u64>>(json!(-1))
                .unwrap_err()
                .contains("non-negative")
        );
        assert_eq!(
            read::<Whole<u8>>(json!(300)),
            Err("300 is too large; at most 255".into())
        );
        assert!(
            read::<Whole<u16>>(json!(""))
                .unwrap_err()
                .contains("environment variable")
        );
    }

    #[test]
    fn perm_reads_octal_digits_from_strings_and_numbers() {
        assert_eq!(read::<Perm>(json!("555")), Ok(Perm(0o555)));
        assert_eq!(read::<Perm>(json!(755)), Ok(Perm(0o755)));
        assert_eq!(read::<Perm>(json!("0750")), Ok(Perm(0o750)));
        for bad in [json!("999"), json!(1777), json!("rwx"), json!(true)] {
            assert!(read::<Perm>(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_secret_of_the_wrong_kind_is_not_quoted() {
        let message = read::<SecretText>(json!(["hunter2"])).unwrap_err();
        assert_eq!(message, "expected a string, found a list");
        assert!(read::<Text>(json!(true)).is_err());
        assert_eq!(read::<Label>(json!(true)), Ok(Label("true".into())));
    }
}
