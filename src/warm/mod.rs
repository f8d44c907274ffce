//! Warming the cache on purpose: `msfs warm PATH…` fetches files into the node's line cache
//! before anyone reads them, so that a job's first pass is served from the cache.
//!
//! The request travels as an ioctl on a file of the mount ([`abi`]): it works wherever the
//! mount is seen — a pod of the CSI plugin sees nothing else of msfs, no socket, no state
//! directory — and it costs the rest of the filesystem nothing (an extended attribute would
//! have put a round trip on every `ls -l`). msfs answers it by reading the asked range through
//! its cache without handing the bytes to the kernel. [`client`] is the command: it walks the
//! paths, warms the files a chunk at a time on a few threads, shows progress on a terminal and
//! sums up.

pub mod abi;
pub mod background;
pub mod client;
