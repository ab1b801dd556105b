//! A bounded load generator for vLLM's OpenAI server (or the simulator,
//! crates/vllm-sim): `concurrency` workers, each sending one streaming chat
//! completion after the other, every one on a new TCP connection, until
//! [`Load::stop`] is called or the request or time limit is reached (it always
//! stops by itself).
//!
//! A request succeeds when the answer is `200` and the server-sent events end
//! with `data: [DONE]`. It fails on a refused, reset or timed-out connection,
//! any other status, a stream that ends without `[DONE]` (vLLM aborting
//! in-flight requests on SIGTERM), a choice that finished with
//! `finish_reason: "abort"` (vLLM 0.33+ accepts requests while it drains and
//! aborts them: a 200 with no answer), or the request timeout. The [`Report`]
//! counts them by [`Failure`] kind, keeps the first few reasons, and gives
//! the latency of the successful requests.
//!
//! Plain std threads and blocking sockets: a test's async runtime (and the
//! in-process operator on it) is never blocked by the load; call
//! [`Load::stop`] from `spawn_blocking` or use [`Load::stop_async`].

use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

/// What to send, how much, and for how long at most.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// `ip:port` of the server (a ClusterIP, a pod IP, 127.0.0.1:port).
    pub addr: SocketAddr,
    /// The served model name (`model` in the request).
    pub model: String,
    /// Requests in flight at once (one worker thread each).
    pub concurrency: usize,
    /// `max_tokens` of each request (with the simulator: the request takes
    /// about `max_tokens × VLLM_SIM_TOKEN_DELAY_MS`).
    pub max_tokens: u32,
    /// No request is started after this many were sent.
    pub max_requests: u64,
    /// No request is started after this much time since [`Load::start`].
    pub max_duration: Duration,
    /// A request that has not finished after this long fails (`timeout`).
    pub request_timeout: Duration,
    /// A connection not established after this long fails (`connect timeout`).
    pub connect_timeout: Duration,
}

impl LoadSpec {
    /// Defaults: 4 in flight, 16 tokens, at most 10,000 requests and 5 minutes,
    /// 30 s per request, 2 s to connect.
    pub fn new(addr: SocketAddr, model: &str) -> LoadSpec {
        LoadSpec {
            addr,
            model: model.to_string(),
            concurrency: 4,
            max_tokens: 16,
            max_requests: 10_000,
            max_duration: Duration::from_secs(300),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(2),
        }
    }
}

/// Why a request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Failure {
    /// The connection was refused (nothing listening, or an endpoint gone).
    Refused,
    /// The connection was not established in time.
    ConnectTimeout,
    /// Another error while connecting (unreachable, ...).
    Connect,
    /// The connection was reset by the peer.
    Reset,
    /// The response status was not 200.
    Status,
    /// The response or its event stream ended before `data: [DONE]`.
    Truncated,
    /// The server aborted the request (`finish_reason: "abort"`), e.g. one
    /// that reached a draining vLLM.
    Aborted,
    /// The request did not finish within the request timeout.
    Timeout,
    /// Another I/O error, or a response that is not HTTP.
    Other,
}

impl Failure {
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Refused => "refused",
            Failure::ConnectTimeout => "connect timeout",
            Failure::Connect => "connect error",
            Failure::Reset => "reset",
            Failure::Status => "non-200 status",
            Failure::Truncated => "stream ended without [DONE]",
            Failure::Aborted => "aborted by the server",
            Failure::Timeout => "timeout",
            Failure::Other => "other",
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many first failure reasons a report keeps.
pub const FIRST_FAILURES: usize = 5;

/// The outcome of a load run (or of its part so far).
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Requests started.
    pub sent: u64,
    pub ok: u64,
    pub failed: u64,
    /// Failures by kind.
    pub failures: BTreeMap<Failure, u64>,
    /// The first [`FIRST_FAILURES`] failures: kind and detail.
    pub first_failures: Vec<(Failure, String)>,
    /// Latency of the successful requests (connect to `[DONE]`), sorted.
    pub latencies: Vec<Duration>,
    /// Time since the start.
    pub elapsed: Duration,
}

