//! The simulated OpenAI-compatible server: vLLM's endpoints and response shapes, a scheduler that
//! runs at most `--max-num-seqs` requests at once (the rest wait), deterministic text, metrics.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};

use crate::log::{self, Proc};
use crate::metrics::{self, CacheInfo, FINISH_REASONS, Stats};

/// `finished_reason="abort"`'s place in FINISH_REASONS.
const ABORT: usize = 2;
use crate::model::BLOCK_SIZE;

/// `max_tokens` when a request does not set it (the OpenAI completions default).
pub const DEFAULT_MAX_TOKENS: u64 = 16;

/// The words generated text cycles through.
const WORDS: &[&str] = &[
    "The",
    "simulated",
    "model",
    "answers",
    "with",
    "these",
    "words",
    "in",
    "a",
    "fixed",
    "order",
    "so",
    "tests",
    "can",
    "predict",
    "them.",
];

pub fn token_text(i: u64) -> String {
    let w = WORDS[(i % WORDS.len() as u64) as usize];
    if i == 0 {
        w.to_string()
    } else {
        format!(" {w}")
    }
}

/// The simulator's token count: whitespace-separated words (at least 1).
pub fn count_tokens(text: &str) -> u64 {
    (text.split_whitespace().count() as u64).max(1)
}

pub struct Served {
    pub names: Vec<String>,
    pub model_path: String,
    pub max_model_len: u64,
    /// The static LoRA adapters (`--lora-modules`), loaded.
    pub loras: Vec<crate::lora::ServedLora>,
    pub version: String,
    pub token_delay: Duration,
    pub num_gpu_blocks: u64,
    pub gpu_memory_utilization: f64,
    pub release: crate::release::Release,
    /// `--enable-server-load-tracking`: `/load` counts requests (else it stays 0, as vLLM's).
    pub load_tracking: bool,
}

pub struct App {
    pub served: Served,
    sem: Arc<Semaphore>,
    pub stats: Mutex<Stats>,
    pub dead: AtomicBool,
    /// SIGTERM was received: new requests are answered with an abort (src/shutdown.rs).
    shutting_down: AtomicBool,
    counter: AtomicU64,
    created: u64,
    /// When the metrics were created (their `_created` samples), Unix seconds.
    created_at: f64,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl App {
    pub fn new(served: Served, max_num_seqs: u32) -> Arc<App> {
        Arc::new(App {
            served,
            sem: Arc::new(Semaphore::new(max_num_seqs.max(1) as usize)),
            stats: Mutex::new(Stats::default()),
            dead: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            counter: AtomicU64::new(0),
            created: unix_now(),
            created_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
        })
    }

    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn in_flight(&self) -> u64 {
        let s = self.stats();
        s.running + s.waiting
    }

    fn request_id(&self, prefix: &str) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!(
            "{prefix}-{:016x}{:08x}{:08x}",
            self.created ^ 0x5eed_5eed,
            nanos,
            n
        )
    }

    fn serves(&self, model: &str) -> bool {
        self.served.names.iter().any(|n| n == model)
            || self.served.loras.iter().any(|l| l.name == model)
    }
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/ping", get(health).post(health))
        .route("/version", get(version))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics_handler))
        .route("/load", get(load))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .fallback(not_found)
        .with_state(app)
}

/// The routes vLLM's launcher lists at start-up.
pub const ROUTES: &[(&str, &str)] = &[
    ("/health", "GET"),
    ("/ping", "GET, POST"),
    ("/version", "GET"),
    ("/v1/models", "GET"),
    ("/metrics", "GET"),
    ("/load", "GET"),
    ("/tokenize", "POST"),
    ("/detokenize", "POST"),
    ("/v1/completions", "POST"),
    ("/v1/chat/completions", "POST"),
];

