//! The "physical limit" client of `bench/`: reads and writes objects straight on an S3 server with
//! a tight loop of requests — no filesystem, no cache, no copies — so that every benchmark can
//! report msfs as a fraction of what the server delivers for the same bytes at the same
//! concurrency: ranged GETs for reads; PutObject per small file and a multipart upload (8 MiB
//! parts, 4 in flight, as msfs commits a large file) for writes; DeleteObject per unlink.
//! It also seeds the benchmark data and gives the harness what it needs around a write cell:
//! server-side copies, listings with sizes and ETags, and byte ranges to check what was written.
//!
//! Credentials come from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` (and `AWS_REGION`), the
//! endpoint from `--endpoint` or `AWS_ENDPOINT`; requests are path-style. Every command prints one
//! JSON object on stdout: `{"command", "bytes", "seconds", "requests", "concurrency", ...}`, where
//! `seconds` covers only the timed part (setup such as HEAD or LIST of the inputs is excluded).
//!
//! ```text
//! raw_read --bucket B read    --key K [--offset O] [--length L] --request-size S --concurrency C
//! raw_read --bucket B random  --key K --request-size S --requests N --concurrency C [--seed X]
//! raw_read --bucket B objects --prefix P [--limit N] [--request-size S] [--bytes T] --concurrency C
//! raw_read --bucket B list    --prefix P [--delimiter /] [--keys [--modified]]
//! raw_read --bucket B watch   [--prefix P] [--first-ms M] [--last-ms M]
//! raw_read --bucket B ttfb    --key K
//! raw_read --bucket B seed    --size S [--part-size P] [--concurrency C] (KEY... | --keys-file F)
//! raw_read --bucket B put-objects --prefix P --count N --size S --concurrency C
//! raw_read --bucket B put-large   --key K --size S [--part-size P] [--concurrency C]
//! raw_read --bucket B delete  --prefix P --concurrency C
//! raw_read --bucket B copy    --source K --key K2
//! raw_read --bucket B fetch   --key K [--range OFFSET:LENGTH]... --out FILE
//! ```
//!
//! Written bytes come from a pool of pseudo-random bytes generated before the clock starts; each
//! object (and each 1 MiB of a large one) is a different window of it, so the server can neither
//! compress nor deduplicate them, and the timed part only sends.

