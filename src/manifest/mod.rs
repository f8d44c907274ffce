//! The manifest engine: a snapshot of a backend's whole namespace, listed once in parallel and
//! kept on local disk, so that lookups and listings of a huge namespace need no LIST or HEAD.
//!
//! - [`format`]: the per-directory TSV files and `manifest_index.json` (the seed's layout).
//! - [`generate`]: lists a backend once with parallel listers (flat directories split into
//!   key ranges: [`split`]; pending work bounded: `queue`) and writes a manifest atomically
//!   (`output`).

mod codec;
pub mod delta;
pub mod format;
#[cfg(test)]
mod fuzz_tests;
pub mod generate;
pub mod index;
pub mod namespace;
mod output;
pub mod progress;
mod queue;
pub mod registry;
pub mod split;
