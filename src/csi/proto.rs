//! The CSI v1 messages and services, generated at build time from `proto/csi.proto`.
#![allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]

tonic::include_proto!("csi.v1");
