//! `/dashboard`: the page and its assets are served, and the event stream, read from the
//! real server on port 0, carries bounded frames at a bounded rate whose bars cover the
//! device's work and whose numbers are those of `/metrics`.

mod api_support;

use std::time::{Duration, Instant};

use api_support::{mlp_request, start_default};
use futures_util::StreamExt as _;
use serde_json::Value;

/// Frames a test reads at most before giving up (ten a second: about 20 s).
const MAX_FRAMES: usize = 200;

#[actix_web::test]
async fn the_page_and_its_assets_are_served_by_clockwork() {
    let server = start_default().await;
    let (status, page) = server.get("/dashboard").await;
    assert_eq!(status, 200);
    let page = String::from_utf8(page).unwrap();
    for asset in ["/dashboard/page.js", "/dashboard/page.css"] {
        assert!(page.contains(asset), "the page links {asset}");
        let (status, body) = server.get(asset).await;
        assert_eq!(status, 200, "{asset}");
        assert!(!body.is_empty(), "{asset}");
    }
    assert!(!page.contains("http://") && !page.contains("https://"));
}

/// The value of the series `name` (with its labels, as printed), if present.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// Reads server-sent events from the stream into frames, calling `f` on each until it
/// returns true; fails after [`MAX_FRAMES`].
async fn frames_until<S>(
    stream: &mut awc::ClientResponse<S>,
    mut f: impl FnMut(&Value, Instant) -> bool,
) where
    S: futures_util::Stream<Item = Result<actix_web::web::Bytes, awc::error::PayloadError>> + Unpin,
{
    let mut text = String::new();
    let mut seen = 0;
    while seen < MAX_FRAMES {
        let chunk = stream.next().await.expect("the stream stays open").unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = text.find("\n\n") {
            let event: String = text.drain(..end + 2).collect();
            let json = event
                .strip_prefix("data: ")
                .expect("one data line per event");
            let frame: Value = serde_json::from_str(json.trim_end()).unwrap();
            seen += 1;
            if f(&frame, Instant::now()) {
                return;
            }
        }
    }
    panic!("no frame held what was expected in {MAX_FRAMES} frames");
}

#[actix_web::test]
async fn frames_are_bounded_paced_and_match_the_metrics() {
    let server = start_default().await;
    let mut stream = server
        .client
        .get(server.url("/dashboard/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let kind = stream.headers().get("content-type").unwrap().clone();
    assert_eq!(kind, "text/event-stream");

    const REQUESTS: u64 = 5;
    for _ in 0..REQUESTS {
        let (status, _) = server
            .post_json("/v2/models/mlp/infer", &mlp_request(1.0))
            .await;
        assert_eq!(status, 200);
    }
    let mut last: Option<(u64, Instant)> = None;
    let mut measured_infers = 0;
    frames_until(&mut stream, |frame, at| {
        let bars = frame["bars"].as_array().unwrap();
        assert!(bars.len() <= 512 && frame["marks"].as_array().unwrap().len() <= 256);
        let now = frame["now"].as_u64().unwrap();
        if let Some((before, then)) = last {
            // At most ten frames a second, by the server's clock and as they arrive
            // (a little less than 100 ms apart: the network may bunch them).
            assert!(now >= before + 100_000_000, "{now} after {before}");
            assert!(at - then >= Duration::from_millis(50));
        }
        last = Some((now, at));
        measured_infers += bars
            .iter()
            .filter(|b| b["kind"] == "infer" && b["measured"] == true && b["device"] == 0)
            .count();
        let snapshot = &frame["snapshot"];
        let ok = snapshot["models"]
            .as_array()
            .and_then(|models| models.iter().find(|m| m["name"] == "mlp"))
            .map(|m| m["answers"]["ok"].as_u64().unwrap());
        measured_infers >= 1 && ok == Some(REQUESTS)
    })
    .await;
    let (_, text) = server.get("/metrics").await;
    let text = String::from_utf8(text).unwrap();
    assert_eq!(
        metric(&text, "clockwork_requests{model=\"mlp\",outcome=\"ok\"}"),
        Some(REQUESTS as f64)
    );
}

#[actix_web::test]
async fn a_client_that_never_reads_does_not_slow_serving() {
    let server = start_default().await;
    // Ten streams opened and never read.
    let mut idle = Vec::new();
    for _ in 0..10 {
        let response = server
            .client
            .get(server.url("/dashboard/events"))
            .send()
            .await
            .unwrap();
        idle.push(response);
    }
    let started = Instant::now();
    for _ in 0..50 {
        let (status, _) = server
            .post_json("/v2/models/mlp/infer", &mlp_request(1.0))
            .await;
        assert_eq!(status, 200);
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(idle);
}

#[actix_web::test]
async fn streams_end_when_the_server_drains() {
    let server = start_default().await;
    let mut stream = server
        .client
        .get(server.url("/dashboard/events"))
        .send()
        .await
        .unwrap();
    let first = stream.next().await;
    assert!(
        matches!(first, Some(Ok(_))),
        "the first frame, with the snapshot"
    );
    server
        .runtime
        .controller
        .send(clockwork::actors::messages::Drain)
        .await
        .unwrap();
    // The snapshot task sees the drain within a second and ends every stream, so an open
    // dashboard does not hold the graceful stop back.
    let ended = actix_web::rt::time::timeout(Duration::from_secs(5), async {
        while let Some(chunk) = stream.next().await {
            chunk.unwrap();
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream is still open after the drain");
}
