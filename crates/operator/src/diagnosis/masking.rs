//! Text rules applied in one place: the API server's length limits, and the
//! masking of secrets in what the operator writes (status, events, its log).
//! Pure.

use std::borrow::Cow;

/// What a masked secret is replaced with.
pub const MASK: &str = "[masked]";

/// `text` with every secret hidden: each of `literals` (the spec's literal env
/// values) and anything that looks like a token (`hf_…`, `sk-…`, `ghp_…`, a JWT,
/// the word after `Bearer`, long mixed-case alphanumeric runs). Logs of vLLM may
/// echo its arguments and environment; this is what keeps them out of status
/// and events.
pub fn mask_secrets<'a>(text: &'a str, literals: &[&str]) -> Cow<'a, str> {
    let mut out: Cow<'a, str> = text.into();
    for literal in literals.iter().filter(|l| !l.is_empty()) {
        if out.contains(literal) {
            out = out.replace(literal, MASK).into();
        }
    }
    if !out.split(|c: char| !is_token_char(c)).any(looks_like_token) && !out.contains("Bearer ") {
        return out;
    }
    let mut masked = String::with_capacity(out.len());
    let mut word = String::new();
    let mut after_bearer = false;
    let flush = |word: &mut String, masked: &mut String, after_bearer: &mut bool| {
        if !word.is_empty() {
            if looks_like_token(word) || (*after_bearer && word.len() >= 8) {
                masked.push_str(MASK);
            } else {
                masked.push_str(word);
            }
            *after_bearer = word == "Bearer";
            word.clear();
        }
    };
    for c in out.chars() {
        if is_token_char(c) {
            word.push(c);
        } else {
            flush(&mut word, &mut masked, &mut after_bearer);
            if c != ' ' {
                after_bearer = false;
            }
            masked.push(c);
        }
    }
    flush(&mut word, &mut masked, &mut after_bearer);
    masked.into()
}

/// The spec's literal `env` values that must never appear in status, events
/// or logs: every value of 8 bytes or more, and every value of 3 bytes or more
/// of a variable whose name says it holds a secret (`HF_TOKEN`, `API_KEY`,
/// `DB_PASSWORD`, ...). Shorter values of other variables ("1", "auto",
/// "fp8") are settings; replacing them would garble every message.
pub fn secret_literals(vs: &vllmservice_api::VLLMService) -> Vec<&str> {
    secret_values(
        vs.spec
            .env
            .iter()
            .filter_map(|e| Some((e.name.as_str(), e.value.as_deref()?))),
    )
}

/// The values among `env` (name, literal value) that [`secret_literals`] masks.
pub fn secret_values<'a>(env: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<&'a str> {
    const SECRET_NAMES: [&str; 7] = [
        "TOKEN",
        "KEY",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "AUTH",
    ];
    env.filter(|(name, value)| {
        let name = name.to_ascii_uppercase();
        let secret_name = SECRET_NAMES.iter().any(|s| name.contains(s));
        value.len() >= 8 || (secret_name && value.len() >= 3)
    })
    .map(|(_, value)| value)
    .collect()
}

/// `text` with the secrets of `vs` (its literal env values, token-like strings) hidden.
pub fn mask_for<'a>(text: &'a str, vs: &vllmservice_api::VLLMService) -> Cow<'a, str> {
    mask_secrets(text, &secret_literals(vs))
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+' | '=')
}

fn looks_like_token(word: &str) -> bool {
    const PREFIXES: [(&str, usize); 7] = [
        ("hf_", 10),
        ("sk-", 20),
        ("ghp_", 20),
        ("gho_", 20),
        ("github_pat_", 20),
        ("xoxb-", 20),
        ("glpat-", 20),
    ];
    if PREFIXES
        .iter()
        .any(|(p, min)| word.starts_with(p) && word.len() >= *min)
    {
        return true;
    }
    if word.starts_with("eyJ") && word.len() >= 30 {
        return true;
    }
    // A long run mixing upper case, lower case and digits (hex digests, being
    // lower case only, stay readable).
    word.len() >= 32
        && word.chars().any(|c| c.is_ascii_uppercase())
        && word.chars().any(|c| c.is_ascii_lowercase())
        && word.chars().any(|c| c.is_ascii_digit())
}

