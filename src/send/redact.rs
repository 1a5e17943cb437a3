//! Redaction of secrets from what a receiver answers, in the encodings an echo commonly takes:
//! as is, JSON-escaped (`\/`, `\u00XX`), URL-encoded (`%2F`, `+` for space, either case of hex),
//! HTML character references, base64 (standard and URL-safe, padded or not, at any of the three
//! alignments inside a longer base64 string), and upper- or lower-cased.
//!
//! The answer is decoded into views (as is; escapes decoded; escapes and `+` decoded) that
//! remember where each byte came from, every form of every secret is searched for in them, and
//! the original text of each match is replaced. The cost is the answer's length times the total
//! length of the forms searched for, and answers are read only up to a bound.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

/// What replaces a secret.
pub const MASK: &str = "[redacted]";

/// Secrets shorter than this are not searched for (they would match too much).
pub const MIN_SECRET: usize = 4;

/// The text as bytes, each with the range of the original text it came from.
struct View {
    bytes: Vec<u8>,
    spans: Vec<(usize, usize)>,
}

impl View {
    fn push(&mut self, bytes: &[u8], span: (usize, usize)) {
        for &b in bytes {
            self.bytes.push(b);
            self.spans.push(span);
        }
    }
}

/// One form of a secret to look for.
struct Needle {
    bytes: Vec<u8>,
    /// Matched without regard to ASCII case.
    fold: bool,
    /// Looked for in the view that reads `+` as a space too.
    form: bool,
}

fn hex(b: u8) -> Option<u32> {
    char::from(b).to_digit(16)
}

/// The JSON escape at the start of `s` (which begins with `\`): the character and its length.
fn json_escape(s: &[u8]) -> Option<(char, usize)> {
    let simple = match s.get(1)? {
        b'/' => Some('/'),
        b'\\' => Some('\\'),
        b'"' => Some('"'),
        b'\'' => Some('\''),
        b'n' => Some('\n'),
        b'r' => Some('\r'),
        b't' => Some('\t'),
        b'b' => Some('\u{8}'),
        b'f' => Some('\u{c}'),
        _ => None,
    };
    if let Some(c) = simple {
        return Some((c, 2));
    }
    let unit = |at: usize| -> Option<u32> {
        if s.get(at)? != &b'\\' || s.get(at + 1)? != &b'u' {
            return None;
        }
        s.get(at + 2..at + 6)?
            .iter()
            .try_fold(0u32, |acc, &b| Some(acc * 16 + hex(b)?))
    };
    let first = unit(0)?;
    if (0xD800..0xDC00).contains(&first) {
        let second = unit(6).filter(|u| (0xDC00..0xE000).contains(u))?;
        let c = char::from_u32(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))?;
        return Some((c, 12));
    }
    Some((char::from_u32(first)?, 6))
}

/// The HTML character reference at the start of `s` (which begins with `&`).
fn html_reference(s: &[u8]) -> Option<(char, usize)> {
    let end = s.iter().take(12).position(|&b| b == b';')?;
    let body = std::str::from_utf8(&s[1..end]).ok()?;
    let c = match body {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        _ => {
            let number = body.strip_prefix('#')?;
            let code = match number.strip_prefix(['x', 'X']) {
                Some(h) => u32::from_str_radix(h, 16).ok()?,
                None => number.parse().ok()?,
            };
            char::from_u32(code)?
        }
    };
    Some((c, end + 1))
}

fn raw_view(text: &str) -> View {
    let mut view = View {
        bytes: Vec::with_capacity(text.len()),
        spans: Vec::with_capacity(text.len()),
    };
    for (i, &b) in text.as_bytes().iter().enumerate() {
        view.push(&[b], (i, i + 1));
    }
    view
}

/// The text with JSON escapes, percent-escapes and HTML references decoded (one level), and with
/// `form`, `+` read as a space.
fn decoded_view(text: &str, form: bool) -> View {
    decode(&raw_view(text), form)
}

