//! Uploads a local directory tree to an S3 bucket, one object per file, keyed by relative path.
//! Used by `scripts/demo.sh` to seed sample data.
//!
//! Usage: `upload_dir ENDPOINT BUCKET DIR` with `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` set.

#[path = "common/env_client.rs"]
mod env_client;

use std::path::{Path, PathBuf};

use aws_sdk_s3::primitives::ByteStream;

fn files_under(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [endpoint, bucket, dir] =
        <[String; 3]>::try_from(args).map_err(|_| "usage: upload_dir ENDPOINT BUCKET DIR")?;
    let client = env_client::client_from_env(&endpoint)?;
    let root = PathBuf::from(dir);
    for path in files_under(&root)? {
        let key = path
            .strip_prefix(&root)?
            .to_str()
            .ok_or("file names must be UTF-8")?
            .to_string();
        client
            .put_object()
            .bucket(&bucket)
            .key(&key)
            .body(ByteStream::from(std::fs::read(&path)?))
            .send()
            .await?;
        println!("uploaded {key}");
    }
    Ok(())
}
