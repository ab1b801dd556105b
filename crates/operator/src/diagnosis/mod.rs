//! What logs and objects say about a service that does not serve, pure: the
//! vLLM container's log, the Hugging Face download log, the Deployment's and
//! Pods' own account, and the masking of secrets in what the operator writes.

pub mod hf_log;
pub mod masking;
pub mod vllm_log;
pub mod workload;

/// `log` without ANSI escape sequences (`ESC [ … m`): huggingface_hub 1.x/2.x
/// colour their errors red and their hints gray, vLLM its logo when the log is
/// coloured.
pub fn without_colours(log: &str) -> std::borrow::Cow<'_, str> {
    if !log.contains('\u{1b}') {
        return log.into();
    }
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        // A control sequence: `[`, parameters, then a final letter.
        if chars.clone().next() == Some('[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_codes_go_and_the_text_stays() {
        assert_eq!(
            without_colours("\u{1b}[31mError: x\u{1b}[0m \u{1b}[1;90my\u{1b}[0m"),
            "Error: x y"
        );
        assert_eq!(without_colours("plain"), "plain");
    }
}