impl Report {
    /// The `q` quantile (0..=1, nearest rank) of the successful requests' latency.
    pub fn latency_quantile(&self, q: f64) -> Option<Duration> {
        quantile(&self.latencies, q)
    }

    pub fn median(&self) -> Option<Duration> {
        self.latency_quantile(0.5)
    }

    pub fn p99(&self) -> Option<Duration> {
        self.latency_quantile(0.99)
    }

    /// `sent 120, ok 120, failed 0, median 650 ms, p99 702 ms`, and the
    /// failures by kind and the first reasons when there are any.
    pub fn summary(&self) -> String {
        let ms = |d: Option<Duration>| {
            d.map(|d| format!("{} ms", d.as_millis()))
                .unwrap_or_else(|| "-".into())
        };
        let mut s = format!(
            "sent {}, ok {}, failed {}, median {}, p99 {} ({:.1} s)",
            self.sent,
            self.ok,
            self.failed,
            ms(self.median()),
            ms(self.p99()),
            self.elapsed.as_secs_f64()
        );
        if self.failed > 0 {
            let kinds: Vec<String> = self
                .failures
                .iter()
                .map(|(k, n)| format!("{k}: {n}"))
                .collect();
            s.push_str(&format!("; failures: {}", kinds.join(", ")));
            let first: Vec<String> = self
                .first_failures
                .iter()
                .map(|(k, d)| format!("{k} ({d})"))
                .collect();
            s.push_str(&format!("; first: {}", first.join("; ")));
        }
        s
    }
}

