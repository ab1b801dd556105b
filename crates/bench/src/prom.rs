//! Just enough of the Prometheus text exposition format to read counters and
//! histogram buckets from the operator's and the API server's `/metrics`.

use std::collections::BTreeMap;

/// One sample: metric name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, key: &str) -> &str {
        self.labels.get(key).map(String::as_str).unwrap_or("")
    }
}

/// Every sample of a text exposition; comments and malformed lines are skipped.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let (labels, after) = parse_labels(&line[open + 1..])?;
            (&line[..open], labels, after)
        }
        None => {
            let sp = line.find(char::is_whitespace)?;
            (&line[..sp], BTreeMap::new(), &line[sp..])
        }
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses `k="v",k2="v2"}` and returns the labels and what follows the `}`.
fn parse_labels(s: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().to_string();
        let mut chars = rest[eq + 1..].char_indices();
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        let mut end = None;
        let mut escaped = false;
        for (i, c) in chars {
            if escaped {
                value.push(match c {
                    'n' => '\n',
                    other => other,
                });
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                end = Some(eq + 1 + i + 1);
                break;
            } else {
                value.push(c);
            }
        }
        labels.insert(key, value);
        rest = &rest[end?..];
    }
}

/// Sum of every sample named `name` whose labels pass `keep`.
pub fn sum(samples: &[Sample], name: &str, keep: impl Fn(&Sample) -> bool) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && keep(s))
        .map(|s| s.value)
        .sum()
}

/// Cumulative histogram buckets `(upper bound, count)` of `<name>_bucket`, sorted.
pub fn buckets(samples: &[Sample], name: &str) -> Vec<(f64, f64)> {
    let bucket = format!("{name}_bucket");
    let mut b: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.name == bucket)
        .filter_map(|s| {
            let le = match s.label("le") {
                "+Inf" => f64::INFINITY,
                v => v.parse().ok()?,
            };
            Some((le, s.value))
        })
        .collect();
    b.sort_by(|a, b| a.0.total_cmp(&b.0));
    b
}

/// The q-quantile of cumulative buckets, interpolated linearly inside the bucket
/// as PromQL's `histogram_quantile` does. A quantile in the +Inf bucket is
/// reported as the highest finite bound. None when there are no observations.
pub fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut prev_bound = 0.0;
    let mut prev_count = 0.0;
    for &(bound, count) in buckets {
        if count >= rank {
            if bound.is_infinite() {
                return Some(prev_bound);
            }
            let in_bucket = count - prev_count;
            let frac = if in_bucket > 0.0 {
                (rank - prev_count) / in_bucket
            } else {
                1.0
            };
            return Some(prev_bound + (bound - prev_bound) * frac);
        }
        prev_bound = bound;
        prev_count = count;
    }
    Some(prev_bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP x_write_requests Write requests.
# TYPE x_write_requests counter
x_write_requests_total{verb="patch",resource="deployments"} 12
x_write_requests_total{verb="create",resource="events"} 3
x_reconciles_total 40
apiserver_request_total{code="201",component="apiserver",group="",resource="pods",subresource="",verb="POST",version="v1"} 7
odd{msg="a \"quoted\", thing"} 1.5e3
"#;

    #[test]
    fn counters_and_labels_are_read() {
        let s = parse(TEXT);
        assert_eq!(s.len(), 5);
        assert_eq!(sum(&s, "x_write_requests_total", |_| true), 15.0);
        assert_eq!(
            sum(&s, "x_write_requests_total", |s| s.label("verb") == "patch"),
            12.0
        );
        assert_eq!(sum(&s, "x_reconciles_total", |_| true), 40.0);
        let pods = s
            .iter()
            .find(|s| s.name == "apiserver_request_total")
            .unwrap();
        assert_eq!(
            (pods.label("verb"), pods.label("resource")),
            ("POST", "pods")
        );
        assert_eq!(pods.label("group"), "");
        let odd = s.iter().find(|s| s.name == "odd").unwrap();
        assert_eq!(odd.label("msg"), "a \"quoted\", thing");
        assert_eq!(odd.value, 1500.0);
    }

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        let text = "h_bucket{le=\"0.01\"} 50\nh_bucket{le=\"0.1\"} 90\nh_bucket{le=\"1.0\"} 100\nh_bucket{le=\"+Inf\"} 100\n";
        let b = buckets(&parse(text), "h");
        assert_eq!(b.len(), 4);
        assert!((quantile(&b, 0.5).unwrap() - 0.01).abs() < 1e-9);
        // rank 70 is halfway between 50 (at 0.01) and 90 (at 0.1)
        assert!((quantile(&b, 0.7).unwrap() - 0.055).abs() < 1e-9);
        assert!((quantile(&b, 0.99).unwrap() - 0.91).abs() < 1e-9);
        assert_eq!(quantile(&[(1.0, 0.0), (f64::INFINITY, 0.0)], 0.5), None);
        // Everything above the last finite bound: that bound is the answer.
        assert_eq!(
            quantile(&[(1.0, 0.0), (f64::INFINITY, 4.0)], 0.5),
            Some(1.0)
        );
    }
}
