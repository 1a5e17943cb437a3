//! Secrets at rest: envelope encryption. Each secret gets a fresh AES-256-GCM data key; the data
//! key is wrapped by the master key from `ROWFIRE_MASTER_KEY` and stored with the master key's id,
//! so a later KMS only rewraps data keys. Nothing here ever puts a secret in an error.

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use sha2::Digest;

use crate::store::WorkspaceId;

/// The environment variable holding the master key.
pub const MASTER_KEY_ENV: &str = "ROWFIRE_MASTER_KEY";
const KEY_PREFIX: &str = "rowfire-mk1:";
const SEALED_PREFIX: &str = "v1";

/// What went wrong with a key or a sealed secret. Messages never contain key material or secrets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// No master key in the environment.
    #[error(
        "{MASTER_KEY_ENV} is not set; create one with `rowfire keygen` and keep it somewhere safe"
    )]
    MissingMasterKey,
    /// The master key is not one `rowfire keygen` makes.
    #[error(
        "{MASTER_KEY_ENV} is not a Rowfire master key (it should start with {KEY_PREFIX}); create one with `rowfire keygen`"
    )]
    BadMasterKey,
    /// The secret was sealed under another master key.
    #[error(
        "this secret was sealed under master key {stored} but {MASTER_KEY_ENV} is key {given}; set the master key it was sealed with"
    )]
    WrongMasterKey {
        /// The id stored with the secret.
        stored: String,
        /// The id of the key given.
        given: String,
    },
    /// The stored form is damaged or belongs to another secret.
    #[error(
        "a stored secret cannot be decrypted: it is damaged, or it belongs to another setting; set it again"
    )]
    Damaged,
}

fn nonce_of(bytes: &[u8]) -> Result<Nonce<aes_gcm::aead::consts::U12>, SecretError> {
    <[u8; 12]>::try_from(bytes)
        .map(Nonce::from)
        .map_err(|_| SecretError::Damaged)
}

/// The master key: 32 random bytes and a short id derived from them.
#[derive(Clone)]
pub struct MasterKey {
    id: String,
    key: Key<Aes256Gcm>,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MasterKey({})", self.id)
    }
}

impl MasterKey {
    /// A new master key, as the text `rowfire keygen` prints.
    pub fn generate() -> String {
        format!("{KEY_PREFIX}{}", B64.encode(Aes256Gcm::generate_key(OsRng)))
    }

