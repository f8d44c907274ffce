//! Puts COUNT empty objects into an S3 bucket, `dNNNN/fNNNNNNN` over DIRS prefixes, 64 at a time:
//! the namespace `bench/generate-vs-listing.py` lists (a Python client puts a few hundred a second
//! on 2 cores, this one as many as the server takes).
//!
//! Usage: `put_empty ENDPOINT BUCKET COUNT DIRS` with `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`
//! set.

#[path = "common/env_client.rs"]
mod env_client;

use futures::stream::{self, StreamExt, TryStreamExt};

const IN_FLIGHT: usize = 64;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [endpoint, bucket, count, dirs] =
        <[String; 4]>::try_from(args).map_err(|_| "usage: put_empty ENDPOINT BUCKET COUNT DIRS")?;
    let (count, dirs): (u64, u64) = (count.parse()?, dirs.parse()?);
    let client = env_client::client_from_env(&endpoint)?;
    let started = std::time::Instant::now();
    stream::iter(0..count)
        .map(|i| {
            let (client, bucket) = (&client, &bucket);
            async move {
                let key = format!("d{:04}/f{i:07}", i % dirs.max(1));
                client.put_object().bucket(bucket).key(key).send().await?;
                if (i + 1) % 100_000 == 0 {
                    println!(
                        "{} objects, {:.0}/s",
                        i + 1,
                        (i + 1) as f64 / started.elapsed().as_secs_f64()
                    );
                }
                Ok::<(), Box<dyn std::error::Error>>(())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await?;
    println!(
        "{count} objects in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