/// Nearest-rank quantile of sorted values.
fn quantile(sorted: &[Duration], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[derive(Default)]
struct Tally {
    ok: u64,
    failures: BTreeMap<Failure, u64>,
    first_failures: Vec<(Failure, String)>,
    latencies: Vec<Duration>,
}

struct Shared {
    spec: LoadSpec,
    started: Instant,
    stop: AtomicBool,
    tickets: AtomicU64,
    tally: Mutex<Tally>,
}

impl Shared {
    /// A ticket for one more request, unless a limit was reached or stop was called.
    fn next(&self) -> bool {
        if self.stop.load(Ordering::SeqCst) || self.started.elapsed() >= self.spec.max_duration {
            return false;
        }
        let n = self.tickets.fetch_add(1, Ordering::SeqCst);
        if n >= self.spec.max_requests {
            self.tickets.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    fn record(&self, outcome: Result<Duration, (Failure, String)>) {
        let mut t = self.tally.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(latency) => {
                t.ok += 1;
                t.latencies.push(latency);
            }
            Err((kind, detail)) => {
                *t.failures.entry(kind).or_default() += 1;
                if t.first_failures.len() < FIRST_FAILURES {
                    t.first_failures.push((kind, detail));
                }
            }
        }
    }

    fn report(&self) -> Report {
        let t = self.tally.lock().unwrap_or_else(|e| e.into_inner());
        let failed = t.failures.values().sum();
        let mut latencies = t.latencies.clone();
        latencies.sort();
        Report {
            sent: self.tickets.load(Ordering::SeqCst),
            ok: t.ok,
            failed,
            failures: t.failures.clone(),
            first_failures: t.first_failures.clone(),
            latencies,
            elapsed: self.started.elapsed(),
        }
    }
}

/// A running load; stops by itself at its limits, or when stopped.
pub struct Load {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Load {
    /// Starts `spec.concurrency` workers at once.
    pub fn start(spec: LoadSpec) -> Load {
        assert!(spec.concurrency > 0, "a load needs at least one worker");
        let shared = Arc::new(Shared {
            spec,
            started: Instant::now(),
            stop: AtomicBool::new(false),
            tickets: AtomicU64::new(0),
            tally: Mutex::new(Tally::default()),
        });
        let body = chat_request(&shared.spec);
        let workers = (0..shared.spec.concurrency)
            .map(|i| {
                let shared = shared.clone();
                let body = body.clone();
                std::thread::Builder::new()
                    .name(format!("load-{i}"))
                    .spawn(move || {
                        while shared.next() {
                            shared.record(one_request(&shared.spec, &body));
                        }
                    })
                    .expect("spawn a load worker")
            })
            .collect();
        Load { shared, workers }
    }

    /// The counts so far (requests in flight are not counted as ok or failed yet).
    pub fn report(&self) -> Report {
        self.shared.report()
    }

    /// True once every worker has ended (a limit was reached).
    pub fn is_finished(&self) -> bool {
        self.workers.iter().all(|w| w.is_finished())
    }

    /// Starts no new request, waits for the ones in flight (each bounded by
    /// the request timeout) and returns the final report. Blocks.
    pub fn stop(self) -> Report {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.wait()
    }

    /// [`Load::stop`] without blocking the async runtime.
    pub async fn stop_async(self) -> Report {
        tokio::task::spawn_blocking(move || self.stop())
            .await
            .expect("the load's stop does not panic")
    }

    /// Waits until a limit ends the load (blocks) and returns the report.
    pub fn wait(mut self) -> Report {
        for w in self.workers.drain(..) {
            w.join().expect("a load worker panicked");
        }
        self.shared.report()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        // A test that panics mid-phase must not leave workers sending.
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

fn chat_request(spec: &LoadSpec) -> String {
    let body = serde_json::json!({
        "model": spec.model,
        "messages": [{"role": "user", "content": "Tell me about rolling updates"}],
        "max_tokens": spec.max_tokens,
        "stream": true,
    })
    .to_string();
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nAccept: text/event-stream\r\n\
         Content-Length: {}\r\n\r\n{body}",
        spec.addr,
        body.len()
    )
}

fn io_failure(e: &std::io::Error, connecting: bool) -> Failure {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused => Failure::Refused,
        ConnectionReset | ConnectionAborted | BrokenPipe => Failure::Reset,
        TimedOut | WouldBlock if connecting => Failure::ConnectTimeout,
        TimedOut | WouldBlock => Failure::Timeout,
        _ if connecting => Failure::Connect,
        _ => Failure::Other,
    }
}

/// One streaming chat completion on a new connection: its latency, or why it failed.
fn one_request(spec: &LoadSpec, request: &str) -> Result<Duration, (Failure, String)> {
    let started = Instant::now();
    let deadline = started + spec.request_timeout;
    let fail = |kind: Failure, detail: String| Err((kind, detail));
    let mut s = match TcpStream::connect_timeout(&spec.addr, spec.connect_timeout) {
        Ok(s) => s,
        Err(e) => return fail(io_failure(&e, true), format!("connect {}: {e}", spec.addr)),
    };
    let _ = s.set_nodelay(true);
    if let Err(e) = s.write_all(request.as_bytes()) {
        return fail(io_failure(&e, false), format!("send: {e}"));
    }
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return fail(
                Failure::Timeout,
                format!(
                    "no end after {:?} ({} bytes read)",
                    spec.request_timeout,
                    raw.len()
                ),
            );
        }
        if let Err(e) = s.set_read_timeout(Some(left)) {
            return fail(Failure::Other, format!("set_read_timeout: {e}"));
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                let kind = io_failure(&e, false);
                let detail = format!("read after {} bytes: {e}", raw.len());
                return fail(kind, detail);
            }
        }
        if response_complete(&raw) {
            break;
        }
    }
    match check_response(&raw) {
        Ok(()) => Ok(started.elapsed()),
        Err((kind, detail)) => fail(kind, detail),
    }
}

/// The headers and the body of a response, the body de-chunked when chunked;
/// the bool says whether a chunked body ended with its last (zero) chunk.
fn split_response(raw: &[u8]) -> Option<(String, String, bool)> {
    let text = String::from_utf8_lossy(raw);
    let (head, rest) = text.split_once("\r\n\r\n")?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Some((head.to_string(), rest.to_string(), false));
    }
    let mut body = String::new();
    let mut rest = rest;
    let mut ended = false;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = size.split(';').next().unwrap_or("").trim();
        let Ok(n) = usize::from_str_radix(size, 16) else {
            break;
        };
        if n == 0 {
            ended = true;
            break;
        }
        if after.len() < n {
            body.push_str(after);
            break;
        }
        body.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    Some((head.to_string(), body, ended))
}