#[path = "common/env_client.rs"]
mod env_client;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use futures::stream::{self, StreamExt, TryStreamExt};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser)]
#[command(
    name = "raw_read",
    about = "Tight S3 reader and writer (and seeder) for msfs benchmarks"
)]
struct Cli {
    /// S3 endpoint URL.
    #[arg(long, env = "AWS_ENDPOINT")]
    endpoint: String,
    #[arg(long)]
    bucket: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Read one byte range of an object as consecutive ranged GETs, `concurrency` in flight.
    Read {
        #[arg(long)]
        key: String,
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Bytes to read; default: to the end of the object.
        #[arg(long)]
        length: Option<u64>,
        #[arg(long)]
        request_size: u64,
        #[arg(long)]
        concurrency: usize,
    },
    /// Ranged GETs at random offsets aligned to `request_size` (like fio randread): `requests` of
    /// them, or as many as fit in `seconds`.
    Random {
        #[arg(long)]
        key: String,
        #[arg(long)]
        request_size: u64,
        #[arg(long, required_unless_present = "seconds")]
        requests: Option<u64>,
        #[arg(long)]
        seconds: Option<f64>,
        #[arg(long)]
        concurrency: usize,
        #[arg(long, default_value_t = 0x6d73_6673)]
        seed: u64,
    },
    /// Read every object under a prefix (sorted by key), each in `request_size` GETs (0: one GET
    /// per object), once; with `seconds`, cycle over them until that much time has passed.
    Objects {
        #[arg(long)]
        prefix: String,
        /// Use only the first N objects.
        #[arg(long)]
        limit: Option<usize>,
        #[arg(long, default_value_t = 0)]
        request_size: u64,
        #[arg(long)]
        seconds: Option<f64>,
        #[arg(long)]
        concurrency: usize,
    },
    /// List a prefix (all pages); with a delimiter, one directory level. With `keys`, the output
    /// has `objects`: `[key, size, etag]` of each.
    List {
        #[arg(long)]
        prefix: String,
        #[arg(long)]
        delimiter: Option<String>,
        #[arg(long)]
        keys: bool,
        /// With `--keys`: each entry also has the object's LastModified in ms since the epoch
        /// (bench/store-clock.sh compares the store's clock with a writer's).
        #[arg(long, requires = "keys")]
        modified: bool,
    },
    /// List a prefix again and again until killed, the pause between listings growing from
    /// `first_ms` by half each time to at most `last_ms`; print a line (not the one JSON object
    /// of the other commands) each time the listing differs from the last: `{"at", "objects"}`,
    /// `at` the moment the listing arrived on the system-wide monotonic clock (Python's
    /// `time.monotonic`). The harness's wait for a peer's uploads: uploads that end soon after
    /// the close are seen within a few ms, and a long wait costs the server a listing per
    /// `last_ms`, from one process (a process per listing cost the CPU being measured).
    /// Without `--prefix`, it prints `{"ready": true}` once connected and then waits for the
    /// first line of stdin to name it: the harness starts the watcher before the writer and
    /// names the prefix at the close, so that the process's start is not part of the time it
    /// measures.
    Watch {
        #[arg(long)]
        prefix: Option<String>,
        #[arg(long, default_value_t = 2)]
        first_ms: u64,
        #[arg(long, default_value_t = 50)]
        last_ms: u64,
    },
    /// Time from sending a GET of the whole object to its first body byte.
    Ttfb {
        #[arg(long)]
        key: String,
    },
    /// Upload objects of `size` pseudo-random bytes (incompressible, so the server stores and
    /// serves them as real data), multipart above `part_size`, `concurrency` requests in flight.
    Seed {
        #[arg(long)]
        size: u64,
        #[arg(long, default_value_t = 64 << 20)]
        part_size: u64,
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// A file with one key per line (for thousands of keys).
        #[arg(long)]
        keys_file: Option<PathBuf>,
        keys: Vec<String>,
    },
    /// PutObject of `count` objects of `size` bytes, `PREFIX` + `f00000`, `f00001`, ...,
    /// `concurrency` in flight (a client writing small files with that many threads).
    PutObjects {
        #[arg(long)]
        prefix: String,
        #[arg(long)]
        count: usize,
        #[arg(long)]
        size: u64,
        #[arg(long)]
        concurrency: usize,
        /// Before each PutObject the sending thread sleeps this long, as a filesystem's client
        /// pauses between files for its local work (open, write); the report then adds
        /// `request_seconds`, the time spent in the requests alone. What a pause costs the next
        /// request on a machine whose idle CPUs are slow to wake (see create-split.sh).
        #[arg(long, default_value_t = 0)]
        idle_us: u64,
    },
    /// One multipart upload of `size` bytes in parts of `part_size`, `concurrency` parts in
    /// flight (a sliding window: the next part starts when one completes).
    PutLarge {
        #[arg(long)]
        key: String,
        #[arg(long)]
        size: u64,
        #[arg(long, default_value_t = 8 << 20)]
        part_size: u64,
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
    },
    /// DeleteObject of every object under a prefix (listed before the clock starts),
    /// `concurrency` in flight.
    Delete {
        #[arg(long)]
        prefix: String,
        #[arg(long)]
        concurrency: usize,
    },
    /// Server-side CopyObject of `source` to `key`.
    Copy {
        #[arg(long)]
        source: String,
        #[arg(long)]
        key: String,
    },
    /// Write byte ranges of an object (`OFFSET:LENGTH`, in order; none: the whole object) to a
    /// local file, one after the other.
    Fetch {
        #[arg(long)]
        key: String,
        #[arg(long = "range", value_parser = parse_range)]
        ranges: Vec<(u64, u64)>,
        #[arg(long)]
        out: PathBuf,
    },
}

fn parse_range(text: &str) -> Result<(u64, u64), String> {
    let (offset, length) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?}: expected OFFSET:LENGTH"))?;
    let number = |s: &str| s.parse::<u64>().map_err(|e| format!("{text:?}: {e}"));
    Ok((number(offset)?, number(length)?))
}

/// One ranged GET (`len == 0`: the whole object).
#[derive(Clone)]
struct Request {
    key: String,
    offset: u64,
    len: u64,
}

fn client(endpoint: &str) -> Result<Client, Error> {
    Ok(env_client::client_from_env(endpoint)?)
}

