//! The integration tests, one binary: each module is one area, run against a real garage S3
//! server on 127.0.0.1, real FUSE mounts and real gRPC calls on the CSI socket (the fixtures
//! are in `common`). Compiled once, the fixtures are shared by every module.
//!
//! One area: `cargo nextest run --locked --test it takeover::`; one test: its full name.

mod common;

mod cache_mount;
mod config_errors;
mod csi_cache;
mod csi_controller;
mod csi_crash;
mod csi_node;
mod csi_permissions;
mod csi_sanity;
mod csi_shared_cache;
mod csi_sts;
mod csi_takeover;
mod deploy_chart;
mod fault_proxy_smoke;
mod faults;
mod fd_holder;
mod fuse_io_uring;
mod harness_smoke;
mod hostile_keys;
mod hostile_workloads;
mod listing_races;
mod logging;
mod man_pages;
mod manifest_generate;
mod manifest_mount;
mod memory_target;
mod metrics_endpoint;
mod model_fuse;
mod mount_lifecycle;
mod one_put_per_file;
mod otlp_export;
mod passthrough;
mod permissions;
mod posix_metadata;
mod read_mount;
mod reload;
mod secrets_redaction;
mod server_outage;
mod shared_cache;
mod soak;
mod stall_watchdog;
mod subtree_listing;
mod synthetic_backends;
mod takeover;
mod write_conflict;
mod write_faults;
mod write_mount;
mod writeback_cache;
