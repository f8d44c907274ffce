//! What the bucket must hold once the soak is over, checked through the S3 API: each writer's
//! directory exactly as its model says (its `dir/` marker and its files, nothing else, every
//! byte), and the seeded tree exactly as it was seeded.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::Garage;

use super::content::SeedFile;
use super::writer::Model;

/// Polls until `dir_key` (e.g. `alpha/w0/`) of `bucket` matches `model` — background commits
/// land shortly after the last close — and fails with what differed after `limit`.
pub async fn wait_until_stored(
    garage: &Garage,
    bucket: &str,
    dir_key: &str,
    model: &Model,
    limit: Duration,
) {
    let deadline = Instant::now() + limit;
    loop {
        match stored(garage, bucket, dir_key, model).await {
            Ok(()) => return,
            Err(e) if Instant::now() >= deadline => {
                panic!("not stored after {limit:?}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// Whether `dir_key` of `bucket` holds exactly the marker and the files of `model`; if not, how
/// it differs.
pub async fn stored(
    garage: &Garage,
    bucket: &str,
    dir_key: &str,
    model: &Model,
) -> Result<(), String> {
    let listed: BTreeSet<String> = garage
        .list_keys(bucket, dir_key)
        .await
        .into_iter()
        .collect();
    let expected: BTreeSet<String> = std::iter::once(dir_key.to_string())
        .chain(model.keys().map(|name| format!("{dir_key}{name}")))
        .collect();
    if listed != expected {
        return Err(format!(
            "s3://{bucket}/{dir_key}: missing {:?}, unexpected {:?}",
            expected.difference(&listed).collect::<Vec<_>>(),
            listed.difference(&expected).collect::<Vec<_>>()
        ));
    }
    for (name, body) in model {
        let key = format!("{dir_key}{name}");
        let got = garage.get_object(bucket, &key).await;
        if got != *body {
            let differing = got.iter().zip(body).filter(|(a, b)| a != b).count();
            return Err(format!(
                "s3://{bucket}/{key}: {} bytes stored, {} expected, {differing} of the common \
                 ones differ",
                got.len(),
                body.len()
            ));
        }
    }
    Ok(())
}

/// The seeded tree under `prefix` still lists exactly the seeded keys: the readers changed
/// nothing and nothing strayed into it.
pub async fn assert_seed_untouched(
    garage: &Garage,
    bucket: &str,
    prefix: &str,
    files: &[SeedFile],
) {
    let listed: BTreeSet<String> = garage
        .list_keys(bucket, &format!("{prefix}seed/"))
        .await
        .into_iter()
        .collect();
    let expected: BTreeSet<String> = files
        .iter()
        .map(|f| format!("{prefix}{}", f.path))
        .collect();
    assert!(
        listed == expected,
        "s3://{bucket}/{prefix}seed/ changed: missing {:?}, unexpected {:?}",
        expected.difference(&listed).collect::<Vec<_>>(),
        listed.difference(&expected).collect::<Vec<_>>()
    );
}
