//! Smoke tests of the fault-injecting proxy fixture, against a real garage through the same
//! SDK msfs uses (with SDK retries off, so every injected fault reaches the caller). If these
//! fail, every fault test built on the proxy is suspect.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};

use crate::common::fault_proxy::{Fault, FaultPlan, FaultProxy, Match, S3Op, seed_from_env};
use crate::common::garage::error_text;
use crate::common::{Garage, pattern};

const BUCKET: &str = "faults";

fn start() -> (Garage, FaultProxy) {
    let garage = Garage::start();
    garage.create_bucket(BUCKET);
    let proxy = FaultProxy::in_front_of(&garage);
    (garage, proxy)
}

async fn put(client: &Client, key: &str, body: &[u8]) -> Result<(), String> {
    client
        .put_object()
        .bucket(BUCKET)
        .key(key)
        .body(ByteStream::from(body.to_vec()))
        .send()
        .await
        .map(|_| ())
        .map_err(|e| error_text(&e))
}

/// A whole GET: the request and its body, either of which can fail.
async fn get(client: &Client, key: &str) -> Result<Vec<u8>, String> {
    let resp = client
        .get_object()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .map_err(|e| error_text(&e))?;
    let body = resp
        .body
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?;
    Ok(body.into_bytes().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_through_is_byte_identical_over_kept_alive_connections() {
    let (garage, proxy) = start();
    let client = proxy.client(&garage);

    let objects = [
        ("empty", Vec::new()),
        ("dir/ünïcödé key+with space", b"small".to_vec()),
        ("large", pattern(3 * 1024 * 1024 + 17, 1)),
    ];
    for (key, body) in &objects {
        put(&client, key, body).await.unwrap();
    }
    for (key, body) in &objects {
        assert!(
            get(&client, key).await.unwrap() == *body,
            "bytes of {key:?}"
        );
        // What the server holds, read without the proxy.
        assert!(
            garage.get_object(BUCKET, key).await == *body,
            "{key:?} in garage"
        );
    }
    let ranged = client
        .get_object()
        .bucket(BUCKET)
        .key("large")
        .range("bytes=1000-1999")
        .send()
        .await
        .unwrap();
    let ranged = ranged.body.collect().await.unwrap().into_bytes();
    assert!(ranged[..] == objects[2].1[1000..2000], "ranged GET bytes");
    let head = client
        .head_object()
        .bucket(BUCKET)
        .key("large")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(objects[2].1.len() as i64));
    let listed = client
        .list_objects_v2()
        .bucket(BUCKET)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.contents().len(), 3);

    let stats = proxy.stats();
    assert_eq!(stats.faults(), 0, "{stats:?}");
    assert_eq!(stats.forwarded, stats.requests, "{stats:?}");
    assert_eq!(stats.requests, 9, "{stats:?}");
    assert!(
        stats.connections < stats.requests,
        "connections are reused: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_upload_passes_through() {
    let (garage, proxy) = start();
    let client = proxy.client(&garage);
    let parts = [pattern(5 * 1024 * 1024, 2), pattern(5 * 1024 * 1024, 3)];

    let upload = client
        .create_multipart_upload()
        .bucket(BUCKET)
        .key("multi")
        .send()
        .await
        .unwrap();
    let upload_id = upload.upload_id().unwrap();
    let mut completed = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let number = i as i32 + 1;
        let done = client
            .upload_part()
            .bucket(BUCKET)
            .key("multi")
            .upload_id(upload_id)
            .part_number(number)
            .body(ByteStream::from(part.clone()))
            .send()
            .await
            .unwrap();
        completed.push(
            CompletedPart::builder()
                .part_number(number)
                .e_tag(done.e_tag().unwrap())
                .build(),
        );
    }
    client
        .complete_multipart_upload()
        .bucket(BUCKET)
        .key("multi")
        .upload_id(upload_id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(completed))
                .build(),
        )
        .send()
        .await
        .unwrap();

    let whole = parts.concat();
    assert!(get(&client, "multi").await.unwrap() == whole);
    assert!(garage.get_object(BUCKET, "multi").await == whole);
    assert_eq!(proxy.stats().faults(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_503_reaches_the_client_and_is_not_forwarded() {
    let (garage, proxy) = start();
    let client = proxy.client(&garage);
    put(&client, "other", b"x").await.unwrap();

    proxy.set(
        FaultPlan::always(Fault::service_unavailable()).only(Match::any().op(S3Op::PutObject)),
    );
    let err = client
        .put_object()
        .bucket(BUCKET)
        .key("refused")
        .body(ByteStream::from_static(b"never stored"))
        .send()
        .await
        .expect_err("an injected 503 must fail the PUT");
    assert_eq!(
        err.raw_response().map(|r| r.status().as_u16()),
        Some(503),
        "{}",
        error_text(&err)
    );
    assert_eq!(err.code(), Some("ServiceUnavailable"));
    assert_eq!(garage.try_get_object(BUCKET, "refused").await, None);
    // Requests the plan does not match still pass, on the same kept-alive connection.
    assert_eq!(get(&client, "other").await.unwrap(), b"x");

    let stats = proxy.stats();
    assert_eq!((stats.errors, stats.faults()), (1, 1), "{stats:?}");
    assert_eq!(stats.forwarded, stats.requests - 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_down_carries_its_s3_code_once() {
    let (garage, proxy) = start();
    let client = proxy.client(&garage);
    put(&client, "k", b"v").await.unwrap();

    proxy.set(FaultPlan::once(Fault::slow_down()).only(Match::any().method("GET")));
    let err = client
        .get_object()
        .bucket(BUCKET)
        .key("k")
        .send()
        .await
        .expect_err("SlowDown must fail the GET");
    assert_eq!(err.code(), Some("SlowDown"), "{}", error_text(&err));
    assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(503));
    assert_eq!(get(&client, "k").await.unwrap(), b"v", "only once");
    assert_eq!(proxy.stats().errors, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_body_is_an_error_not_short_data() {
    let (garage, proxy) = start();
    let client = proxy.client(&garage);
    let body = pattern(1024 * 1024, 4);
    put(&client, "k", &body).await.unwrap();

    proxy.set(
        FaultPlan::once(Fault::Truncate { after: 100_000 })
            .only(Match::any().op(S3Op::GetObject).ranged(false)),
    );
    let result = get(&client, "k").await;
    assert!(
        result.is_err(),
        "a truncated body must be an error, got {} bytes",
        result.map_or(0, |b| b.len())
    );
    assert!(get(&client, "k").await.unwrap() == body);
    let stats = proxy.stats();
    assert_eq!((stats.truncations, stats.faults()), (1, 1), "{stats:?}");
    assert_eq!(stats.forwarded, stats.requests, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_before_the_response_is_a_dispatch_failure() {
    let (garage, proxy) = start();
    let client = proxy.client(&garage);
    put(&client, "k", b"v").await.unwrap();

    proxy.set(FaultPlan::once(Fault::Reset));
    let err = client
        .head_object()
        .bucket(BUCKET)
        .key("k")
        .send()
        .await
        .expect_err("a reset must fail the request");
    assert!(
        matches!(err, SdkError::DispatchFailure(_)),
        "expected a dispatch failure: {}",
        error_text(&err)
    );
    assert_eq!(get(&client, "k").await.unwrap(), b"v");
    let stats = proxy.stats();
    assert_eq!(stats.resets, 1, "{stats:?}");
    assert_eq!(stats.forwarded, stats.requests - 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_mid_body_breaks_the_download() {
    let (garage, proxy) = start();
    let client = proxy.client(&garage);
    let body = pattern(2 * 1024 * 1024, 5);
    put(&client, "k", &body).await.unwrap();

    proxy.set(FaultPlan::once(Fault::ResetMidBody { after: 64 * 1024 }));
    assert!(get(&client, "k").await.is_err(), "a reset body must fail");
    assert!(get(&client, "k").await.unwrap() == body);
    assert_eq!(proxy.stats().resets_mid_body, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_request_ends_in_a_client_timeout_and_the_plan_change_frees_it() {
    let (garage, proxy) = start();
    garage.put_object(BUCKET, "k", "v").await;
    let client = proxy.client_with_timeouts(
        &garage,
        TimeoutConfig::builder()
            .read_timeout(Duration::from_millis(300))
            .build(),
    );

    proxy.set(FaultPlan::always(Fault::stall_forever()).only(Match::any().op(S3Op::GetObject)));
    let err = client
        .get_object()
        .bucket(BUCKET)
        .key("k")
        .send()
        .await
        .expect_err("a stall must end in a timeout");
    let timed_out = match &err {
        SdkError::TimeoutError(_) => true,
        SdkError::DispatchFailure(failure) => failure.is_timeout(),
        _ => false,
    };
    assert!(timed_out, "expected a timeout: {}", error_text(&err));
    assert_eq!(proxy.stats().stalls, 1);

    proxy.pass_through();
    assert_eq!(get(&client, "k").await.unwrap(), b"v");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_proxy_ends_a_stalled_request() {
    let (garage, proxy) = start();
    garage.put_object(BUCKET, "k", "v").await;
    let client = proxy.client(&garage);

    proxy.set(FaultPlan::always(Fault::stall_forever()));
    let stalled = tokio::spawn(async move { get(&client, "k").await });
    while proxy.stats().stalls == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Joins every proxy thread, the stalled one included.
    drop(proxy);
    let result = stalled.await.unwrap();
    assert!(result.is_err(), "the stalled GET ends in an error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stall_mid_body_then_resume_delivers_every_byte() {
    let (garage, proxy) = start();
    let client = proxy.client(&garage);
    let body = pattern(1024 * 1024, 6);
    put(&client, "k", &body).await.unwrap();

    proxy.set(FaultPlan::once(Fault::StallMidBody {
        after: 300_000,
        duration: Some(Duration::from_millis(200)),
    }));
    assert!(get(&client, "k").await.unwrap() == body);
    assert_eq!(proxy.stats().stalls_mid_body, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_refuses_connections_and_up_serves_again_on_the_same_port() {
    let (garage, proxy) = start();
    let client = proxy.client(&garage);
    put(&client, "k", b"v").await.unwrap();

    proxy.down();
    let refused = TcpStream::connect(proxy.addr()).expect_err("down refuses connections");
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    let err = client
        .get_object()
        .bucket(BUCKET)
        .key("k")
        .send()
        .await
        .expect_err("nothing answers while down");
    assert!(
        matches!(err, SdkError::DispatchFailure(_)),
        "{}",
        error_text(&err)
    );

    proxy.up();
    assert_eq!(get(&client, "k").await.unwrap(), b"v");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_faults_mix_with_successes_and_the_counters_add_up() {
    let (garage, proxy) = start();
    let client = proxy.client(&garage);
    let body = pattern(256 * 1024, 7);
    garage.put_object(BUCKET, "k", body.clone()).await;

    let seed = seed_from_env();
    proxy.set(FaultPlan::random(
        0.5,
        seed,
        vec![
            Fault::service_unavailable(),
            Fault::Reset,
            Fault::Truncate { after: 1000 },
        ],
    ));
    let attempts = 40;
    let mut successes = 0;
    for _ in 0..attempts {
        if let Ok(got) = get(&client, "k").await {
            assert!(got == body, "a successful GET returns every byte");
            successes += 1;
        }
    }
    let stats = proxy.stats();
    assert!(
        successes > 0 && successes < attempts,
        "seed {seed}: {successes}/{attempts} succeeded"
    );
    assert_eq!(stats.requests, attempts, "{stats:?}");
    assert_eq!(stats.faults(), attempts - successes, "{stats:?}");
    assert_eq!(
        stats.forwarded,
        attempts - stats.errors - stats.resets,
        "{stats:?}"
    );
}

/// Chunked request bodies and `Expect: 100-continue` do not come from the SDK; a presigned
/// PUT sent by hand through the proxy exercises both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_and_expect_continue_uploads_pass_through() {
    let (garage, proxy) = start();
    let client = proxy.client(&garage);
    let body = pattern(700_000, 8);

    for (key, chunked) in [("chunked", true), ("expect", false)] {
        let presigned = client
            .put_object()
            .bucket(BUCKET)
            .key(key)
            .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).unwrap())
            .await
            .unwrap();
        let uri: http_uri::Parts = presigned.uri().parse().unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut head = format!(
            "PUT {} HTTP/1.1\r\nHost: {}\r\n",
            uri.path_and_query,
            proxy.addr()
        );
        if chunked {
            head.push_str("Transfer-Encoding: chunked\r\n\r\n");
            stream.write_all(head.as_bytes()).unwrap();
            for piece in body.chunks(100_000) {
                write!(stream, "{:x};ext=1\r\n", piece.len()).unwrap();
                stream.write_all(piece).unwrap();
                stream.write_all(b"\r\n").unwrap();
            }
            stream.write_all(b"0\r\n\r\n").unwrap();
        } else {
            head.push_str(&format!(
                "Content-Length: {}\r\nExpect: 100-continue\r\n\r\n",
                body.len()
            ));
            stream.write_all(head.as_bytes()).unwrap();
            let (status, _) = read_response(&mut reader, false);
            assert_eq!(status, 100, "interim answer relayed");
            stream.write_all(&body).unwrap();
        }
        let (status, text) = read_response(&mut reader, true);
        assert_eq!(status, 200, "{key}: {text}");
        assert!(garage.get_object(BUCKET, key).await == body, "{key}");
    }
    assert_eq!(proxy.stats().forwarded, 2);
}

/// A path and query out of a presigned URL, without an HTTP library.
mod http_uri {
    pub struct Parts {
        pub path_and_query: String,
    }

    impl std::str::FromStr for Parts {
        type Err = String;
        fn from_str(uri: &str) -> Result<Parts, String> {
            let rest = uri.strip_prefix("http://").ok_or(uri.to_string())?;
            let slash = rest.find('/').ok_or(uri.to_string())?;
            Ok(Parts {
                path_and_query: rest[slash..].to_string(),
            })
        }
    }
}

/// Reads one response head (and, if `with_body`, its `Content-Length` body): status and text.
fn read_response(reader: &mut BufReader<TcpStream>, with_body: bool) -> (u16, String) {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).unwrap() > 0, "response cut");
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0; if with_body { length } else { 0 }];
    reader.read_exact(&mut body).unwrap();
    (status, head + &String::from_utf8_lossy(&body))
}