/// Issues one GET and drains its body chunk by chunk (no copy into one buffer); returns its bytes.
async fn get(client: &Client, bucket: &str, req: &Request) -> Result<u64, Error> {
    let mut call = client.get_object().bucket(bucket).key(&req.key);
    if req.len > 0 {
        call = call.range(format!("bytes={}-{}", req.offset, req.offset + req.len - 1));
    }
    let mut body = call.send().await?.body;
    let mut n = 0u64;
    while let Some(chunk) = body.try_next().await? {
        n += chunk.len() as u64;
    }
    if req.len > 0 && n != req.len {
        return Err(format!(
            "{}: asked {} bytes at {}, got {n}",
            req.key, req.len, req.offset
        )
        .into());
    }
    Ok(n)
}

/// Runs `op` on every item in order with `concurrency` workers, each taking the next item when
/// its previous one completes — the shape of `concurrency` synchronous application threads (fio's
/// `numjobs`). With `seconds`, workers stop taking items once that much time has passed (fio's
/// `time_based`); returns the bytes `op` reported, the items done and the elapsed time.
async fn for_each_concurrent<T, F, Fut>(
    items: impl Iterator<Item = T> + Send + 'static,
    concurrency: usize,
    seconds: Option<f64>,
    op: F,
) -> Result<(u64, usize, Duration), Error>
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<u64, Error>> + Send,
{
    let queue = Arc::new(Mutex::new(items));
    let deadline = seconds.map(Duration::from_secs_f64);
    let start = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (queue, op) = (queue.clone(), op.clone());
        workers.push(tokio::spawn(async move {
            let (mut bytes, mut count) = (0u64, 0usize);
            loop {
                if deadline.is_some_and(|d| start.elapsed() >= d) {
                    return Ok::<_, Error>((bytes, count));
                }
                let Some(item) = queue.lock().await.next() else {
                    return Ok((bytes, count));
                };
                bytes += op(item).await?;
                count += 1;
            }
        }));
    }
    let (mut total, mut count) = (0, 0);
    for worker in workers {
        let (b, c) = worker.await??;
        total += b;
        count += c;
    }
    Ok((total, count, start.elapsed()))
}

/// GETs the requests with `concurrency` in flight (see [`for_each_concurrent`]).
async fn run_requests(
    client: &Client,
    bucket: &str,
    requests: impl Iterator<Item = Request> + Send + 'static,
    concurrency: usize,
    seconds: Option<f64>,
) -> Result<(u64, usize, Duration), Error> {
    let (client, bucket) = (client.clone(), bucket.to_string());
    let (total, count, elapsed) =
        for_each_concurrent(requests, concurrency, seconds, move |req: Request| {
            let (client, bucket) = (client.clone(), bucket.clone());
            async move { get(&client, &bucket, &req).await }
        })
        .await?;
    eprintln!("raw_read: {count} GETs, {total} bytes in {elapsed:?}");
    Ok((total, count, elapsed))
}

/// Splits `[offset, offset + length)` into consecutive requests of at most `size` bytes.
fn chunks(key: &str, offset: u64, length: u64, size: u64) -> Vec<Request> {
    let size = if size == 0 { length.max(1) } else { size };
    let mut out = Vec::new();
    let mut at = offset;
    while at < offset + length {
        let len = size.min(offset + length - at);
        out.push(Request {
            key: key.to_string(),
            offset: at,
            len,
        });
        at += len;
    }
    out
}

async fn object_size(client: &Client, bucket: &str, key: &str) -> Result<u64, Error> {
    let head = client.head_object().bucket(bucket).key(key).send().await?;
    Ok(head.content_length().unwrap_or(0).max(0) as u64)
}

/// One object as a listing shows it.
struct Listed {
    key: String,
    size: u64,
    etag: String,
    /// LastModified, in ms since the epoch: the store's own clock (garage's, in ms).
    modified_ms: i64,
}

impl Listed {
    /// The object as the JSON the harness reads: `[key, size, etag]`, and its LastModified after
    /// them when `modified`.
    fn entry(&self, modified: bool) -> Value {
        match modified {
            true => json!([self.key, self.size, self.etag, self.modified_ms]),
            false => json!([self.key, self.size, self.etag]),
        }
    }
}