    /// Reads a master key's text.
    pub fn parse(text: &str) -> Result<MasterKey, SecretError> {
        let bytes = text
            .trim()
            .strip_prefix(KEY_PREFIX)
            .and_then(|b| B64.decode(b).ok())
            .ok_or(SecretError::BadMasterKey)?;
        if bytes.len() != 32 {
            return Err(SecretError::BadMasterKey);
        }
        let id: String = sha2::Sha256::digest(&bytes)
            .iter()
            .take(4)
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(MasterKey {
            id,
            key: Key::<Aes256Gcm>::from(
                <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| SecretError::BadMasterKey)?,
            ),
        })
    }

    /// The key's id, stored with every secret it seals.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Seals `plaintext` for `context` (for example `integration:slack:token`): the context is
    /// authenticated, so a sealed value moved to another setting does not open.
    pub fn seal(&self, context: &str, plaintext: &str) -> String {
        let data_key = Aes256Gcm::generate_key(OsRng);
        let key_nonce = Aes256Gcm::generate_nonce(OsRng);
        let wrapped = Aes256Gcm::new(&self.key)
            .encrypt(
                &key_nonce,
                Payload {
                    msg: &data_key[..],
                    aad: self.id.as_bytes(),
                },
            )
            .expect("AES-GCM encryption of 32 bytes cannot fail");
        let nonce = Aes256Gcm::generate_nonce(OsRng);
        let sealed = Aes256Gcm::new(&data_key)
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: context.as_bytes(),
                },
            )
            .expect("AES-GCM encryption cannot fail for in-memory input");
        let wrapped = [&key_nonce[..], &wrapped].concat();
        let body = [&nonce[..], &sealed].concat();
        format!(
            "{SEALED_PREFIX}.{}.{}.{}",
            self.id,
            B64.encode(wrapped),
            B64.encode(body)
        )
    }

    /// Opens a value sealed for `context`.
    pub fn open(&self, context: &str, sealed: &str) -> Result<String, SecretError> {
        let parts: Vec<&str> = sealed.split('.').collect();
        let [version, key_id, wrapped, body] = parts.as_slice() else {
            return Err(SecretError::Damaged);
        };
        if *version != SEALED_PREFIX {
            return Err(SecretError::Damaged);
        }
        if *key_id != self.id {
            return Err(SecretError::WrongMasterKey {
                stored: key_id.to_string(),
                given: self.id.clone(),
            });
        }
        let wrapped = B64.decode(wrapped).map_err(|_| SecretError::Damaged)?;
        let body = B64.decode(body).map_err(|_| SecretError::Damaged)?;
        if wrapped.len() < 12 || body.len() < 12 {
            return Err(SecretError::Damaged);
        }
        let (key_nonce, wrapped) = wrapped.split_at(12);
        let data_key = Aes256Gcm::new(&self.key)
            .decrypt(
                &nonce_of(key_nonce)?,
                Payload {
                    msg: wrapped,
                    aad: self.id.as_bytes(),
                },
            )
            .map_err(|_| SecretError::Damaged)?;
        let (nonce, ciphertext) = body.split_at(12);
        let plain = Aes256Gcm::new(&Key::<Aes256Gcm>::from(
            <[u8; 32]>::try_from(data_key.as_slice()).map_err(|_| SecretError::Damaged)?,
        ))
        .decrypt(
            &nonce_of(nonce)?,
            Payload {
                msg: ciphertext,
                aad: context.as_bytes(),
            },
        )
        .map_err(|_| SecretError::Damaged)?;
        String::from_utf8(plain).map_err(|_| SecretError::Damaged)
    }
}

/// Why a stored secret could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum StoredSecretError {
    /// The key or the sealed value.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// The control plane.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// Only a SQLite file's URL may be stored without encryption.
    #[error(
        "only a sqlite: URL (a file path, no credential) can be stored without a master key; set {MASTER_KEY_ENV} (see `rowfire keygen`) to store this source's DSN encrypted"
    )]
    NotAFileUrl,
}

/// The `key_id` of a value stored in the clear: a SQLite source's URL, a path with no credential.
const IN_THE_CLEAR: &str = "none";
/// The setting under which a source's SQLite URL is stored in the clear.
const FILE_URL: &str = "file_url";

/// Stores `source`'s SQLite URL in the clear for `owner` `source:NAME` (replacing any earlier
/// one): a file path holds no credential, so it needs no master key. Anything but a `sqlite:` URL
/// is refused.
pub async fn put_file_url(
    store: &crate::store::Store,
    workspace: &WorkspaceId,
    source: &str,
    url: &str,
    now: jiff::Timestamp,
) -> Result<(), StoredSecretError> {
    use crate::store::{DbTime, execute};
    if crate::sql_guard::dialect_of(url) != Some(crate::sql_guard::Dialect::Sqlite) {
        return Err(StoredSecretError::NotAFileUrl);
    }
    let owner = format!("source:{source}");
    let mut tx = store.begin(workspace).await?;
    execute!(
        &mut tx,
        "INSERT INTO secret (workspace_id, owner, name, key_id, sealed, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (workspace_id, owner, name) DO UPDATE SET key_id = excluded.key_id, sealed = excluded.sealed, updated_at = excluded.updated_at",
        [workspace, &owner, FILE_URL, IN_THE_CLEAR, url, DbTime(now)]
    )
    .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(())
}

