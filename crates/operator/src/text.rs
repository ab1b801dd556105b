//! Text limits of the API server, applied in one place.

use std::borrow::Cow;

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

    proptest! {
        #[test]
        fn never_longer_than_the_limit_and_always_a_prefix(s in "\\PC{0,600}", max in 3usize..700) {
            let cut = truncate(&s, max);
            prop_assert!(cut.len() <= max);
            prop_assert!(s.starts_with(cut.trim_end_matches('…')));
        }
    }
}
