//! Prometheus text with vLLM's metric names, help texts, labels and buckets
//! (vllm/v1/metrics/loggers.py, `PrometheusStatLogger`). Labels are `engine` and `model_name`
//! (sorted, as prometheus_client writes them); values are Python floats. As prometheus_client
//! does by default, every counter and histogram also has a `_created` sample (its creation time).

use crate::py;

/// `vllm:time_to_first_token_seconds` buckets.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// `request_latency_buckets` (e2e, queue, inference, prefill, decode).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// `vllm:time_per_output_token_seconds` / inter-token latency buckets.
pub const TPOT_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];

/// vLLM's `FinishReason` values (`FINISH_REASON_STRINGS`), as `finished_reason` labels. The
/// simulator never finishes with `repetition`.
pub const FINISH_REASONS: &[&str] = &["stop", "length", "abort", "error", "repetition"];

#[derive(Debug, Clone)]
pub struct Histogram {
    pub buckets: &'static [f64],
    pub counts: Vec<u64>,
    pub count: u64,
    pub sum: f64,
}

impl Histogram {
    pub fn new(buckets: &'static [f64]) -> Self {
        Histogram {
            buckets,
            counts: vec![0; buckets.len()],
            count: 0,
            sum: 0.0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        for (i, b) in self.buckets.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += v;
    }
}

#[derive(Debug, Clone)]
pub struct Stats {
    pub running: u64,
    pub waiting: u64,
    pub kv_blocks_used: u64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    /// Indexed like FINISH_REASONS.
    pub success: [u64; 5],
    pub ttft: Histogram,
    pub e2e: Histogram,
    pub queue: Histogram,
    pub itl: Histogram,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            running: 0,
            waiting: 0,
            kv_blocks_used: 0,
            prompt_tokens: 0,
            generation_tokens: 0,
            success: [0; 5],
            ttft: Histogram::new(TTFT_BUCKETS),
            e2e: Histogram::new(LATENCY_BUCKETS),
            queue: Histogram::new(LATENCY_BUCKETS),
            itl: Histogram::new(TPOT_BUCKETS),
        }
    }
}

/// The static facts behind `vllm:cache_config_info`.
pub struct CacheInfo {
    pub num_gpu_blocks: u64,
    pub gpu_memory_utilization: f64,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Writer {
    out: String,
    labels: String,
    /// `_created` samples' value, prometheus_client's rendering of the creation time.
    created: String,
}

/// prometheus_client's `floatToGoString`: Go's `%g`-like exponent form for large numbers
/// (`1.733616012345678e+09`), Python's repr otherwise.
pub fn go_float(v: f64) -> String {
    let s = py::float(v);
    match s.find('.') {
        Some(dot) if v > 0.0 && dot > 6 => {
            let digits = format!("{}{}", &s[1..dot], &s[dot + 1..]);
            let mantissa = format!("{}.{digits}", &s[..1]);
            let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
            format!("{mantissa}e+0{}", dot - 1)
        }
        _ => s,
    }
}

impl Writer {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        self.out
            .push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
    }

    fn sample(&mut self, name: &str, extra: &[(&str, String)], value: f64) {
        let v = py::float(value);
        self.raw(name, extra, true, &v);
    }

    /// One sample line; `model_name` is left out of the metrics that have no such label.
    fn raw(&mut self, name: &str, extra: &[(&str, String)], model_name: bool, value: &str) {
        // prometheus_client sorts label names: engine < finished_reason < le < model_name.
        let mut labels: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        labels.push(("engine".into(), "0".into()));
        if model_name {
            labels.push(("model_name".into(), self.labels.clone()));
        }
        labels.sort();
        let rendered: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        self.out
            .push_str(&format!("{name}{{{}}} {value}\n", rendered.join(",")));
    }

    fn created(&mut self, name: &str, extra: &[(&str, String)]) {
        let c = self.created.clone();
        self.raw(&format!("{name}_created"), extra, true, &c);
    }

    fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, "gauge", help);
        self.sample(name, &[], value);
    }

    fn counter(&mut self, name: &str, help: &str, value: u64) {
        let full = format!("{name}_total");
        self.header(&full, "counter", help);
        self.sample(&full, &[], value as f64);
        self.created(name, &[]);
    }

    fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.header(name, "histogram", help);
        for (i, b) in h.buckets.iter().enumerate() {
            self.sample(
                &format!("{name}_bucket"),
                &[("le", py::float(*b))],
                h.counts[i] as f64,
            );
        }
        self.sample(
            &format!("{name}_bucket"),
            &[("le", "+Inf".into())],
            h.count as f64,
        );
        self.sample(&format!("{name}_count"), &[], h.count as f64);
        self.sample(&format!("{name}_sum"), &[], h.sum);
        self.created(name, &[]);
    }
}