/// Every object under `prefix` (with a delimiter: one level), in key order, the number of common
/// prefixes and the number of LIST requests it took.
async fn list_prefix(
    client: &Client,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
) -> Result<(Vec<Listed>, usize, usize), Error> {
    let (mut objects, mut prefixes, mut pages) = (Vec::new(), 0usize, 0usize);
    let mut token = None;
    loop {
        let mut call = client.list_objects_v2().bucket(bucket).prefix(prefix);
        if let Some(d) = delimiter {
            call = call.delimiter(d);
        }
        if let Some(t) = token.take() {
            call = call.continuation_token(t);
        }
        let page = call.send().await?;
        pages += 1;
        for o in page.contents() {
            objects.push(Listed {
                key: o.key().unwrap_or_default().to_string(),
                size: o.size().unwrap_or(0).max(0) as u64,
                etag: o.e_tag().unwrap_or_default().trim_matches('"').to_string(),
                modified_ms: o.last_modified().map_or(0, |t| {
                    t.secs() * 1000 + i64::from(t.subsec_nanos() / 1_000_000)
                }),
            });
        }
        prefixes += page.common_prefixes().len();
        match page.next_continuation_token() {
            Some(t) if page.is_truncated().unwrap_or(false) => token = Some(t.to_string()),
            _ => break,
        }
    }
    Ok((objects, prefixes, pages))
}

/// xorshift64*: a fast, seedable generator for offsets and seed data (not for cryptography).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// `len` pseudo-random bytes, a function of (key, offset) only, so reruns seed identical data.
fn pattern(key: &str, offset: u64, len: u64) -> Vec<u8> {
    let seed = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let mut rng = Rng::new(seed ^ offset.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut out = Vec::with_capacity(len as usize + 8);
    while (out.len() as u64) < len {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(len as usize);
    out
}

/// Bytes to upload, generated before the clock starts: `window(start, len)` is `len` bytes at
/// `start` of an endless repetition of `period` pseudo-random bytes. The period is odd, so windows
/// at different multiples of 1 MiB differ: no two objects, and no two blocks of a large one, are
/// equal for a deduplicating server, and none compresses.
struct Pool {
    bytes: Bytes,
    period: u64,
}

impl Pool {
    /// A pool for `total` bytes in windows of at most `max_window` (period at most ~64 MiB).
    fn new(total: u64, max_window: u64) -> Pool {
        let period = total.clamp(1 << 20, 64 << 20) | 1;
        let bytes = Bytes::from(pattern("pool", 0, period + max_window));
        Pool { bytes, period }
    }

    fn window(&self, start: u64, len: u64) -> Bytes {
        let at = (start % self.period) as usize;
        self.bytes.slice(at..at + len as usize)
    }
}

async fn put(client: &Client, bucket: &str, key: &str, body: Bytes) -> Result<u64, Error> {
    let len = body.len() as u64;
    client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body))
        .send()
        .await?;
    Ok(len)
}

/// One multipart upload of `size` bytes, parts of `part_size` made by `body(offset, len)` and sent
/// `concurrency` at a time as a sliding window (each part a task, so making bodies runs in
/// parallel too); returns the number of requests.
async fn put_multipart(
    client: &Client,
    bucket: &str,
    key: &str,
    size: u64,
    part_size: u64,
    concurrency: usize,
    body: impl Fn(u64, u64) -> Bytes + Send + Sync + 'static,
) -> Result<usize, Error> {
    let upload = client
        .create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .send()
        .await?;
    let id = upload.upload_id().ok_or("no upload id")?.to_string();
    let body = Arc::new(body);
    let parts: Vec<CompletedPart> = stream::iter(0..size.div_ceil(part_size))
        .map(|index| {
            let (client, bucket, key, id) = (
                client.clone(),
                bucket.to_string(),
                key.to_string(),
                id.clone(),
            );
            let body = body.clone();
            let offset = index * part_size;
            let len = part_size.min(size - offset);
            let number = index as i32 + 1;
            tokio::spawn(async move {
                let out = client
                    .upload_part()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(id)
                    .part_number(number)
                    .body(ByteStream::from(body(offset, len)))
                    .send()
                    .await?;
                Ok::<CompletedPart, Error>(
                    CompletedPart::builder()
                        .part_number(number)
                        .set_e_tag(out.e_tag().map(str::to_string))
                        .build(),
                )
            })
        })
        .buffered(concurrency.max(1))
        .map(|joined| joined?)
        .try_collect()
        .await?;
    let requests = parts.len() + 2;
    client
        .complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(parts))
                .build(),
        )
        .send()
        .await?;
    Ok(requests)
}