/// True once the response is complete: a chunked body with its last chunk,
/// or a body of its Content-Length (the server may keep the connection open
/// a moment longer; no need to wait for its close).
fn response_complete(raw: &[u8]) -> bool {
    let Some((head, body, ended)) = split_response(raw) else {
        return false;
    };
    let content_length = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    match content_length {
        Some(n) => body.len() >= n,
        None => ended,
    }
}

fn check_response(raw: &[u8]) -> Result<(), (Failure, String)> {
    let Some((head, body, _)) = split_response(raw) else {
        let kind = if raw.is_empty() {
            Failure::Truncated
        } else {
            Failure::Other
        };
        return Err((
            kind,
            format!("no complete response head ({} bytes)", raw.len()),
        ));
    };
    let status_line = head.lines().next().unwrap_or("");
    let code: Option<u16> = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok());
    match code {
        Some(200) => {}
        Some(code) => {
            let snippet: String = body.chars().take(120).collect();
            return Err((Failure::Status, format!("{code}: {snippet}")));
        }
        None => return Err((Failure::Other, format!("not HTTP: {status_line:?}"))),
    }
    let events: Vec<&str> = body
        .split("\n\n")
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    let aborted = [
        "\"finish_reason\":\"abort\"",
        "\"finish_reason\": \"abort\"",
    ];
    if let Some(event) = events
        .iter()
        .find(|e| aborted.iter().any(|a| e.contains(a)))
    {
        let snippet: String = event.chars().take(120).collect();
        return Err((Failure::Aborted, snippet));
    }
    match events.last() {
        Some(&"data: [DONE]") => Ok(()),
        last => Err((
            Failure::Truncated,
            format!(
                "{} events, the last {:?}",
                events.len(),
                last.map(|e| e.chars().take(60).collect::<String>())
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Shutdown, TcpListener};

    /// A tiny SSE server on 127.0.0.1: each connection gets `events` chat
    /// chunks `delay` apart, then `data: [DONE]` (or the `status` instead of
    /// 200). `kill()` stops it the way a killed process does: every open
    /// connection is cut, and the port refuses new ones.
    struct TinyServer {
        addr: SocketAddr,
        killed: Arc<AtomicBool>,
        open: Arc<Mutex<Vec<TcpStream>>>,
        accepted: Arc<AtomicU64>,
        thread: Option<JoinHandle<()>>,
    }

    #[derive(Clone, Copy)]
    enum Mode {
        Stream { events: usize, delay: Duration },
        Status(u16),
        Silent,
    }

    impl TinyServer {
        fn start(mode: Mode) -> TinyServer {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            let addr = listener.local_addr().unwrap();
            let killed = Arc::new(AtomicBool::new(false));
            let open = Arc::new(Mutex::new(Vec::new()));
            let accepted = Arc::new(AtomicU64::new(0));
            let thread = {
                let (killed, open, accepted) = (killed.clone(), open.clone(), accepted.clone());
                std::thread::spawn(move || {
                    while !killed.load(Ordering::SeqCst) {
                        match listener.accept() {
                            Ok((s, _)) => {
                                if killed.load(Ordering::SeqCst) {
                                    break;
                                }
                                s.set_nonblocking(false).unwrap();
                                accepted.fetch_add(1, Ordering::SeqCst);
                                open.lock().unwrap().push(s.try_clone().unwrap());
                                let killed = killed.clone();
                                std::thread::spawn(move || serve(s, mode, &killed));
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                                std::thread::sleep(Duration::from_millis(2));
                            }
                            Err(e) => panic!("accept: {e}"),
                        }
                    }
                    // The listener is dropped here: the port refuses connections.
                })
            };
            TinyServer {
                addr,
                killed,
                open,
                accepted,
                thread: Some(thread),
            }
        }

        fn kill(&mut self) {
            self.killed.store(true, Ordering::SeqCst);
            for s in self.open.lock().unwrap().drain(..) {
                let _ = s.shutdown(Shutdown::Both);
            }
            if let Some(t) = self.thread.take() {
                t.join().unwrap();
            }
        }
    }

    impl Drop for TinyServer {
        fn drop(&mut self) {
            self.kill();
        }
    }

    fn serve(mut s: TcpStream, mode: Mode, killed: &AtomicBool) {
        // Read the request head and body (Content-Length).
        let mut req = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => req.extend_from_slice(&buf[..n]),
            }
            let text = String::from_utf8_lossy(&req);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if body.len() >= len {
                    assert!(head.starts_with("POST /v1/chat/completions HTTP/1.1"));
                    assert!(body.contains("\"stream\":true"), "{body}");
                    break;
                }
            }
        }
        let chunk = |s: &mut TcpStream, data: &str| {
            write!(s, "{:x}\r\n{data}\r\n", data.len()).and_then(|_| s.flush())
        };
        match mode {
            Mode::Silent => {
                while !killed.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            Mode::Status(code) => {
                let body = "{\"error\":{\"message\":\"overloaded\"}}";
                let _ = write!(
                    s,
                    "HTTP/1.1 {code} Nope\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
            Mode::Stream { events, delay } => {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                            transfer-encoding: chunked\r\nconnection: close\r\n\r\n";
                if s.write_all(head.as_bytes()).is_err() {
                    return;
                }
                for i in 0..events {
                    std::thread::sleep(delay);
                    if killed.load(Ordering::SeqCst) {
                        return;
                    }
                    let data = format!(
                        "data: {{\"choices\":[{{\"delta\":{{\"content\":\"w{i}\"}}}}]}}\n\n"
                    );
                    if chunk(&mut s, &data).is_err() {
                        return;
                    }
                }
                let _ = chunk(&mut s, "data: [DONE]\n\n").and_then(|_| s.write_all(b"0\r\n\r\n"));
            }
        }
    }

    fn spec(addr: SocketAddr) -> LoadSpec {
        LoadSpec {
            concurrency: 4,
            max_requests: 40,
            max_duration: Duration::from_secs(20),
            request_timeout: Duration::from_secs(5),
            ..LoadSpec::new(addr, "qwen")
        }
    }

    #[test]
    fn complete_streams_all_count_as_ok_up_to_the_request_limit() {
        let server = TinyServer::start(Mode::Stream {
            events: 3,
            delay: Duration::from_millis(2),
        });
        let report = Load::start(spec(server.addr)).wait();
        assert_eq!(
            (report.sent, report.ok, report.failed),
            (40, 40, 0),
            "{}",
            report.summary()
        );
        assert_eq!(server.accepted.load(Ordering::SeqCst), 40);
        assert_eq!(report.latencies.len(), 40);
        assert!(report.median().unwrap() <= report.p99().unwrap());
    }

    #[test]
    fn a_server_killed_mid_stream_gives_truncated_streams_then_refused_connections() {
        let mut server = TinyServer::start(Mode::Stream {
            events: 50,
            delay: Duration::from_millis(10),
        });
        let load = Load::start(LoadSpec {
            max_requests: 200,
            ..spec(server.addr)
        });
        // Kill once all four workers are in the middle of a stream.
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.accepted.load(Ordering::SeqCst) < 4 {
            assert!(Instant::now() < deadline, "the load never connected");
            std::thread::sleep(Duration::from_millis(5));
        }
        server.kill();
        let report = load.wait();
        assert_eq!(report.ok, 0, "{}", report.summary());
        assert_eq!(report.sent, 200, "{}", report.summary());
        assert_eq!(report.failed, 200, "{}", report.summary());
        assert!(
            report
                .failures
                .get(&Failure::Truncated)
                .copied()
                .unwrap_or(0)
                >= 4,
            "the four streams in flight end without [DONE]: {}",
            report.summary()
        );
        assert!(
            report.failures.contains_key(&Failure::Refused),
            "later connections are refused: {}",
            report.summary()
        );
        assert_eq!(report.first_failures.len(), FIRST_FAILURES);
        assert!(report.summary().contains("stream ended without [DONE]"));
    }

    #[test]
    fn a_non_200_answer_is_a_failure_with_its_status() {
        let server = TinyServer::start(Mode::Status(503));
        let report = Load::start(LoadSpec {
            max_requests: 8,
            ..spec(server.addr)
        })
        .wait();
        assert_eq!((report.sent, report.failed), (8, 8), "{}", report.summary());
        assert_eq!(
            report.failures.get(&Failure::Status),
            Some(&8),
            "{report:?}"
        );
        assert!(report.first_failures[0].1.starts_with("503"), "{report:?}");
        assert_eq!(report.median(), None);
    }

    #[test]
    fn a_server_that_never_answers_times_out() {
        let server = TinyServer::start(Mode::Silent);
        let report = Load::start(LoadSpec {
            concurrency: 2,
            max_requests: 4,
            request_timeout: Duration::from_millis(200),
            ..spec(server.addr)
        })
        .wait();
        assert_eq!(
            report.failures.get(&Failure::Timeout),
            Some(&4),
            "{report:?}"
        );
    }

    #[test]
    fn the_time_limit_and_stop_end_the_load() {
        let server = TinyServer::start(Mode::Stream {
            events: 5,
            delay: Duration::from_millis(10),
        });
        let timed = Load::start(LoadSpec {
            max_requests: u64::MAX,
            max_duration: Duration::from_millis(300),
            ..spec(server.addr)
        })
        .wait();
        assert!(timed.sent > 0 && timed.failed == 0, "{}", timed.summary());
        assert!(
            timed.elapsed < Duration::from_secs(5),
            "{}",
            timed.summary()
        );

        let load = Load::start(LoadSpec {
            max_requests: u64::MAX,
            ..spec(server.addr)
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while load.report().ok < 8 {
            assert!(Instant::now() < deadline, "{}", load.report().summary());
            std::thread::sleep(Duration::from_millis(5));
        }
        let stopped = load.stop();
        // Requests in flight at the stop are finished and counted.
        assert_eq!(stopped.sent, stopped.ok, "{}", stopped.summary());
    }

    #[test]
    fn a_refused_port_counts_refused() {
        let addr = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let report = Load::start(LoadSpec {
            max_requests: 3,
            ..spec(addr)
        })
        .wait();
        assert_eq!(
            report.failures.get(&Failure::Refused),
            Some(&3),
            "{report:?}"
        );
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let ms: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&ms, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(quantile(&ms, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(quantile(&ms, 1.0), Some(Duration::from_millis(100)));
        assert_eq!(quantile(&ms[..1], 0.99), Some(Duration::from_millis(1)));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn responses_are_checked_for_status_and_done() {
        let ok = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                   f\r\ndata: {\"a\":1}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n";
        assert!(response_complete(ok));
        assert_eq!(check_response(ok), Ok(()));
        let cut =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nf\r\ndata: {\"a\":1}\n\n\r\n";
        assert!(!response_complete(cut));
        assert_eq!(check_response(cut).unwrap_err().0, Failure::Truncated);
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 14\r\n\r\ndata: [DONE]\n\n";
        assert_eq!(check_response(plain), Ok(()));
        assert_eq!(check_response(b"").unwrap_err().0, Failure::Truncated);
        // A draining vLLM's answer to a new request: complete, and empty.
        let aborted = b"HTTP/1.1 200 OK\r\ncontent-length: 86\r\n\r\n\
                        data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"abort\"}]}\n\n\
                        data: [DONE]\n\n";
        assert_eq!(check_response(aborted).unwrap_err().0, Failure::Aborted);
        assert_eq!(
            check_response(b"garbage\r\n\r\n").unwrap_err().0,
            Failure::Other
        );
    }
}