/// `view` with one more level of escapes decoded (as [`decoded_view`] does), each byte keeping
/// the range of the original text it came from: decoding a decoded view reads an echo that was
/// encoded twice (`%252F`, a JSON escape inside a URL-encoded value).
fn decode(from: &View, form: bool) -> View {
    let s = from.bytes.as_slice();
    let mut view = View {
        bytes: Vec::with_capacity(s.len()),
        spans: Vec::with_capacity(s.len()),
    };
    let span = |i: usize, len: usize| (from.spans[i].0, from.spans[i + len - 1].1);
    let mut i = 0;
    while i < s.len() {
        let decoded = match s[i] {
            b'\\' => json_escape(&s[i..]),
            b'&' => html_reference(&s[i..]),
            b'%' => match (
                s.get(i + 1).and_then(|&b| hex(b)),
                s.get(i + 2).and_then(|&b| hex(b)),
            ) {
                (Some(h), Some(l)) => {
                    view.push(&[(h * 16 + l) as u8], span(i, 3));
                    i += 3;
                    continue;
                }
                _ => None,
            },
            b'+' if form => Some((' ', 1)),
            _ => None,
        };
        match decoded {
            Some((c, len)) => {
                let mut buf = [0u8; 4];
                view.push(c.encode_utf8(&mut buf).as_bytes(), span(i, len));
                i += len;
            }
            None => {
                view.push(&[s[i]], span(i, 1));
                i += 1;
            }
        }
    }
    view
}

/// Every form of `secret` to look for.
fn needles(secret: &str) -> Vec<Needle> {
    let bytes = secret.as_bytes();
    let mut out = vec![Needle {
        bytes: bytes.to_vec(),
        fold: true,
        form: true,
    }];
    let exact = |b: String| Needle {
        bytes: b.into_bytes(),
        fold: false,
        form: false,
    };
    // Hex, either case (a receiver that logs or hashes what it got).
    out.push(Needle {
        bytes: bytes
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
            .into_bytes(),
        fold: true,
        form: false,
    });
    out.push(exact(STANDARD.encode(bytes)));
    out.push(exact(URL_SAFE.encode(bytes)));
    // Inside a longer base64 string the secret starts 0, 1 or 2 bytes into a 3-byte group: keep
    // the characters that depend on the secret's bytes alone.
    for lead in 0..3usize {
        let mut shifted = vec![0u8; lead];
        shifted.extend_from_slice(bytes);
        let first = (8 * lead).div_ceil(6);
        let last = 8 * (lead + bytes.len()) / 6;
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let encoded = engine.encode(&shifted);
            if let Some(part) = encoded.get(first..last) {
                out.push(exact(part.to_string()));
            }
        }
    }
    out.retain(|n| n.bytes.len() >= MIN_SECRET);
    out
}

fn same(a: u8, b: u8, fold: bool) -> bool {
    a == b || (fold && a.eq_ignore_ascii_case(&b))
}

/// Marks (in `hidden`, per byte of the original text) every occurrence of `needle` in `view`,
/// and with `tail`, a prefix of it that ends the view.
fn mark(view: &View, needle: &Needle, hidden: &mut [bool], tail: bool) {
    let (hay, pin) = (&view.bytes, &needle.bytes);
    let m = pin.len();
    if m == 0 {
        return;
    }
    let mut hide = |from: usize, to: usize| {
        let (start, end) = (view.spans[from].0, view.spans[to].1);
        hidden[start..end].iter_mut().for_each(|h| *h = true);
    };
    if hay.len() >= m {
        for start in 0..=hay.len() - m {
            if (0..m).all(|j| same(hay[start + j], pin[j], needle.fold)) {
                hide(start, start + m - 1);
            }
        }
    }
    if tail {
        for len in (1..m.min(hay.len() + 1)).rev() {
            let start = hay.len() - len;
            if (0..len).all(|j| same(hay[start + j], pin[j], needle.fold)) {
                hide(start, hay.len() - 1);
                break;
            }
        }
    }
}

/// Where escapes that the end of the text may have cut short begin (`%2`, `\u00`, `&#x2`, and
/// the nested `%252`, `%5C%2` of an echo encoded twice), latest first: each `%`, `\` or `&` in
/// the last 11 bytes after which only characters an escape is made of follow.
fn cut_escapes(text: &str) -> Vec<usize> {
    let s = text.as_bytes();
    let from = s.len().saturating_sub(11);
    (from..s.len())
        .rev()
        .filter(|&j| matches!(s[j], b'%' | b'\\' | b'&'))
        .take_while(|&j| {
            s[j + 1..]
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'#' | b'%' | b'\\'))
        })
        .collect()
}

/// `view` with only the characters base64 and hex are written in (letters, digits, `+/=-_`):
/// an encoding is often wrapped (MIME's 76 characters, PEM's 64), grouped (a space every four,
/// hex pairs split by colons) or cut into pieces (a JSON array of strings), and a secret's
/// encoding may straddle any of those breaks.
fn compact(from: &View) -> View {
    let mut view = View {
        bytes: Vec::with_capacity(from.bytes.len()),
        spans: Vec::with_capacity(from.bytes.len()),
    };
    for (&b, &span) in from.bytes.iter().zip(&from.spans) {
        if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'-' | b'_') {
            view.push(&[b], span);
        }
    }
    view
}