/// The names of the sources whose DSN is stored in the control plane (encrypted, or a SQLite
/// file's URL), whether or not this process could open them.
pub async fn stored_sources(
    store: &crate::store::Store,
    workspace: &WorkspaceId,
) -> Result<std::collections::BTreeSet<String>, crate::store::StoreError> {
    use crate::store::fetch_all;
    let mut tx = store.begin(workspace).await?;
    let owners = fetch_all!(
        &mut tx,
        "SELECT owner FROM secret WHERE workspace_id = $1 AND name IN ($2, $3)",
        [workspace, "dsn", FILE_URL],
        |r| r.try_get::<String, _>("owner")
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(owners
        .iter()
        .filter_map(|o| o.strip_prefix("source:"))
        .map(str::to_string)
        .collect())
}

/// Every source's SQLite URL stored with [`put_file_url`], by source name.
pub async fn file_urls(
    store: &crate::store::Store,
    workspace: &WorkspaceId,
) -> Result<std::collections::BTreeMap<String, String>, crate::store::StoreError> {
    use crate::store::fetch_all;
    let mut tx = store.begin(workspace).await?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT owner, sealed FROM secret WHERE workspace_id = $1 AND name = $2 AND key_id = $3 ORDER BY owner",
        [workspace, FILE_URL, IN_THE_CLEAR],
        |r| Ok((r.try_get::<String, _>("owner")?, r.try_get::<String, _>("sealed")?))
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(rows
        .into_iter()
        .filter_map(|(owner, url)| {
            let name = owner.strip_prefix("source:")?.to_string();
            // Admit only what put_file_url writes, whatever else the row was changed to.
            (crate::sql_guard::dialect_of(&url) == Some(crate::sql_guard::Dialect::Sqlite))
                .then_some((name, url))
        })
        .collect())
}

/// The context a secret is sealed under: its workspace, owner and name, so a sealed value copied
/// to another row does not open.
fn context(workspace: &WorkspaceId, owner: &str, name: &str) -> String {
    format!("{workspace}:{owner}:{name}")
}

/// Seals and stores a secret (replacing any earlier value) for `owner`, such as
/// `integration:slack` or `source:billing`.
pub async fn put(
    store: &crate::store::Store,
    key: &MasterKey,
    workspace: &WorkspaceId,
    owner: &str,
    name: &str,
    plaintext: &str,
    now: jiff::Timestamp,
) -> Result<(), StoredSecretError> {
    use crate::store::{DbTime, execute};
    let sealed = key.seal(&context(workspace, owner, name), plaintext);
    let mut tx = store.begin(workspace).await?;
    execute!(
        &mut tx,
        "INSERT INTO secret (workspace_id, owner, name, key_id, sealed, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (workspace_id, owner, name) DO UPDATE SET key_id = excluded.key_id, sealed = excluded.sealed, updated_at = excluded.updated_at",
        [workspace, owner, name, key.id(), sealed, DbTime(now)]
    )
    .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(())
}

/// The names of the secrets stored for `owner` (never their values).
pub async fn names(
    store: &crate::store::Store,
    workspace: &WorkspaceId,
    owner: &str,
) -> Result<Vec<String>, crate::store::StoreError> {
    Ok(sealed(store, workspace, owner)
        .await?
        .into_iter()
        .map(|(n, _)| n)
        .collect())
}

async fn sealed(
    store: &crate::store::Store,
    workspace: &WorkspaceId,
    owner: &str,
) -> Result<Vec<(String, String)>, crate::store::StoreError> {
    use crate::store::fetch_all;
    let mut tx = store.begin(workspace).await?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT name, sealed FROM secret WHERE workspace_id = $1 AND owner = $2 ORDER BY name",
        [workspace, owner],
        |r| Ok((
            r.try_get::<String, _>("name")?,
            r.try_get::<String, _>("sealed")?
        ))
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(rows)
}

/// Opens the secret `name` of every owner whose name starts with `prefix` (for example every
/// source's `dsn`), by owner without the prefix.
pub async fn open_named(
    store: &crate::store::Store,
    key: &MasterKey,
    workspace: &WorkspaceId,
    prefix: &str,
    name: &str,
) -> Result<std::collections::BTreeMap<String, String>, StoredSecretError> {
    use crate::store::fetch_all;
    let mut tx = store.begin(workspace).await?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT owner, sealed FROM secret WHERE workspace_id = $1 AND name = $2 ORDER BY owner",
        [workspace, name],
        |r| Ok((
            r.try_get::<String, _>("owner")?,
            r.try_get::<String, _>("sealed")?
        ))
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    rows.into_iter()
        .filter_map(|(owner, sealed)| {
            let short = owner.strip_prefix(prefix)?.to_string();
            Some((owner, short, sealed))
        })
        .map(|(owner, short, sealed)| {
            Ok((short, key.open(&context(workspace, &owner, name), &sealed)?))
        })
        .collect()
}

/// Opens every secret stored for `owner`, by name. A secret sealed under another master key
/// fails loudly and says which key it needs.
pub async fn open_all(
    store: &crate::store::Store,
    key: &MasterKey,
    workspace: &WorkspaceId,
    owner: &str,
) -> Result<std::collections::BTreeMap<String, String>, StoredSecretError> {
    sealed(store, workspace, owner)
        .await?
        .into_iter()
        .map(|(name, sealed)| {
            let plain = key.open(&context(workspace, owner, &name), &sealed)?;
            Ok((name, plain))
        })
        .collect()
}

/// The owner under which an integration's credentials are stored.
pub fn integration_owner(name: &str) -> String {
    format!("integration:{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_with_its_key_and_context_only() {
        let key = MasterKey::parse(&MasterKey::generate()).unwrap();
        let sealed = key.seal("integration:slack:token", "xoxb-secret-123");
        assert!(!sealed.contains("xoxb"), "{sealed}");
        assert!(sealed.starts_with(&format!("v1.{}.", key.id())));
        assert_eq!(
            key.open("integration:slack:token", &sealed).unwrap(),
            "xoxb-secret-123"
        );
        assert_eq!(
            key.open("integration:zendesk:token", &sealed),
            Err(SecretError::Damaged),
            "moved to another setting"
        );
        assert_ne!(
            sealed,
            key.seal("integration:slack:token", "xoxb-secret-123"),
            "a fresh data key and nonce every time"
        );
    }

    #[test]
    fn a_wrong_master_key_fails_loudly_and_names_both_keys() {
        let a = MasterKey::parse(&MasterKey::generate()).unwrap();
        let b = MasterKey::parse(&MasterKey::generate()).unwrap();
        let sealed = a.seal("source:warehouse:dsn", "postgres://u:pw@h/db");
        let err = b.open("source:warehouse:dsn", &sealed).unwrap_err();
        assert_eq!(
            err,
            SecretError::WrongMasterKey {
                stored: a.id().into(),
                given: b.id().into()
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains(a.id()) && msg.contains(b.id()) && !msg.contains("pw@"),
            "{msg}"
        );
    }

    #[test]
    fn damaged_values_and_bad_keys_are_refused() {
        let key = MasterKey::parse(&MasterKey::generate()).unwrap();
        let sealed = key.seal("c", "secret");
        let mut bytes = sealed.into_bytes();
        let last = bytes.len() - 2;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            key.open("c", &String::from_utf8(bytes).unwrap()),
            Err(SecretError::Damaged)
        );
        assert_eq!(key.open("c", "v1.nonsense"), Err(SecretError::Damaged));
        assert_eq!(
            MasterKey::parse("hunter2").unwrap_err(),
            SecretError::BadMasterKey
        );
        assert!(!SecretError::BadMasterKey.to_string().contains("hunter2"));
        assert!(!format!("{key:?}").contains(&MasterKey::generate()[12..20]));
    }
}
