//! The manifest engine: a snapshot of a backend's whole namespace, listed once in parallel and
//! kept on local disk, so that lookups and listings of a huge namespace need no LIST or HEAD.
//!
//! - [`format`]: the per-directory TSV files and `manifest_index.json` (the seed's layout).

pub mod format;
