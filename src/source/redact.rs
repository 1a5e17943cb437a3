//! DSN redaction: a connection error's message with the DSN, and the password inside it (as
//! written and percent-decoded), taken out before it is shown.

/// Removes a DSN, and the password inside it, from a message.
pub(super) fn scrub(message: &str, dsn: &str) -> String {
    let mut out = message.replace(dsn, "<dsn>");
    if let Some(password) = dsn
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, pw)| pw)
        .filter(|pw| !pw.is_empty())
    {
        out = out.replace(password, "<redacted>");
        let decoded = percent_decode(password);
        if !decoded.is_empty() {
            out = out.replace(&decoded, "<redacted>");
        }
    }
    out
}

/// Decodes `%XX` escapes (as in a URL's userinfo); leaves anything else as it is.
pub(super) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dsn_and_its_password_never_survive_in_a_message() {
        let dsn = "postgres://app:s3cr%21t@db.example:5432/prod";
        let msg = format!("failed to connect to {dsn} with password s3cr%21t");
        let clean = scrub(&msg, dsn);
        assert!(!clean.contains("s3cr"), "{clean}");
        let decoded = scrub("auth failed for password s3cr!t", dsn);
        assert!(!decoded.contains("s3cr"), "{decoded}");
        assert!(!clean.contains(dsn));
    }
}
