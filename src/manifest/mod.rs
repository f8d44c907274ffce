//! The manifest engine: a snapshot of a backend's whole namespace, listed once in parallel and
//! kept on local disk, so that lookups and listings of a huge namespace need no LIST or HEAD.
//!
//! - [`format`]: the per-directory TSV files and `manifest_index.json` (the seed's layout).
//! - [`generate`]: lists a backend once with parallel listers (flat directories split into
//!   key ranges: [`split`]; pending work bounded: `queue`) and writes a manifest atomically
//!   (`output`).
//! - [`index`]: the redb index the TSV files are ingested into, so that a lookup or a page of a
//!   listing is a few B-tree reads; [`namespace`]: a manifest being served (the base snapshot,
//!   from the index or the TSV files, with the [`delta`] log's overlay of committed changes);
//!   `block`: the runs of entries the index stores; `bisect`: one name found in a sorted TSV
//!   before the index is built;
//!   [`registry`]: one open manifest per directory per process; `codec`: the binary form of an
//!   entry's attributes; [`progress`]: a generation's counters and status line; [`owners`]:
//!   rows' owners and modes read from object metadata (`--posix-metadata`).

mod bisect;
mod block;
mod codec;
pub mod delta;
pub mod format;
#[cfg(test)]
mod fuzz_tests;
pub mod generate;
pub mod index;
pub mod namespace;
mod output;
pub mod owners;
pub mod progress;
mod queue;
pub mod registry;
mod rows_ahead;
pub mod split;
