//! The one error type of the config module: every way finding, reading or
//! validating a configuration file can fail, each naming the file involved.

use std::path::PathBuf;

/// Why a configuration could not be found or loaded.
///
/// Messages name the file and, for content problems, the key path inside it
/// (`backends[1].prefix`), so an operator can go straight to the offending line.
/// No variant ever carries a secret value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No candidate file exists. `searched` lists every path tried, in order; an
    /// explicit path (argument or `$MSC_CONFIG`) that does not exist is the only entry.
    #[error("{}", not_found_message(searched))]
    NotFound { searched: Vec<PathBuf> },

    /// The file exists but could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file is not well-formed YAML or JSON (or not UTF-8).
    #[error("{}: {message}", path.display())]
    Syntax { path: PathBuf, message: String },

    /// The file name does not end in `.yaml`, `.yml` or `.json`, so the format is unknown.
    #[error(
        "{}: unsupported config file extension; use .yaml, .yml or .json",
        path.display()
    )]
    UnsupportedFormat { path: PathBuf },

    /// The file parsed, but a value is missing, of the wrong type or out of range.
    #[error("{}: {key}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        key: String,
        message: String,
    },
}

fn not_found_message(searched: &[PathBuf]) -> String {
    match searched {
        [only] => format!("config file {} does not exist", only.display()),
        _ => {
            let list: Vec<String> = searched.iter().map(|p| p.display().to_string()).collect();
            format!(
                "no config file found; give one on the command line or in $MSC_CONFIG (searched: {})",
                list.join(", ")
            )
        }
    }
}