async fn seed(
    client: &Client,
    bucket: &str,
    keys: Vec<String>,
    size: u64,
    part_size: u64,
    concurrency: usize,
) -> Result<Value, Error> {
    let start = Instant::now();
    let count = keys.len();
    if size > part_size {
        for key in &keys {
            let k = key.clone();
            let body = move |offset, len| Bytes::from(pattern(&k, offset, len));
            put_multipart(client, bucket, key, size, part_size, concurrency, body).await?;
        }
    } else {
        let (client, bucket) = (client.clone(), bucket.to_string());
        for_each_concurrent(keys.into_iter(), concurrency, None, move |key: String| {
            let (client, bucket) = (client.clone(), bucket.clone());
            async move {
                let body = Bytes::from(pattern(&key, 0, size));
                put(&client, &bucket, &key, body).await
            }
        })
        .await?;
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(
        json!({"command": "seed", "objects": count, "bytes": size * count as u64,
              "seconds": seconds, "concurrency": concurrency}),
    )
}

/// `count` objects of `size` bytes under `prefix`, `concurrency` PUTs in flight.
async fn put_objects(
    client: &Client,
    bucket: &str,
    prefix: &str,
    count: usize,
    size: u64,
    concurrency: usize,
    idle: Duration,
) -> Result<Value, Error> {
    let pool = Pool::new(size * count as u64, size);
    // A stride that is no multiple of anything the server cuts by: every object its own window.
    let stride = size + 4097;
    let objects: Vec<(String, Bytes)> = (0..count)
        .map(|i| {
            (
                format!("{prefix}f{i:05}"),
                pool.window(i as u64 * stride, size),
            )
        })
        .collect();
    let (client, bucket) = (client.clone(), bucket.to_string());
    let cpu_before = process_cpu();
    let in_requests = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let spent = Arc::clone(&in_requests);
    let (bytes, n, t) = for_each_concurrent(
        objects.into_iter(),
        concurrency,
        None,
        move |(key, body): (String, Bytes)| {
            let (client, bucket, spent) = (client.clone(), bucket.clone(), Arc::clone(&spent));
            async move {
                if !idle.is_zero() {
                    // The thread itself idles (not a timer): what a client busy elsewhere does.
                    std::thread::sleep(idle);
                }
                let started = Instant::now();
                let put = put(&client, &bucket, &key, body).await;
                *spent.lock().expect("not poisoned") += started.elapsed();
                put
            }
        },
    )
    .await?;
    let mut out = report("put-objects", bytes, t, n, concurrency);
    out["cpu_seconds"] = json!((process_cpu() - cpu_before).as_secs_f64());
    if !idle.is_zero() {
        let in_requests = *in_requests.lock().expect("not poisoned");
        out["idle_us"] = json!(idle.as_micros() as u64);
        out["request_seconds"] = json!(in_requests.as_secs_f64());
    }
    Ok(out)
}

/// `raw_read watch`: never returns but with an error (the harness kills it).
async fn watch(
    client: &Client,
    bucket: &str,
    prefix: &str,
    (first, longest): (Duration, Duration),
) -> Result<Value, Error> {
    use std::io::Write;
    let mut last: Option<Vec<Value>> = None;
    let mut pause = first;
    loop {
        let (objects, _, _) = list_prefix(client, bucket, prefix, None).await?;
        let at = monotonic_seconds();
        let listed: Vec<Value> = objects.iter().map(|o| o.entry(false)).collect();
        if last.as_ref() != Some(&listed) {
            let line = json!({"at": at, "objects": listed});
            let mut out = std::io::stdout().lock();
            writeln!(out, "{line}")?;
            out.flush()?;
            last = Some(listed);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 3 / 2).min(longest);
    }
}

/// The first line of stdin, without its newline: the prefix a watcher started ahead waits for.
/// Blocking the runtime's thread is harmless here: nothing else runs until the prefix is known.
fn prefix_from_stdin() -> Result<String, Error> {
    let mut line = String::new();
    if std::io::stdin().read_line(&mut line)? == 0 {
        return Err("watch: stdin closed before it named a prefix".into());
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

/// The CPU time all of this process's threads have used so far (bench/create-floor.sh sets it
/// beside what the same objects cost a filesystem).
fn process_cpu() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Seconds on CLOCK_MONOTONIC, the clock Python's `time.monotonic` reads on Linux.
fn monotonic_seconds() -> f64 {
    clock(libc::CLOCK_MONOTONIC).as_secs_f64()
}

/// The time on clock `id` (one Linux always has).
fn clock(id: libc::clockid_t) -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill; `id` names a clock Linux has.
    unsafe { libc::clock_gettime(id, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

async fn put_large(
    client: &Client,
    bucket: &str,
    key: &str,
    size: u64,
    part_size: u64,
    concurrency: usize,
) -> Result<Value, Error> {
    let pool = Arc::new(Pool::new(size, part_size));
    let start = Instant::now();
    let body = move |offset, len| pool.window(offset, len);
    let n = put_multipart(client, bucket, key, size, part_size, concurrency, body).await?;
    Ok(report("put-large", size, start.elapsed(), n, concurrency))
}

/// DeleteObject of every object under `prefix` (listed first, untimed), `concurrency` in flight.
async fn delete_prefix(
    client: &Client,
    bucket: &str,
    prefix: &str,
    concurrency: usize,
) -> Result<Value, Error> {
    let (objects, _, _) = list_prefix(client, bucket, prefix, None).await?;
    let keys = objects.into_iter().map(|o| o.key);
    let (client, bucket) = (client.clone(), bucket.to_string());
    let (_, n, t) = for_each_concurrent(keys, concurrency, None, move |key: String| {
        let (client, bucket) = (client.clone(), bucket.clone());
        async move {
            client
                .delete_object()
                .bucket(bucket)
                .key(key)
                .send()
                .await?;
            Ok(0)
        }
    })
    .await?;
    Ok(report("delete", 0, t, n, concurrency))
}

/// Writes the ranges of `key` (none: the whole object), in order, to the file `out`.
async fn fetch(
    client: &Client,
    bucket: &str,
    key: &str,
    ranges: &[(u64, u64)],
    out: &Path,
) -> Result<Value, Error> {
    let start = Instant::now();
    let mut file = tokio::fs::File::create(out).await?;
    let whole = [(0, 0)];
    let ranges = if ranges.is_empty() {
        &whole[..]
    } else {
        ranges
    };
    let mut bytes = 0u64;
    for &(offset, len) in ranges {
        let mut call = client.get_object().bucket(bucket).key(key);
        if len > 0 {
            call = call.range(format!("bytes={offset}-{}", offset + len - 1));
        }
        let mut body = call.send().await?.body;
        while let Some(chunk) = body.try_next().await? {
            file.write_all(&chunk).await?;
            bytes += chunk.len() as u64;
        }
    }
    file.flush().await?;
    Ok(report("fetch", bytes, start.elapsed(), ranges.len(), 1))
}

fn report(
    command: &str,
    bytes: u64,
    elapsed: Duration,
    requests: usize,
    concurrency: usize,
) -> Value {
    let seconds = elapsed.as_secs_f64();
    json!({
        "command": command,
        "bytes": bytes,
        "seconds": seconds,
        "requests": requests,
        "concurrency": concurrency,
        "mib_per_s": bytes as f64 / (1 << 20) as f64 / seconds.max(1e-9),
    })
}

async fn run(cli: Cli) -> Result<Value, Error> {
    let client = client(&cli.endpoint)?;
    let bucket = cli.bucket.as_str();
    Ok(match cli.command {
        Command::Read {
            key,
            offset,
            length,
            request_size,
            concurrency,
        } => {
            let length = match length {
                Some(l) => l,
                None => object_size(&client, bucket, &key)
                    .await?
                    .saturating_sub(offset),
            };
            let requests = chunks(&key, offset, length, request_size).into_iter();
            let (bytes, n, t) = run_requests(&client, bucket, requests, concurrency, None).await?;
            report("read", bytes, t, n, concurrency)
        }
        Command::Random {
            key,
            request_size,
            requests,
            seconds,
            concurrency,
            seed,
        } => {
            let size = object_size(&client, bucket, &key).await?;
            let slots = (size / request_size.max(1)).max(1);
            let mut rng = Rng::new(seed);
            let list = std::iter::repeat_with(move || Request {
                key: key.clone(),
                offset: rng.next() % slots * request_size,
                len: request_size,
            })
            .take(requests.map_or(usize::MAX, |n| n as usize));
            let (bytes, n, t) = run_requests(&client, bucket, list, concurrency, seconds).await?;
            report("random", bytes, t, n, concurrency)
        }
        Command::Objects {
            prefix,
            limit,
            request_size,
            seconds,
            concurrency,
        } => {
            let (mut objects, _, _) = list_prefix(&client, bucket, &prefix, None).await?;
            objects.truncate(limit.unwrap_or(usize::MAX));
            if objects.is_empty() {
                return Err(format!("no objects under {prefix:?}").into());
            }
            let count = objects.len();
            let once: Vec<Request> = objects
                .iter()
                .flat_map(|o| chunks(&o.key, 0, o.size, request_size))
                .collect();
            // Time-based runs cycle over the objects, as fio's time_based does over its files.
            let list: Box<dyn Iterator<Item = Request> + Send> = match seconds {
                Some(_) => Box::new(once.into_iter().cycle()),
                None => Box::new(once.into_iter()),
            };
            let (read, n, t) = run_requests(&client, bucket, list, concurrency, seconds).await?;
            let mut out = report("objects", read, t, n, concurrency);
            out["objects"] = json!(count);
            out
        }
        Command::List {
            prefix,
            delimiter,
            keys,
            modified,
        } => {
            let start = Instant::now();
            let (objects, prefixes, pages) =
                list_prefix(&client, bucket, &prefix, delimiter.as_deref()).await?;
            let mut out = report("list", 0, start.elapsed(), pages, 1);
            out["entries"] = json!(objects.len() + prefixes);
            if keys {
                let listed: Vec<Value> = objects.iter().map(|o| o.entry(modified)).collect();
                out["objects"] = json!(listed);
            }
            out
        }
        Command::Watch {
            prefix,
            first_ms,
            last_ms,
        } => {
            let pauses = (
                Duration::from_millis(first_ms),
                Duration::from_millis(last_ms),
            );
            let prefix = match prefix {
                Some(prefix) => prefix,
                None => {
                    // Connected and through the SDK's first-request set-up before the clock's
                    // end matters: only the listings themselves are then timed. The harness
                    // waits for the `ready` line, so none of this overlaps what it times.
                    client.head_bucket().bucket(bucket).send().await?;
                    println!("{}", json!({"ready": true}));
                    prefix_from_stdin()?
                }
            };
            watch(&client, bucket, &prefix, pauses).await?
        }
        Command::Ttfb { key } => {
            let start = Instant::now();
            let mut body = client
                .get_object()
                .bucket(bucket)
                .key(&key)
                .send()
                .await?
                .body;
            let first = body.try_next().await?.map_or(0, |c| c.len() as u64);
            let t = start.elapsed();
            // Dropping the body closes the connection instead of draining the object.
            drop(body);
            report("ttfb", first, t, 1, 1)
        }
        Command::Seed {
            size,
            part_size,
            concurrency,
            keys_file,
            mut keys,
        } => {
            if let Some(file) = keys_file {
                keys.extend(
                    std::fs::read_to_string(file)?
                        .lines()
                        .filter(|l| !l.is_empty())
                        .map(String::from),
                );
            }
            seed(
                &client,
                bucket,
                keys,
                size,
                part_size.max(5 << 20),
                concurrency,
            )
            .await?
        }
        Command::PutObjects {
            prefix,
            count,
            size,
            concurrency,
            idle_us,
        } => {
            let idle = Duration::from_micros(idle_us);
            put_objects(&client, bucket, &prefix, count, size, concurrency, idle).await?
        }
        Command::PutLarge {
            key,
            size,
            part_size,
            concurrency,
        } => put_large(&client, bucket, &key, size, part_size, concurrency).await?,
        Command::Delete {
            prefix,
            concurrency,
        } => delete_prefix(&client, bucket, &prefix, concurrency).await?,
        Command::Copy { source, key } => {
            let start = Instant::now();
            client
                .copy_object()
                .bucket(bucket)
                .key(&key)
                .copy_source(format!("{bucket}/{source}"))
                .send()
                .await?;
            report("copy", 0, start.elapsed(), 1, 1)
        }
        Command::Fetch { key, ranges, out } => fetch(&client, bucket, &key, &ranges, &out).await?,
    })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Cli::parse()).await {
        Ok(value) => {
            println!("{value}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            // SDK errors say little at the top ("service error"); the cause is down the chain.
            let mut message = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                message.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("raw_read: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}