fn json_response(status: StatusCode, v: &Value) -> Response {
    let mut r = (status, v.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// vLLM's `ErrorResponse` shape.
fn error_response(status: StatusCode, kind: &str, message: &str, param: Option<&str>) -> Response {
    json_response(
        status,
        &json!({"error": {"message": message, "type": kind, "param": param, "code": status.as_u16()}}),
    )
}

async fn not_found() -> Response {
    json_response(StatusCode::NOT_FOUND, &json!({"detail": "Not Found"}))
}

async fn health(State(app): State<Arc<App>>) -> StatusCode {
    if app.dead.load(Ordering::SeqCst) {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

async fn version(State(app): State<Arc<App>>) -> Response {
    json_response(StatusCode::OK, &json!({"version": app.served.version}))
}

/// vLLM's `/load`: the requests being served, counted only with `--enable-server-load-tracking`.
async fn load(State(app): State<Arc<App>>) -> Response {
    let n = if app.served.load_tracking {
        app.in_flight()
    } else {
        0
    };
    json_response(StatusCode::OK, &json!({"server_load": n}))
}

/// The simulator's token id of a word: its place in the generated words if it is one, so that
/// `/detokenize` gives them back, else a stable number past them.
fn token_id(word: &str) -> u64 {
    if let Some(i) = WORDS.iter().position(|w| *w == word) {
        return i as u64;
    }
    let h = word.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    WORDS.len() as u64 + h % 100_000
}

/// The body of a `/tokenize` or `/detokenize` request: a JSON object whose
/// `model`, if given, is one this server serves.
fn tokenizer_request(app: &App, body: &[u8]) -> Result<Value, Box<Response>> {
    let req: Value = match serde_json::from_slice(body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return Err(Box::new(bad_request(
                "Invalid JSON body: expected an object",
            )));
        }
    };
    if let Some(model) = req.get("model").and_then(Value::as_str)
        && !app.serves(model)
    {
        return Err(Box::new(model_not_found(model)));
    }
    Ok(req)
}

/// `POST /tokenize` (`prompt` or chat `messages`): vLLM's TokenizeResponse, with the
/// simulator's tokens (whitespace-separated words, as counted for `usage`).
async fn tokenize(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let req = match tokenizer_request(&app, &body) {
        Ok(req) => req,
        Err(response) => return *response,
    };
    let text = if let Some(msgs) = req.get("messages").and_then(Value::as_array) {
        let parts: Vec<String> = msgs
            .iter()
            .map(|m| text_content(m.get("content").unwrap_or(&Value::Null)))
            .collect();
        parts.join(" ")
    } else if let Some(p) = req.get("prompt").and_then(Value::as_str) {
        p.to_string()
    } else {
        return bad_request("Either prompt or messages must be provided.");
    };
    let tokens: Vec<u64> = text.split_whitespace().map(token_id).collect();
    json_response(
        StatusCode::OK,
        &json!({"count": tokens.len(), "max_model_len": app.served.max_model_len,
                "tokens": tokens, "token_strs": null}),
    )
}

/// `POST /detokenize` (`tokens`): the generated words the ids stand for (`token_text`).
async fn detokenize(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let req = match tokenizer_request(&app, &body) {
        Ok(req) => req,
        Err(response) => return *response,
    };
    let Some(ids) = req
        .get("tokens")
        .and_then(Value::as_array)
        .and_then(|t| t.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
    else {
        return bad_request("tokens must be a list of non-negative integers");
    };
    let words: Vec<&str> = ids
        .iter()
        .map(|i| WORDS[(*i % WORDS.len() as u64) as usize])
        .collect();
    json_response(StatusCode::OK, &json!({"prompt": words.join(" ")}))
}

fn model_not_found(model: &str) -> Response {
    error_response(
        StatusCode::NOT_FOUND,
        "NotFoundError",
        &format!("The model `{model}` does not exist."),
        Some("model"),
    )
}

async fn models(State(app): State<Arc<App>>) -> Response {
    let s = &app.served;
    // vLLM's ModelCard; its LoRA cards carry no max_model_len.
    let card = |id: &str, root: &str, parent: Option<&str>| {
        json!({
            "id": id, "object": "model", "created": app.created, "owned_by": "vllm", "root": root,
            "parent": parent, "max_model_len": if parent.is_none() { Some(s.max_model_len) } else { None },
            "permission": [{
                "id": format!("modelperm-{:032x}", app.created), "object": "model_permission",
                "created": app.created, "allow_create_engine": false, "allow_sampling": true,
                "allow_logprobs": true, "allow_search_indices": false, "allow_view": true,
                "allow_fine_tuning": false, "organization": "*", "group": null, "is_blocking": false
            }]
        })
    };
    let mut data: Vec<Value> = s
        .names
        .iter()
        .map(|n| card(n, &s.model_path, None))
        .collect();
    for l in &s.loras {
        data.push(card(&l.name, &l.path, Some(&l.parent)));
    }
    json_response(StatusCode::OK, &json!({"object": "list", "data": data}))
}

async fn metrics_handler(State(app): State<Arc<App>>) -> Response {
    let text = {
        let stats = app.stats();
        metrics::render(
            &app.served.names[0],
            &stats,
            &CacheInfo {
                num_gpu_blocks: app.served.num_gpu_blocks,
                gpu_memory_utilization: app.served.gpu_memory_utilization,
            },
            app.created_at,
        )
    };
    let mut r = (StatusCode::OK, text).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

#[derive(Clone, Copy, PartialEq)]
enum Api {
    Completion,
    Chat,
}

struct Job {
    api: Api,
    id: String,
    created: u64,
    model: String,
    prompt_tokens: u64,
    include_usage: bool,
}

enum Msg {
    Token(String),
    Finished(&'static str),
}

/// Decrements the scheduler's counters however a request ends.
struct Running {
    app: Arc<App>,
    blocks: u64,
    started: Instant,
    reason: usize,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut s = self.app.stats();
        s.running -= 1;
        s.kv_blocks_used -= self.blocks;
        s.success[self.reason] += 1;
        s.e2e.observe(self.started.elapsed().as_secs_f64());
    }
}

/// Waits for a slot (`--max-num-seqs`), then produces `max_tokens` tokens, one per token delay.
async fn generate(app: Arc<App>, prompt_tokens: u64, max_tokens: u64, tx: mpsc::Sender<Msg>) {
    let arrived = Instant::now();
    app.stats().waiting += 1;
    let permit = app.sem.clone().acquire_owned().await;
    let blocks = prompt_tokens.div_ceil(BLOCK_SIZE).max(1);
    let mut run = {
        let mut s = app.stats();
        s.waiting -= 1;
        s.running += 1;
        s.prompt_tokens += prompt_tokens;
        s.kv_blocks_used += blocks;
        s.queue.observe(arrived.elapsed().as_secs_f64());
        Running {
            app: app.clone(),
            blocks,
            started: arrived,
            reason: ABORT,
        }
    };
    let mut last = Instant::now();
    for i in 0..max_tokens {
        tokio::time::sleep(app.served.token_delay).await;
        if app.dead.load(Ordering::SeqCst) || tx.send(Msg::Token(token_text(i))).await.is_err() {
            // Engine died or the client went away: aborted.
            drop(permit);
            return;
        }
        let mut s = app.stats();
        s.generation_tokens += 1;
        if i == 0 {
            s.ttft.observe(arrived.elapsed().as_secs_f64());
        } else {
            s.itl.observe(last.elapsed().as_secs_f64());
        }
        last = Instant::now();
        let want = (prompt_tokens + i + 1).div_ceil(BLOCK_SIZE);
        if want > run.blocks {
            s.kv_blocks_used += want - run.blocks;
            run.blocks = want;
        }
    }
    run.reason = FINISH_REASONS
        .iter()
        .position(|r| *r == "length")
        .unwrap_or(1);
    drop(run);
    drop(permit);
    let _ = tx.send(Msg::Finished("length")).await;
}

fn text_content(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str).or_else(|| p.as_str()))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

fn prompt_tokens_of(prompt: &Value) -> Option<u64> {
    match prompt {
        Value::String(s) => Some(count_tokens(s)),
        Value::Array(items) if items.iter().all(Value::is_number) => {
            Some((items.len() as u64).max(1))
        }
        Value::Array(items) if !items.is_empty() => {
            let mut total = 0;
            for it in items {
                total += prompt_tokens_of(it)?;
            }
            Some(total)
        }
        _ => None,
    }
}

fn bad_request(message: &str) -> Response {
    error_response(StatusCode::BAD_REQUEST, "BadRequestError", message, None)
}

async fn completions(State(app): State<Arc<App>>, body: Bytes) -> Response {
    handle(app, body, Api::Completion).await
}

async fn chat_completions(State(app): State<Arc<App>>, body: Bytes) -> Response {
    handle(app, body, Api::Chat).await
}

async fn handle(app: Arc<App>, body: Bytes, api: Api) -> Response {
    if app.dead.load(Ordering::SeqCst) {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    let req: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return bad_request("Invalid JSON body: expected an object"),
    };
    let model = match req.get("model").and_then(Value::as_str) {
        Some(m) => m.to_string(),
        None => app.served.names[0].clone(),
    };
    if !app.serves(&model) {
        return model_not_found(&model);
    }
    let prompt_tokens = match api {
        Api::Completion => match req.get("prompt").and_then(prompt_tokens_of) {
            Some(n) => n,
            None => {
                return bad_request(
                    "Either prompt or prompt_embeds must be provided and non-empty.",
                );
            }
        },
        Api::Chat => match req.get("messages").and_then(Value::as_array) {
            Some(msgs) if !msgs.is_empty() => {
                let text: Vec<String> = msgs
                    .iter()
                    .map(|m| text_content(m.get("content").unwrap_or(&Value::Null)))
                    .collect();
                count_tokens(&text.join(" "))
            }
            _ => return bad_request("'messages' must be a non-empty list"),
        },
    };
    let max_tokens = req
        .get("max_completion_tokens")
        .filter(|v| !v.is_null())
        .or_else(|| req.get("max_tokens").filter(|v| !v.is_null()))
        .map(|v| v.as_u64())
        .unwrap_or(Some(DEFAULT_MAX_TOKENS));
    let Some(max_tokens) = max_tokens else {
        return bad_request("max_tokens must be a non-negative integer");
    };
    let limit = app.served.max_model_len;
    if prompt_tokens >= limit {
        return bad_request(&format!(
            "This model's maximum context length is {limit} tokens. However, your request has \
             {prompt_tokens} input tokens. Please reduce the length of the input messages."
        ));
    }
    if prompt_tokens + max_tokens > limit {
        return bad_request(&format!(
            "'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum \
             context length is {limit} tokens and your request has {prompt_tokens} input tokens \
             ({max_tokens} > {limit} - {prompt_tokens})."
        ));
    }
    let stream = req.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = req
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let job = Job {
        api,
        id: app.request_id(if api == Api::Chat { "chatcmpl" } else { "cmpl" }),
        created: unix_now(),
        model,
        prompt_tokens,
        include_usage,
    };
    let (tx, rx) = mpsc::channel(64);
    if app.shutting_down.load(Ordering::SeqCst) {
        // The engine core rejects a request added during shutdown with an abort output:
        // HTTP 200, no tokens, finish_reason "abort".
        app.served.release.shutdown_log().rejected(&job.id);
        app.stats().success[ABORT] += 1;
        let _ = tx.try_send(Msg::Finished("abort"));
    } else {
        tokio::spawn(generate(app.clone(), prompt_tokens, max_tokens, tx));
    }
    if stream {
        stream_response(job, rx)
    } else {
        full_response(job, rx).await
    }
}

fn usage(job: &Job, completion: u64) -> Value {
    json!({"prompt_tokens": job.prompt_tokens, "total_tokens": job.prompt_tokens + completion,
           "completion_tokens": completion, "prompt_tokens_details": null})
}

async fn full_response(job: Job, mut rx: mpsc::Receiver<Msg>) -> Response {
    let mut text = String::new();
    let mut n = 0;
    let reason = loop {
        match rx.recv().await {
            Some(Msg::Token(t)) => {
                text.push_str(&t);
                n += 1;
            }
            Some(Msg::Finished(r)) => break r,
            None => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        }
    };
    let choice = match job.api {
        Api::Completion => {
            json!({"index": 0, "text": text, "logprobs": null, "finish_reason": reason,
                                  "stop_reason": null, "prompt_logprobs": null})
        }
        Api::Chat => {
            json!({"index": 0, "message": {"role": "assistant", "content": text, "refusal": null,
                                                    "annotations": null, "audio": null, "function_call": null,
                                                    "tool_calls": [], "reasoning_content": null},
                            "logprobs": null, "finish_reason": reason, "stop_reason": null})
        }
    };
    let object = if job.api == Api::Chat {
        "chat.completion"
    } else {
        "text_completion"
    };
    json_response(
        StatusCode::OK,
        &json!({"id": job.id, "object": object, "created": job.created, "model": job.model,
                "choices": [choice], "usage": usage(&job, n), "system_fingerprint": null}),
    )
}

fn chunk(job: &Job, delta: Option<&str>, role: bool, reason: Option<&str>) -> String {
    let choice = match job.api {
        Api::Completion => json!({"index": 0, "text": delta.unwrap_or(""), "logprobs": null,
                                  "finish_reason": reason, "stop_reason": null}),
        Api::Chat => {
            let d = if role {
                json!({"role": "assistant", "content": ""})
            } else {
                json!({"content": delta.unwrap_or("")})
            };
            json!({"index": 0, "delta": d, "logprobs": null, "finish_reason": reason, "stop_reason": null})
        }
    };
    let object = if job.api == Api::Chat {
        "chat.completion.chunk"
    } else {
        "text_completion"
    };
    let v = json!({"id": job.id, "object": object, "created": job.created, "model": job.model, "choices": [choice]});
    format!("data: {v}\n\n")
}

struct StreamState {
    job: Job,
    rx: mpsc::Receiver<Msg>,
    pending: VecDeque<String>,
    done: bool,
    n: u64,
}

/// Server-sent events: `data: {...}` chunks, then `data: [DONE]`. A request aborted (engine dead,
/// shutdown) ends with a body error, so the connection is cut without `[DONE]`.
fn stream_response(job: Job, rx: mpsc::Receiver<Msg>) -> Response {
    let mut pending = VecDeque::new();
    if job.api == Api::Chat {
        pending.push_back(chunk(&job, None, true, None));
    }
    let state = StreamState {
        job,
        rx,
        pending,
        done: false,
        n: 0,
    };
    let s = futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(next) = st.pending.pop_front() {
                return Some((Ok::<_, std::io::Error>(next), st));
            }
            if st.done {
                return None;
            }
            match st.rx.recv().await {
                Some(Msg::Token(t)) => {
                    st.n += 1;
                    let c = chunk(&st.job, Some(&t), false, None);
                    st.pending.push_back(c);
                }
                Some(Msg::Finished(reason)) => {
                    let c = chunk(&st.job, Some(""), false, Some(reason));
                    st.pending.push_back(c);
                    if st.job.include_usage {
                        let object = if st.job.api == Api::Chat {
                            "chat.completion.chunk"
                        } else {
                            "text_completion"
                        };
                        let v = json!({"id": st.job.id, "object": object, "created": st.job.created,
                                       "model": st.job.model, "choices": [], "usage": usage(&st.job, st.n)});
                        st.pending.push_back(format!("data: {v}\n\n"));
                    }
                    st.pending.push_back("data: [DONE]\n\n".to_string());
                    st.done = true;
                }
                None => {
                    st.done = true;
                    return Some((Err(std::io::Error::other("request aborted")), st));
                }
            }
        }
    });
    let mut r = Response::new(Body::from_stream(s));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    r
}

/// vLLM's periodic stats line (vllm/v1/metrics/loggers.py, `LoggingStatLogger`), every 10 s
/// while there is activity.
pub async fn log_stats(app: Arc<App>) -> Infallible {
    let mut last = (0u64, 0u64);
    let mut interval = tokio::time::interval(Duration::from_secs(10));
    interval.tick().await;
    loop {
        interval.tick().await;
        let (prompt, gen_tokens, running, waiting, blocks) = {
            let s = app.stats();
            (
                s.prompt_tokens,
                s.generation_tokens,
                s.running,
                s.waiting,
                s.kv_blocks_used,
            )
        };
        if (prompt, gen_tokens) == last && running == 0 && waiting == 0 {
            continue;
        }
        let usage = if app.served.num_gpu_blocks == 0 {
            0.0
        } else {
            100.0 * blocks as f64 / app.served.num_gpu_blocks as f64
        };
        log::info(
            Proc::Api,
            "loggers.py:123",
            &format!(
                "Engine 000: Avg prompt throughput: {:.1} tokens/s, Avg generation throughput: {:.1} tokens/s, \
                 Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: {usage:.1}%, Prefix \
                 cache hit rate: 0.0%",
                (prompt - last.0) as f64 / 10.0,
                (gen_tokens - last.1) as f64 / 10.0
            ),
        );
        last = (prompt, gen_tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tokens_and_text() {
        assert_eq!(count_tokens("  hello big   world "), 3);
        assert_eq!(count_tokens(""), 1);
        let text: String = (0..3).map(token_text).collect();
        assert_eq!(text, "The simulated model");
        assert_eq!(prompt_tokens_of(&json!("a b c")), Some(3));
        assert_eq!(prompt_tokens_of(&json!([1, 2, 3, 4])), Some(4));
        assert_eq!(prompt_tokens_of(&json!(["a b", "c"])), Some(3));
        assert_eq!(prompt_tokens_of(&json!(null)), None);
        assert_eq!(
            text_content(&json!([{"type": "text", "text": "hi there"}])),
            "hi there"
        );
    }
}
