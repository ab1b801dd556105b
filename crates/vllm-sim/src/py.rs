//! Python-style renderings, so messages read exactly as vLLM (Python) prints them.

/// `repr(str)`: single quotes unless the text has a `'` and no `"`.
pub fn repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// `repr(list[str])`.
pub fn repr_list(items: &[String]) -> String {
    let parts: Vec<String> = items.iter().map(|s| repr_str(s)).collect();
    format!("[{}]", parts.join(", "))
}

/// `repr(float)`: shortest round-trip digits, always with a decimal point.
pub fn float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x.fract() == 0.0 && x.abs() < 1e16 {
        return format!("{x:.1}");
    }
    format!("{x}")
}

pub fn bool(b: bool) -> String {
    if b { "True".into() } else { "False".into() }
}

/// `round(x, 2)` then `repr`: what vLLM's `format_gib` and its `gib()` helpers print.
pub fn round2(x: f64) -> String {
    float((x * 100.0).round() / 100.0)
}

/// `f"{n:,}"` for integers.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_python() {
        assert_eq!(repr_str("abc"), "'abc'");
        assert_eq!(repr_str("it's"), "\"it's\"");
        assert_eq!(float(0.75), "0.75");
        assert_eq!(float(1.0), "1.0");
        assert_eq!(round2(21.666), "21.67");
        assert_eq!(round2(2.6), "2.6");
        assert_eq!(thousands(114432), "114,432");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000000), "1,000,000");
    }
}