/// The API server refuses an event whose note is longer than this, in bytes.
pub const MAX_EVENT_NOTE_BYTES: usize = 1024;
/// The API server refuses a condition message longer than this, in bytes.
pub const MAX_CONDITION_MESSAGE_BYTES: usize = 32 * 1024;

const ELLIPSIS: &str = "…";

/// `text` cut to at most `max_bytes` bytes of UTF-8 (the API server counts bytes),
/// at a character boundary, ending in "…" when cut.
pub fn truncate(text: &str, max_bytes: usize) -> Cow<'_, str> {
    if text.len() <= max_bytes {
        return text.into();
    }
    let mut end = max_bytes.saturating_sub(ELLIPSIS.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ELLIPSIS}", &text[..end]).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_text_is_kept_and_long_text_is_cut_in_bytes() {
        assert_eq!(truncate("short", MAX_EVENT_NOTE_BYTES), "short");
        let exact = "x".repeat(MAX_EVENT_NOTE_BYTES);
        assert_eq!(truncate(&exact, MAX_EVENT_NOTE_BYTES), exact);
        // 2 bytes per character: 1024 characters would be 2048 bytes.
        let long = "é".repeat(1000);
        let cut = truncate(&long, MAX_EVENT_NOTE_BYTES);
        assert!(cut.len() <= MAX_EVENT_NOTE_BYTES, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert!(long.starts_with(cut.trim_end_matches('…')));
    }

    #[test]
    fn secrets_are_masked() {
        let text = "error: token hf_abcdefghijklmnop and key sk-0123456789abcdefghijkl, \
                    Authorization: Bearer abc123def456, literal s3cr3t-value, \
                    jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc, \
                    blob AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";
        let masked = mask_secrets(text, &["s3cr3t-value"]);
        for secret in [
            "hf_abcdefghijklmnop",
            "sk-0123456789abcdefghijkl",
            "abc123def456",
            "s3cr3t-value",
            "eyJhbGciOiJIUzI1NiJ9",
            "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        ] {
            assert!(!masked.contains(secret), "{secret} in {masked}");
        }
        assert!(
            masked.starts_with("error: token [masked] and key [masked]"),
            "{masked}"
        );
        // Ordinary diagnostics stay as they are.
        let plain = "pod qwen-7d9f: vLLM finds no model at '/data/models/Qwen2.5-1.5B' \
                     (image vllm/vllm-openai@sha256:0123456789abcdef0123456789abcdef0123456789abcdef)";
        assert_eq!(mask_secrets(plain, &[]), plain);
    }

    #[test]
    fn long_literals_and_short_ones_of_secret_names_are_masked() {
        let env = [
            ("HF_TOKEN", "abc123"),
            ("OPENAI_API_KEY", "k9z"),
            ("DB_PASSWORD", "pw"),
            ("VLLM_LOGGING_LEVEL", "DEBUG"),
            ("DTYPE", "auto"),
            ("MODEL_REVISION", "0123456789abcdef"),
        ];
        assert_eq!(
            secret_values(env.into_iter()),
            ["abc123", "k9z", "0123456789abcdef"]
        );
        let text = "env HF_TOKEN=abc123 OPENAI_API_KEY=k9z level DEBUG dtype auto";
        assert_eq!(
            mask_secrets(text, &secret_values(env.into_iter())),
            "env HF_TOKEN=[masked] OPENAI_API_KEY=[masked] level DEBUG dtype auto"
        );
    }

    proptest! {
        #[test]
        fn never_longer_than_the_limit_and_always_a_prefix(s in "\\PC{0,600}", max in 3usize..700) {
            let cut = truncate(&s, max);
            prop_assert!(cut.len() <= max);
            prop_assert!(s.starts_with(cut.trim_end_matches('…')));
        }
    }
}
