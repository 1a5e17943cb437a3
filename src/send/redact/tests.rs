//! Redaction of every form of a secret an answer may echo.
use super::*;

/// Base64 grouped by spaces or cut into a JSON array, and hex split by colons: each still
/// decodes to the secret, so each is hidden.
#[test]
fn a_secret_in_base64_or_hex_split_by_spaces_colons_or_json_pieces_is_redacted() {
    let secret = "tok_LONG_Ab9xQ7zZ";
    let b64 = STANDARD.encode(secret);
    let spaced: Vec<String> = b64
        .as_bytes()
        .chunks(4)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect();
    let hex: Vec<String> = secret.bytes().map(|b| format!("{b:02x}")).collect();
    for echoed in [
        spaced.join(" "),
        format!("[\"{}\"]", spaced.join("\",\"")),
        hex.join(":"),
        hex.join(" "),
    ] {
        let shown = redact(&echoed, &[secret.to_string()]);
        assert!(
            !shown.contains(&spaced[1]) || shown == MASK,
            "{echoed} -> {shown}"
        );
        assert!(shown.contains(MASK), "{echoed} -> {shown}");
    }
}

/// Base64 wrapped at 76 characters (MIME, as Python's `encodebytes` and OpenSSL write it),
/// with the secret across a line break, is still the secret.
#[test]
fn a_secret_in_base64_wrapped_across_lines_is_redacted() {
    let secret = "xoxb-SuperSecret/Tok+en==42";
    // Bytes 40 to 66 encode to characters 53 to 89: across the first break, at 76.
    let header = format!("Authorization: Bearer {}{secret}", " ".repeat(18));
    assert_eq!(header.find(secret), Some(40));
    let encoded = STANDARD.encode(header.repeat(3));
    for newline in ["\n", "\r\n"] {
        let wrapped: Vec<String> = encoded
            .as_bytes()
            .chunks(76)
            .map(|c| String::from_utf8(c.to_vec()).unwrap())
            .collect();
        let body = wrapped.join(newline);
        let shown = redact(&body, &[secret.to_string()]);
        assert!(shown.contains(MASK), "{shown}");
        // What is left, line breaks dropped, read as base64 from every offset, holds no ten
        // bytes of the secret in a row.
        let joined: String = shown.split(newline).collect();
        for part in joined.split(MASK) {
            for offset in 0..4.min(part.len()) {
                let text = &part[offset..];
                let text = &text[..text.len() / 4 * 4];
                let decoded = STANDARD_NO_PAD
                    .decode(text.trim_end_matches('='))
                    .unwrap_or_default();
                for window in secret.as_bytes().windows(10) {
                    assert!(
                        !decoded.windows(10).any(|w| w == window),
                        "{newline:?}: {part} decodes to {}",
                        String::from_utf8_lossy(&decoded)
                    );
                }
            }
        }
    }
}

const SECRET: &str = "tok/SECRET+9z_Q";

fn secrets() -> Vec<String> {
    vec![SECRET.to_string(), "pass word 42".to_string()]
}

fn hex_escaped(s: &str, upper: bool) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else if upper {
                format!("%{b:02X}")
            } else {
                format!("%{b:02x}")
            }
        })
        .collect()
}

#[test]
fn every_common_echo_form_of_a_secret_is_redacted() {
    let all_unicode: String = SECRET
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let forms = [
        SECRET.to_string(),
        SECRET.replace('/', "\\/"),
        SECRET.replace('/', "\\u002F").replace('+', "\\u002b"),
        all_unicode,
        hex_escaped(SECRET, true),
        hex_escaped(SECRET, false),
        SECRET.replace('/', "&#x2F;").replace('+', "&#43;"),
        SECRET.to_uppercase(),
        SECRET.to_lowercase(),
        SECRET.to_uppercase().replace('/', "\\/"),
        STANDARD.encode(SECRET),
        STANDARD_NO_PAD.encode(SECRET),
        URL_SAFE.encode(SECRET),
        URL_SAFE_NO_PAD.encode(SECRET),
        STANDARD.encode(SECRET).replace('/', "\\/"),
        hex_escaped(&STANDARD.encode(SECRET), true),
        "pass word 42".into(),
        "pass+word+42".into(),
        "pass%20word%2042".into(),
        "PASS+WORD+42".into(),
    ];
    for form in forms {
        let echoed = format!("{{\"echo\":\"{form}\",\"n\":1}}");
        assert_eq!(
            redact(&echoed, &secrets()),
            "{\"echo\":\"[redacted]\",\"n\":1}",
            "{form}"
        );
    }
}

