//! Who holds a lock (docs/contract.md §5.6): the identity an acquirer attaches to its lease, and
//! what [`DistributedLock::inspect`](crate::DistributedLock::inspect) and `list` report.

use std::time::Duration;

use crate::{FencingToken, LockError, LockKind};

/// The longest holder id, in bytes.
pub const MAX_HOLDER_LEN: usize = 255;
/// The largest metadata, in bytes.
pub const MAX_METADATA_LEN: usize = 1024;

/// A holder's identity (a pod or host name, a job id) and optional small metadata, stored with
/// the lease so that others can see who holds a lock. Validated on construction: the id is 1 to
/// [`MAX_HOLDER_LEN`] bytes without control characters, the metadata at most
/// [`MAX_METADATA_LEN`] bytes.
///
/// ```
/// use lock_core::Holder;
/// let h = Holder::new("web-7")?.with_metadata("{\"version\":\"1.4.2\"}")?;
/// assert_eq!(h.id(), "web-7");
/// assert!(Holder::new("").is_err());
/// # Ok::<(), lock_core::LockError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    id: String,
    metadata: Option<String>,
}

impl Holder {
    /// A holder id; `InvalidOptions` when empty, longer than [`MAX_HOLDER_LEN`] bytes or holding
    /// control characters.
    pub fn new(id: impl Into<String>) -> Result<Self, LockError> {
        let id = id.into();
        if id.is_empty() || id.len() > MAX_HOLDER_LEN {
            return Err(LockError::invalid_options(format!(
                "holder id must be 1 to {MAX_HOLDER_LEN} bytes, got {}; use a host, pod or job name",
                id.len()
            )));
        }
        if id.chars().any(char::is_control) {
            return Err(LockError::invalid_options("holder id contains control characters; use a printable name"));
        }
        Ok(Holder { id, metadata: None })
    }

    /// Attaches metadata (at most [`MAX_METADATA_LEN`] bytes; JSON is a good choice).
    pub fn with_metadata(mut self, metadata: impl Into<String>) -> Result<Self, LockError> {
        let metadata = metadata.into();
        if metadata.len() > MAX_METADATA_LEN {
            return Err(LockError::invalid_options(format!(
                "holder metadata is {} bytes; at most {MAX_METADATA_LEN} are stored with a lease",
                metadata.len()
            )));
        }
        self.metadata = Some(metadata);
        Ok(self)
    }

    /// The id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The metadata, if any.
    pub fn metadata(&self) -> Option<&str> {
        self.metadata.as_deref()
    }
}

/// What a backend reports about one current grant of a name.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The lock name (as the application gave it).
    pub name: String,
    /// The holder's id, when the acquirer gave one.
    pub holder: Option<String>,
    /// The grant's fencing token.
    pub token: FencingToken,
    /// Which kind of grant.
    pub kind: LockKind,
    /// The lease time left, where the backend knows it (`None` on ZooKeeper: the lease is the
    /// holder's session).
    #[serde(rename = "remaining_ms", serialize_with = "millis_opt::serialize")]
    pub remaining: Option<Duration>,
    /// The holder's metadata, if any.
    pub metadata: Option<String>,
}

impl HolderInfo {
    /// An entry with no holder id, no metadata and no known remaining time.
    pub fn new(name: impl Into<String>, token: FencingToken, kind: LockKind) -> Self {
        HolderInfo { name: name.into(), holder: None, token, kind, remaining: None, metadata: None }
    }

    /// Sets what the acquirer attached.
    pub fn with_holder(mut self, holder: Option<String>, metadata: Option<String>) -> Self {
        self.holder = holder;
        self.metadata = metadata;
        self
    }

    /// Sets the lease time left.
    pub fn with_remaining(mut self, remaining: Option<Duration>) -> Self {
        self.remaining = remaining;
        self
    }
}

/// `remaining` as whole milliseconds in JSON (`null` when unknown).
mod millis_opt {
    use std::time::Duration;

    pub(super) fn serialize<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }
}
