//! A mounted backend: one store and prefix, shown as one directory under the mount root.

use std::sync::Arc;

use crate::config::BackendConfig;
use crate::store::ObjectStore;

#[derive(Debug)]
pub struct Backend {
    pub dir_name: String,
    pub store: Arc<dyn ObjectStore>,
    /// Key prefix of everything this backend shows; "" or ending with "/".
    pub prefix: String,
    pub readonly: bool,
    pub uid: u32,
    pub gid: u32,
    pub dir_perm: u16,
    pub file_perm: u16,
    /// Keys per LIST request; `None` lets the store choose.
    pub page_size: Option<u32>,
}

impl Backend {
    pub fn new(config: &BackendConfig, store: Arc<dyn ObjectStore>) -> Backend {
        Backend {
            dir_name: config.dir_name.clone(),
            store,
            prefix: config.prefix.clone(),
            readonly: config.readonly,
            uid: config.uid,
            gid: config.gid,
            dir_perm: config.dir_perm,
            file_perm: config.file_perm,
            page_size: (config.directory_page_size > 0).then_some(config.directory_page_size),
        }
    }

    /// The object key of `path` (a "/"-joined path inside the backend, "" for its root).
    pub fn key_of(&self, path: &str) -> String {
        format!("{}{}", self.prefix, path)
    }

    /// The listing prefix of directory `path`: its key followed by "/" (just the backend prefix
    /// for the backend root).
    pub fn dir_prefix_of(&self, path: &str) -> String {
        if path.is_empty() {
            self.prefix.clone()
        } else {
            format!("{}{}/", self.prefix, path)
        }
    }
}