#[test]
fn base64_of_a_secret_inside_longer_base64_is_redacted_at_every_alignment() {
    for engine in [&STANDARD, &URL_SAFE_NO_PAD] {
        for lead in 0..3 {
            let mut plain = b"ab"[..lead].to_vec();
            plain.extend_from_slice(b"Authorization: Bearer ");
            plain.extend_from_slice(SECRET.as_bytes());
            plain.extend_from_slice(b"\r\nAccept: */*");
            let encoded = engine.encode(&plain);
            let redacted = redact(&encoded, &secrets());
            assert!(redacted.contains(MASK), "{lead}: {redacted}");
            // At most the two characters on either side that mix the secret with its
            // neighbours survive.
            let removed = encoded.len() - (redacted.len() - MASK.len());
            assert!(removed >= SECRET.len() * 4 / 3 - 2, "{lead}: {redacted}");
        }
    }
}

#[test]
fn text_without_a_secret_is_unchanged_and_short_secrets_are_ignored() {
    let text = "{\"ok\":true,\"note\":\"tok is fine, %2F and \\/ and &amp; too\"}";
    assert_eq!(redact(text, &secrets()), text);
    assert_eq!(redact("abc abc", &["abc".into()]), "abc abc");
    assert_eq!(redact("", &secrets()), "");
    assert_eq!(redact("é tok/SECRET+9z_Q é", &secrets()), "é [redacted] é");
}

#[test]
fn a_secret_split_by_the_cut_is_redacted_before_the_cut() {
    let limit = 64;
    let text = format!("{}{SECRET} and more", "x".repeat(limit - 5));
    let cut = redact_and_cut(&text, limit, &secrets());
    assert!(cut.len() <= limit, "{cut}");
    assert!(!cut.contains("tok"), "{cut}");
    assert_eq!(cut, format!("{}{}", "x".repeat(limit - 5), &MASK[..5]));
}

#[test]
fn a_secret_the_read_already_cut_leaves_no_prefix_at_the_cut() {
    let limit = 64;
    let pad = "x".repeat(limit - 5);
    for (tail, why) in [
        ("tok/SECRET", "as is"),
        ("TOK/SECRET", "upper-cased"),
        ("tok%2FSECRET", "URL-encoded"),
        ("tok%2FS", "URL-encoded, the cut inside an escape"),
        ("tok\\u002FS", "JSON-escaped, the cut inside an escape"),
    ] {
        let text = format!("{pad}{tail}");
        let cut = redact_and_cut(&text, limit, &secrets());
        assert_eq!(cut, format!("{pad}{MASK}"), "{why}");
    }
    let short = format!("{pad}tok");
    assert_eq!(
        redact_and_cut(&short, limit, &secrets()),
        short,
        "an uncut text keeps its ending"
    );
}

#[test]
fn whole_secrets_that_shrink_a_read_cut_answer_under_the_limit_leave_no_prefix_at_its_end() {
    let long: String = (0..1000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let limit = 4096;
    // As the reader keeps it: eight whole echoes, then the ninth cut after 166 bytes.
    let mut text = String::from("[");
    while text.len() + long.len() + 3 < 2 * limit {
        text.push_str(&format!("\"{long}\","));
    }
    text.push('"');
    text.push_str(&long[..2 * limit - text.len()]);
    assert_eq!(text.len(), 2 * limit);
    let cut = redact_and_cut(&text, limit, std::slice::from_ref(&long));
    assert!(cut.len() <= limit, "{}", cut.len());
    assert!(!cut.contains(&long[..8]), "{cut}");
    assert!(cut.ends_with(&format!("\"{MASK}")), "{cut}");
}

#[test]
fn a_credential_echoed_in_hex_or_encoded_twice_is_redacted() {
    let hex: String = SECRET.bytes().map(|b| format!("{b:02x}")).collect();
    let twice: String = SECRET.bytes().map(|b| format!("%25{b:02X}")).collect();
    for echo in [
        hex.clone(),
        hex.to_uppercase(),
        twice,
        SECRET.replace('/', "%5C%2F"),
        SECRET.replace('/', "%252F").replace('+', "%252B"),
    ] {
        let text = format!("{{\"got\":\"{echo}\",\"ok\":true}}");
        let out = redact(&text, &secrets());
        assert_eq!(out, format!("{{\"got\":\"{MASK}\",\"ok\":true}}"), "{echo}");
    }
    let cut = redact_and_cut(&format!("hex {hex}"), 4 + hex.len() / 2, &secrets());
    assert_eq!(
        cut,
        format!("hex {MASK}"),
        "a hex prefix at the cut is hidden too"
    );
    // Encoded twice and cut inside a nested escape: the prefix before it is hidden.
    let limit = 64;
    let pad = "x".repeat(limit - 5);
    for tail in ["tok%252FSECRET", "tok%252", "tok%5C%2FSECRET", "tok%5C%2"] {
        let cut = redact_and_cut(&format!("{pad}{tail}"), limit, &secrets());
        assert_eq!(cut, format!("{pad}{MASK}"), "{tail}");
    }
}