/// The views of `text` every needle is searched in: as is, one level of escapes decoded, two
/// levels (an echo encoded twice), each also with `+` read as a space, and the first two with
/// only the characters of base64 and hex ([`compact`]); each with whether `+` was read as a
/// space, and whether only whole needles are looked for in it (a compact view has lost what
/// stood between its characters, so a needle's beginning at its end proves nothing).
fn views(text: &str) -> Vec<(View, bool, bool)> {
    let raw = raw_view(text);
    let once = decoded_view(text, false);
    let once_form = decoded_view(text, true);
    let twice = decode(&once, false);
    let twice_form = decode(&once_form, true);
    let (raw_compact, once_compact) = (compact(&raw), compact(&once));
    vec![
        (raw, false, false),
        (once, false, false),
        (twice, false, false),
        (once_form, true, false),
        (twice_form, true, false),
        (raw_compact, false, true),
        (once_compact, false, true),
    ]
}

fn hide(text: &str, secrets: &Secrets, tail: bool) -> String {
    let needles = &secrets.needles;
    if needles.is_empty() || text.is_empty() {
        return text.to_string();
    }
    let mut hidden = vec![false; text.len()];
    let all = views(text);
    for (view, form, whole) in &all {
        for needle in needles.iter().filter(|n| !*form || n.form) {
            mark(view, needle, &mut hidden, tail && !whole);
        }
    }
    for at in if tail { cut_escapes(text) } else { Vec::new() } {
        // The secret's prefix may stand just before an escape the cut broke: judge the text
        // without it, and hide the broken escape along with whatever prefix is found.
        let head = &text[..at];
        let mut head_hidden = vec![false; head.len()];
        for (view, form, whole) in views(head) {
            for needle in needles.iter().filter(|n| !form || n.form) {
                mark(&view, needle, &mut head_hidden, !whole);
            }
        }
        if head_hidden.last() == Some(&true) {
            let from = head_hidden.iter().rposition(|h| !h).map_or(0, |i| i + 1);
            hidden[from..].iter_mut().for_each(|h| *h = true);
            break;
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut masking = false;
    for (i, c) in text.char_indices() {
        if hidden[i..i + c.len_utf8()].iter().any(|h| *h) {
            if !masking {
                out.push_str(MASK);
            }
            masking = true;
        } else {
            out.push(c);
            masking = false;
        }
    }
    out
}

/// Every form of a set of secrets to look for, worked out once (a sender keeps one per
/// integration with its credentials) and searched for in every answer.
#[derive(Default)]
pub struct Secrets {
    needles: Vec<Needle>,
}

impl Secrets {
    /// The forms of every secret of [`MIN_SECRET`] bytes or more.
    pub fn new<S: AsRef<str>>(secrets: impl IntoIterator<Item = S>) -> Secrets {
        Secrets {
            needles: secrets
                .into_iter()
                .filter(|s| s.as_ref().len() >= MIN_SECRET)
                .flat_map(|s| needles(s.as_ref()))
                .collect(),
        }
    }

    /// `text` with every form of every secret replaced by [`MASK`].
    pub fn redact(&self, text: &str) -> String {
        hide(text, self, false)
    }

    /// `text` redacted, then cut to at most `limit` bytes (on a character boundary); if it was
    /// longer than `limit` (cut here, or perhaps already where it was read), a secret's
    /// beginning that ends the cut text is hidden too.
    pub fn redact_and_cut(&self, text: &str, limit: usize) -> String {
        let redacted = self.redact(text);
        // Judged on the text as given: whole secrets masked may shrink a text the reader cut
        // (mid-secret) under the limit, and its end must still be looked at.
        if text.len() <= limit {
            return redacted;
        }
        let mut end = limit.min(redacted.len());
        while !redacted.is_char_boundary(end) {
            end -= 1;
        }
        hide(&redacted[..end], self, true)
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the forms themselves: they are the secrets.
        write!(f, "Secrets({} forms)", self.needles.len())
    }
}

/// `text` with every form of every secret (of [`MIN_SECRET`] bytes or more) replaced by
/// [`MASK`].
pub fn redact(text: &str, secrets: &[String]) -> String {
    Secrets::new(secrets).redact(text)
}

/// `text` redacted as [`redact`] does, then cut to at most `limit` bytes (on a character
/// boundary); if it was cut, a secret's beginning that ends the cut text is hidden too.
pub fn redact_and_cut(text: &str, limit: usize, secrets: &[String]) -> String {
    Secrets::new(secrets).redact_and_cut(text, limit)
}

#[cfg(test)]
mod tests;
