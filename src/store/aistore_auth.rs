//! AIStore's AuthN token on every request of an AIStore backend: `Authorization: Bearer
//! <token>`, which AIStore's S3 API accepts from an unsigned client (msfs's AIStore requests are
//! unsigned: the token is the credential).
//!
//! The token comes from `AIStore.authn_token`, or else from `AIStore.authn_token_file` (where
//! `ais auth login` writes it), read again whenever the file changes, so that a renewed token
//! takes effect without a remount. A missing file means no token: the cluster may not ask for
//! one.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextMut;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::error::BoxError;

use crate::config::{AIStoreOptions, Secret};

/// Where the token comes from.
#[derive(Debug)]
pub(super) enum TokenSource {
    Fixed(Secret),
    File {
        path: PathBuf,
        /// The last read: the file's modification time and its token.
        read: Mutex<Option<(SystemTime, Option<Secret>)>>,
    },
}

impl TokenSource {
    /// The token source an AIStore backend's options name, if any.
    pub(super) fn of(options: &AIStoreOptions) -> Option<TokenSource> {
        match (&options.authn_token, &options.authn_token_file) {
            (Some(token), _) => Some(TokenSource::Fixed(token.clone())),
            (None, Some(path)) => Some(TokenSource::File {
                path: path.clone(),
                read: Mutex::new(None),
            }),
            (None, None) => None,
        }
    }

    /// The token to send now, if there is one.
    pub(super) fn token(&self) -> Option<Secret> {
        match self {
            TokenSource::Fixed(token) => Some(token.clone()),
            TokenSource::File { path, read } => {
                // One stat per request; the file is read again only when it changed.
                let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
                let mut read = read
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some((when, token)) = read.as_ref()
                    && *when == modified
                {
                    return token.clone();
                }
                let token = std::fs::read_to_string(path)
                    .ok()
                    .map(|text| text.trim().to_string())
                    .filter(|text| !text.is_empty())
                    .map(Secret::new);
                *read = Some((modified, token.clone()));
                token
            }
        }
    }
}

/// Sets the bearer token on each request as it leaves.
#[derive(Debug)]
pub(super) struct BearerToken(pub(super) TokenSource);

impl Intercept for BearerToken {
    fn name(&self) -> &'static str {
        "AIStoreBearerToken"
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(token) = self.0.token() {
            context
                .request_mut()
                .headers_mut()
                .insert("authorization", format!("Bearer {}", token.expose()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn options(token: Option<&str>, file: Option<PathBuf>) -> AIStoreOptions {
        AIStoreOptions {
            authn_token: token.map(Secret::new),
            authn_token_file: file,
            timeout: Duration::from_secs(30),
            manifest_gen_backend: None,
        }
    }

    #[test]
    fn a_token_in_the_config_wins_over_the_file() {
        let source = TokenSource::of(&options(Some("abc"), Some("/nonexistent".into())));
        assert_eq!(source.and_then(|s| s.token()), Some(Secret::new("abc")));
    }

    #[test]
    fn the_file_is_read_again_when_it_changes_and_a_missing_one_sends_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("auth.token");
        let source = TokenSource::of(&options(None, Some(path.clone()))).expect("a source");
        assert_eq!(source.token(), None, "no file, no token");
        std::fs::write(&path, "first\n").expect("write");
        assert_eq!(source.token(), Some(Secret::new("first")));
        std::fs::write(&path, "second").expect("write");
        // A modification time the filesystem may not tell apart from the first write's.
        let later = SystemTime::now() + Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(later))
            .expect("set mtime");
        assert_eq!(source.token(), Some(Secret::new("second")));
    }

    #[test]
    fn no_token_and_no_file_is_no_source() {
        assert!(TokenSource::of(&options(None, None)).is_none());
    }
}
