//! [`WorkspaceId`]: the tenant every stored row belongs to, as a type. It is checked where it
//! enters (a command line, an API path, a row read back) and bound to statements as text.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;

/// The longest workspace id.
pub const MAX_WORKSPACE_ID: usize = 64;

/// A workspace's id: 1 to 64 characters of lower-case ASCII letters, digits, `-` and `_`,
/// starting with a letter or digit. It reads as a `&str` where one is wanted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkspaceId(Cow<'static, str>);

/// Why text is not a workspace id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "\"{0}\" is not a workspace id: use 1 to {MAX_WORKSPACE_ID} lower-case letters, digits, '-' or '_', starting with a letter or digit"
)]
pub struct BadWorkspaceId(pub String);

impl WorkspaceId {
    /// The workspace every row belongs to in single-tenant use.
    pub const DEFAULT: WorkspaceId = WorkspaceId(Cow::Borrowed("default"));

    /// Checks `text` and makes it an id.
    pub fn parse(text: &str) -> Result<WorkspaceId, BadWorkspaceId> {
        let well_formed = (1..=MAX_WORKSPACE_ID).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
            && text
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphanumeric());
        if well_formed {
            Ok(WorkspaceId(Cow::Owned(text.to_string())))
        } else {
            Err(BadWorkspaceId(text.chars().take(80).collect()))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for WorkspaceId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WorkspaceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for WorkspaceId {
    type Err = BadWorkspaceId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        WorkspaceId::parse(s)
    }
}

impl PartialEq<str> for WorkspaceId {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

super::text_column!(WorkspaceId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_ids_are_short_plain_names_and_nothing_else() {
        for good in ["default", "acme", "acme-eu_2", "7seas"] {
            assert_eq!(WorkspaceId::parse(good).unwrap().as_str(), good);
        }
        let long = "a".repeat(MAX_WORKSPACE_ID + 1);
        // Store::begin writes the id into its BEGIN statement: no quote or backslash may pass.
        for bad in [
            "",
            "Acme",
            "-x",
            "a b",
            "a/b",
            "é",
            "a'--",
            "a\\b",
            long.as_str(),
        ] {
            assert!(WorkspaceId::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(WorkspaceId::DEFAULT.to_string(), "default");
    }
}
