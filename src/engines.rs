//! `Engines`: the process-wide parts every mount shares, built once and passed in.
//!
//! A daemon holds one mount and the CSI plugin many; both build one `Engines` and hand it to each
//! `Fs`, so that engines with node-wide limits (the line cache, commit workers, the manifest store)
//! are shared rather than multiplied per volume.

use std::sync::Arc;

use crate::cache::{DirectReader, ObjectReader};

#[derive(Clone)]
pub struct Engines {
    /// Where object bytes come from.
    pub reader: Arc<dyn ObjectReader>,
}

impl Engines {
    pub fn new() -> Engines {
        Engines {
            reader: Arc::new(DirectReader),
        }
    }
}

impl Default for Engines {
    fn default() -> Self {
        Engines::new()
    }
}
