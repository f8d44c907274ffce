//! msfs: mounts S3 and S3-compatible buckets as a filesystem.
//!
//! Layers, top to bottom (see docs/ARCHITECTURE.md): `fuse` (kernel adapter) → `fs` (POSIX
//! view) → `cache` (the read seam), `write` (the write engine) and `manifest` (namespace
//! snapshots) → `store` (object stores). `config` parses the configuration once; `daemon` runs
//! one mount and `csi` the node plugin's; `holder` keeps FUSE connections alive across them;
//! `engines` holds what all mounts of a process share; `memory` sets the process's one memory
//! target and divides it among them.

pub mod cache;
pub mod cli;
pub mod config;
pub mod csi;
pub mod daemon;
pub mod engines;
#[cfg(test)]
mod format_fixtures;
pub mod framed_log;
pub mod fs;
pub mod fuse;
pub mod holder;
pub mod malloc;
pub mod manifest;
pub mod memory;
pub mod private_dir;
pub mod residency;
pub mod shared_cache;
pub mod store;
pub mod telemetry;
pub mod warm;
pub mod write;