pub fn render(model_name: &str, s: &Stats, cache: &CacheInfo, created_at: f64) -> String {
    let mut w = Writer {
        out: String::new(),
        labels: model_name.to_string(),
        created: go_float(created_at),
    };
    w.gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        s.running as f64,
    );
    w.gauge(
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        s.waiting as f64,
    );
    let usage = if cache.num_gpu_blocks == 0 {
        0.0
    } else {
        s.kv_blocks_used as f64 / cache.num_gpu_blocks as f64
    };
    w.gauge(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        usage,
    );
    w.counter(
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        s.prompt_tokens,
    );
    w.counter(
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        0,
    );
    w.counter(
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        0,
    );
    w.counter(
        "vllm:prompt_tokens",
        "Number of prefill tokens processed.",
        s.prompt_tokens,
    );
    w.counter(
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        s.generation_tokens,
    );
    let name = "vllm:request_success_total";
    w.header(name, "counter", "Count of successfully processed requests.");
    for (i, reason) in FINISH_REASONS.iter().enumerate() {
        let label = [("finished_reason", reason.to_string())];
        w.sample(name, &label, s.success[i] as f64);
        w.created("vllm:request_success", &label);
    }
    w.histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        &s.ttft,
    );
    w.histogram(
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        &s.itl,
    );
    w.histogram(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        &s.e2e,
    );
    w.histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        &s.queue,
    );
    let info = "vllm:cache_config_info";
    w.header(info, "gauge", "Information of the LLMEngine CacheConfig");
    let labels: Vec<(&str, String)> = vec![
        ("block_size", crate::model::BLOCK_SIZE.to_string()),
        ("cache_dtype", "auto".into()),
        ("calculate_kv_scales", "False".into()),
        ("cpu_offload_gb", "0".into()),
        ("enable_prefix_caching", "True".into()),
        (
            "gpu_memory_utilization",
            py::float(cache.gpu_memory_utilization),
        ),
        ("is_attention_free", "False".into()),
        ("num_cpu_blocks", "None".into()),
        ("num_gpu_blocks", cache.num_gpu_blocks.to_string()),
        ("num_gpu_blocks_override", "None".into()),
        ("prefix_caching_hash_algo", "sha256".into()),
        ("sliding_window", "None".into()),
        ("swap_space", "4".into()),
        ("swap_space_bytes", (4u64 << 30).to_string()),
    ];
    // Its labels are the CacheConfig's and `engine`: no `model_name` (log_metrics_info).
    w.raw(info, &labels, false, "1.0");
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_vllm_names() {
        let mut s = Stats {
            running: 1,
            waiting: 2,
            kv_blocks_used: 5,
            prompt_tokens: 7,
            ..Stats::default()
        };
        s.ttft.observe(0.03);
        s.success[1] = 3;
        let text = render(
            "qwen",
            &s,
            &CacheInfo {
                num_gpu_blocks: 10,
                gpu_memory_utilization: 0.75,
            },
            1733616012.345678,
        );
        assert!(text.contains("vllm:num_requests_running{engine=\"0\",model_name=\"qwen\"} 1.0\n"));
        assert!(text.contains("vllm:num_requests_waiting{engine=\"0\",model_name=\"qwen\"} 2.0\n"));
        assert!(text.contains("vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"qwen\"} 0.5\n"));
        assert!(text.contains("# TYPE vllm:prompt_tokens_total counter\n"));
        assert!(text.contains("vllm:prompt_tokens_total{engine=\"0\",model_name=\"qwen\"} 7.0\n"));
        assert!(text.contains(
            "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"qwen\"} 3.0\n"
        ));
        assert!(text.contains(
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.02\",model_name=\"qwen\"} 0.0\n"
        ));
        assert!(text.contains(
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.04\",model_name=\"qwen\"} 1.0\n"
        ));
        assert!(text.contains(
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"qwen\"} 1.0\n"
        ));
        assert!(text.contains("# TYPE vllm:e2e_request_latency_seconds histogram\n"));
        assert!(text.contains("num_gpu_blocks=\"10\""));
        assert!(text.contains("gpu_memory_utilization=\"0.75\""));
        assert!(text.contains(
            "vllm:prompt_tokens_created{engine=\"0\",model_name=\"qwen\"} 1.733616012345678e+09\n"
        ));
        assert!(text.contains(
            "vllm:request_success_created{engine=\"0\",finished_reason=\"repetition\",model_name=\"qwen\"} 1.733616012345678e+09\n"
        ));
        assert!(text.contains(
            "vllm:e2e_request_latency_seconds_created{engine=\"0\",model_name=\"qwen\"} 1.733616012345678e+09\n"
        ));
        let info = text
            .lines()
            .find(|l| l.starts_with("vllm:cache_config_info{"))
            .unwrap();
        assert!(!info.contains("model_name"), "{info}");
        assert!(info.ends_with(" 1.0"), "{info}");
    }

    #[test]
    fn created_times_as_prometheus_client() {
        assert_eq!(go_float(1733616012.5), "1.7336160125e+09");
        assert_eq!(go_float(1733616012.0), "1.733616012e+09");
        assert_eq!(go_float(0.25), "0.25");
    }
}
