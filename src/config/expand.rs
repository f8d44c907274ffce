//! Environment-variable expansion in string values: `$VAR`, `${VAR}`,
//! `${VAR:-default}` and `$$` for a literal `$`.
//!
//! Runs over the whole parsed tree before any key is read, so every string value
//! (and every built-in default, which goes through [`expand`] too) gets the same
//! rules. The environment arrives as a closure so tests never touch the process env.

use serde_json::Value;

use super::reader::{child_path, index_path};

/// Looks up one environment variable; `None` when unset.
pub(super) type Env<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// How deep `${A:-${B:-…}}` defaults may nest. Each level is a recursive call, so without a
/// bound a config value of a few thousand levels (~20 KB) overflowed the stack and aborted the
/// process instead of failing with a message; real configs use two or three levels.
const MAX_DEFAULT_NESTING: usize = 16;

/// Expands every variable reference in `input`.
///
/// An unset variable expands to the empty string, as in a shell. `${V:-d}` and
/// `${V:=d}` use `d` when `V` is unset or empty, `${V-d}` and `${V=d}` only when it
/// is unset (nothing is ever assigned); `d` may itself contain references. A `$`
/// not followed by a name, `{` or `$` is kept as is, so prices and regexes survive.
/// The error is a message for the operator; it never quotes a variable's value.
pub(super) fn expand(input: &str, env: &Env) -> Result<String, String> {
    expand_nested(input, env, 0)
}

/// [`expand`] of a default that sits `depth` defaults deep.
fn expand_nested(input: &str, env: &Env, depth: usize) -> Result<String, String> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(braced) = after.strip_prefix('{') {
            let close = closing_brace(braced).ok_or_else(|| {
                format!("unterminated \"${{\" in {input:?}; close it with \"}}\"")
            })?;
            out.push_str(&expand_braced(&braced[..close], env, depth)?);
            rest = &braced[close + 1..];
        } else {
            let len = name_len(after);
            if len == 0 {
                out.push('$');
                rest = after;
            } else {
                out.push_str(&env(&after[..len]).unwrap_or_default());
                rest = &after[len..];
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Expands every string in the tree in place. On failure returns the key path of
/// the offending value and the message.
pub(super) fn expand_tree(
    value: &mut Value,
    path: &str,
    env: &Env,
) -> Result<(), (String, String)> {
    match value {
        Value::String(s) => {
            // Most values hold no `$` at all; skip the copy for them.
            if s.contains('$') {
                *s = expand(s, env).map_err(|msg| (path.to_string(), msg))?;
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                expand_tree(item, &index_path(path, i), env)?;
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                expand_tree(item, &child_path(path, key), env)?;
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
    Ok(())
}

/// Length of a variable name at the start of `s` (`[A-Za-z_][A-Za-z0-9_]*`), 0 if none.
fn name_len(s: &str) -> usize {
    let bytes = s.as_bytes();
    match bytes.first() {
        Some(b) if b.is_ascii_alphabetic() || *b == b'_' => bytes
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
            .count(),
        _ => 0,
    }
}

/// Index of the `}` that closes a `${` whose body starts at `s`, skipping nested
/// `${…}` in defaults and `$$` escapes.
fn closing_brace(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut depth = 1usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'$' if bytes.get(i + 1) == Some(&b'$') => i += 1,
            b'$' if bytes.get(i + 1) == Some(&b'{') => {
                depth += 1;
                i += 1;
            }
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn expand_braced(body: &str, env: &Env, depth: usize) -> Result<String, String> {
    let len = name_len(body);
    if len == 0 {
        return Err(format!(
            "\"${{{body}}}\" is not a variable reference; names are letters, digits and '_'"
        ));
    }
    let value = env(&body[..len]);
    let op = &body[len..];
    if op.is_empty() {
        return Ok(value.unwrap_or_default());
    }
    let (when_empty_too, default) =
        if let Some(d) = op.strip_prefix(":-").or_else(|| op.strip_prefix(":=")) {
            (true, d)
        } else if let Some(d) = op.strip_prefix('-').or_else(|| op.strip_prefix('=')) {
            (false, d)
        } else {
            return Err(format!(
                "\"${{{body}}}\" is not supported; use ${{NAME}} or ${{NAME:-default}}"
            ));
        };
    match value {
        Some(v) if !(when_empty_too && v.is_empty()) => Ok(v),
        _ if depth >= MAX_DEFAULT_NESTING => Err(format!(
            "\"${{NAME:-default}}\" defaults nest more than {MAX_DEFAULT_NESTING} levels deep"
        )),
        _ => expand_nested(default, env, depth + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME" => Some("/home/u".into()),
            "EMPTY" => Some(String::new()),
            "PORT" => Some("9000".into()),
            _ => None,
        }
    }

    fn x(s: &str) -> String {
        expand(s, &env).expect("expands")
    }

    #[test]
    fn bare_and_braced_references_expand() {
        assert_eq!(x("$HOME/x"), "/home/u/x");
        assert_eq!(x("${HOME}x"), "/home/ux");
        assert_eq!(x("a${PORT}b$PORT"), "a9000b9000");
    }

    #[test]
    fn unset_variable_expands_to_empty() {
        assert_eq!(x("[$NOPE][${NOPE}]"), "[][]");
    }

    #[test]
    fn colon_dash_default_applies_when_unset_or_empty() {
        assert_eq!(x("${NOPE:-d}"), "d");
        assert_eq!(x("${EMPTY:-d}"), "d");
        assert_eq!(x("${PORT:-d}"), "9000");
        assert_eq!(x("${NOPE:=d}"), "d");
    }

    #[test]
    fn plain_dash_default_applies_only_when_unset() {
        assert_eq!(x("${NOPE-d}"), "d");
        assert_eq!(x("${EMPTY-d}"), "");
    }

    #[test]
    fn default_may_contain_references() {
        assert_eq!(x("${NOPE:-${HOME}/.aws/config}"), "/home/u/.aws/config");
        assert_eq!(x("${A:-${B:-${PORT}}}"), "9000");
    }

    #[test]
    fn double_dollar_is_a_literal_dollar() {
        assert_eq!(x("p$$w$$${PORT}"), "p$w$9000");
        assert_eq!(x("$$HOME"), "$HOME");
    }

    #[test]
    fn lone_dollar_is_kept() {
        assert_eq!(x("cost $5 $"), "cost $5 $");
    }

    #[test]
    fn unterminated_brace_is_an_error() {
        let err = expand("x${HOME", &env).expect_err("must fail");
        assert!(err.contains("unterminated"), "{err}");
    }

    #[test]
    fn bad_reference_is_an_error() {
        assert!(expand("${}", &env).is_err());
        assert!(expand("${HOME#x}", &env).is_err());
    }

    #[test]
    fn tree_expansion_reports_the_key_path() {
        let mut v: Value = serde_json::json!({"a": [{"b": "${HOME}"}, {"c": "${oops"}]});
        let (path, _) = expand_tree(&mut v, "", &env).expect_err("must fail");
        assert_eq!(path, "a[1].c");
        let mut v: Value = serde_json::json!({"a": ["$HOME", 5]});
        expand_tree(&mut v, "", &env).expect("expands");
        assert_eq!(v, serde_json::json!({"a": ["/home/u", 5]}));
    }
}
