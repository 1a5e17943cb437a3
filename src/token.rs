//! API tokens (the `api_token` table): what lets a caller of `rowfire serve` act in one
//! workspace. A token is shown once, when it is created; the control plane keeps only the
//! SHA-256 of its secret, so a copy of the database grants nothing. Every statement on the table
//! is here.
//!
//! A token reads `rft_<id>_<secret>`: `id` (12 hex digits) is its public handle, listed and
//! revoked by name; `secret` is 32 random bytes from the operating system, base64url.

use aes_gcm::aead::OsRng;
use aes_gcm::aead::rand_core::RngCore as _;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use jiff::Timestamp;
use sha2::{Digest as _, Sha256};

use crate::store::{DbTime, Store, StoreError, Unscoped, WorkspaceId, execute, fetch_all};

/// What every token begins with, so a leaked one is recognisable (and secret scanners can find it).
pub const PREFIX: &str = "rft_";
/// The longest name a token may carry.
pub const MAX_NAME: usize = 100;
/// The longest text that can be a token; anything longer is refused before it is hashed.
const MAX_TOKEN: usize = 128;

/// A stored token, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// Its public handle.
    pub id: String,
    /// The workspace it acts in.
    pub workspace: WorkspaceId,
    /// What its owner called it.
    pub name: String,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it was last used (to the minute), if ever.
    pub last_used_at: Option<Timestamp>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<Timestamp>,
}

/// Why a token could not be created, revoked or used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The name is empty, too long or holds control characters.
    #[error("a token's name must be 1 to {MAX_NAME} printable characters")]
    Name,
    /// No token has that id in the workspace.
    #[error("no token \"{0}\" in this workspace; `rowfire tokens list` shows them")]
    Unknown(String),
    /// The control plane failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Creates a token in `workspace`; returns it and its full text, which is never stored or shown
/// again.
pub async fn create(
    store: &Store,
    workspace: &WorkspaceId,
    name: &str,
    now: Timestamp,
) -> Result<(Token, String), TokenError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME || name.chars().any(|c| c.is_control()) {
        return Err(TokenError::Name);
    }
    let mut bytes = [0u8; 38];
    OsRng.fill_bytes(&mut bytes);
    let id: String = bytes[..6].iter().map(|b| format!("{b:02x}")).collect();
    let text = format!("{PREFIX}{id}_{}", B64.encode(&bytes[6..]));
    let mut tx = store.begin(workspace).await?;
    execute!(
        &mut tx,
        "INSERT INTO api_token (id, workspace_id, name, hash, created_at) VALUES ($1, $2, $3, $4, $5)",
        [&id, workspace, name, hash(&text), DbTime(now)]
    )
    .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))?;
    let token = Token {
        id,
        workspace: workspace.clone(),
        name: name.to_string(),
        created_at: now,
        last_used_at: None,
        revoked_at: None,
    };
    Ok((token, text))
}

/// The workspace's tokens, newest first, revoked ones included.
pub async fn list(store: &Store, workspace: &WorkspaceId) -> Result<Vec<Token>, TokenError> {
    let mut tx = store.begin(workspace).await?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT id, workspace_id, name, created_at, last_used_at, revoked_at FROM api_token WHERE workspace_id = $1 ORDER BY created_at DESC, id",
        [workspace],
        |r| token_row(r)
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(rows)
}

/// Whether the workspace's token `id` is still live (known and not revoked): what a long-lived
/// response, such as the activity stream, checks as it goes on.
pub async fn is_live(store: &Store, workspace: &WorkspaceId, id: &str) -> Result<bool, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let found = fetch_all!(
        &mut tx,
        "SELECT id FROM api_token WHERE workspace_id = $1 AND id = $2 AND revoked_at IS NULL",
        [workspace, id],
        |r| r.try_get::<String, _>("id")
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(!found.is_empty())
}

/// Revokes a token of the workspace: from the next request on it grants nothing. Revoking one
/// already revoked keeps its first revocation time.
pub async fn revoke(
    store: &Store,
    workspace: &WorkspaceId,
    id: &str,
    now: Timestamp,
) -> Result<(), TokenError> {
    let mut tx = store.begin(workspace).await?;
    let known = execute!(
        &mut tx,
        "UPDATE api_token SET revoked_at = COALESCE(revoked_at, $3) WHERE workspace_id = $1 AND id = $2",
        [workspace, id, DbTime(now)]
    )
    .map_err(|e| store.error(e))?;
    if known == 0 {
        return Err(TokenError::Unknown(id.chars().take(40).collect()));
    }
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(())
}

/// The live token `text` names, if any: its workspace is not known until it is found, so the
/// lookup is one of the few unscoped statements. Text that cannot be a token is refused without
/// a query. Marks the token used (at most once a minute, so reads do not each write).
pub async fn resolve(
    store: &Store,
    text: &str,
    now: Timestamp,
) -> Result<Option<Token>, StoreError> {
    if text.len() > MAX_TOKEN || !text.starts_with(PREFIX) {
        return Ok(None);
    }
    let mut tx = store
        .begin_unscoped(Unscoped::TokenLookup)
        .await
        .map_err(|e| store.error(e))?;
    let found = fetch_all!(
        &mut tx,
        "SELECT id, workspace_id, name, created_at, last_used_at, revoked_at FROM api_token WHERE hash = $1 AND revoked_at IS NULL",
        [hash(text)],
        |r| token_row(r)
    )
    .map_err(|e| store.error(e))?
    .into_iter()
    .next();
    if let Some(token) = &found {
        let stale = token
            .last_used_at
            .is_none_or(|at| now.duration_since(at).as_secs() >= 60);
        if stale {
            execute!(
                &mut tx,
                "UPDATE api_token SET last_used_at = $2 WHERE id = $1",
                [&token.id, DbTime(now)]
            )
            .map_err(|e| store.error(e))?;
        }
    }
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(found)
}

/// The stored form of a token: the hex SHA-256 of its text.
fn hash(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn token_row(r: &crate::store::StoreRow<'_>) -> Result<Token, sqlx::Error> {
    Ok(Token {
        id: r.try_get("id")?,
        workspace: r.try_get("workspace_id")?,
        name: r.try_get("name")?,
        created_at: r.try_get::<DbTime, _>("created_at")?.0,
        last_used_at: r.try_get::<Option<DbTime>, _>("last_used_at")?.map(|t| t.0),
        revoked_at: r.try_get::<Option<DbTime>, _>("revoked_at")?.map(|t| t.0),
    })
}
