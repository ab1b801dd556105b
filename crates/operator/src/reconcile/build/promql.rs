//! PromQL made from a VLLMService: label matchers with every value quoted and
//! escaped in one place, so no spec value (say, a model name with a quote) can
//! change a query's meaning.
//! Pure.

/// `value` as a PromQL double-quoted string literal (PromQL's escapes are Go's).
pub fn string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Equality matchers `name="value",...` for a selector's braces.
pub fn matchers(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(name, value)| format!("{name}={}", string(value)))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_quoted_and_escaped() {
        assert_eq!(string("qwen2.5-1.5b"), r#""qwen2.5-1.5b""#);
        assert_eq!(string(r#"a"b"#), r#""a\"b""#);
        assert_eq!(string(r"a\b"), r#""a\\b""#);
        assert_eq!(string("a\nb\tc\r"), r#""a\nb\tc\r""#);
        assert_eq!(string("\u{7}"), r#""\u0007""#);
        assert_eq!(string("Qwen/模型"), "\"Qwen/模型\"");
        // A value cannot close the literal and add a matcher of its own.
        assert_eq!(
            matchers(&[("model_name", r#"x"} or vector(1000) or {a=""#)]),
            r#"model_name="x\"} or vector(1000) or {a=\"""#
        );
        assert_eq!(
            matchers(&[("namespace", "ns"), ("service", "svc")]),
            r#"namespace="ns",service="svc""#
        );
    }
}
