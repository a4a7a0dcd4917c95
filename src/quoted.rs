//! Text from the cluster made safe to keep, print and write back: anyone who can write an
//! object chooses it (a Machine's `errorMessage` is whatever its provider, or a user who can
//! edit Machines, put there).

use std::borrow::Cow;

/// `text` safe to print on a terminal or in a text log: control characters (escape sequences,
/// carriage returns, newlines that would forge rows or log lines) and bidirectional overrides
/// (which reorder what a reader sees) are shown as `\u{..}` escapes.
pub fn printable(text: &str) -> Cow<'_, str> {
    let unsafe_char =
        |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            escaped.extend(c.escape_unicode());
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

/// `text` cut to at most `limit` bytes on a character boundary, saying how much was left out.
pub fn bounded(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let note = format!(" … ({} more bytes)", text.len() - limit);
    let mut end = limit.saturating_sub(note.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{note}", &text[..end])
}
