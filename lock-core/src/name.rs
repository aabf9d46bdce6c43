//! Lock names, fencing tokens and owner ids (docs/contract.md §2).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::LockError;

/// The longest lock name, in bytes.
pub const MAX_NAME_LEN: usize = 255;

/// A validated lock name: 1..=255 bytes of UTF-8 without NUL or other control characters.
///
/// Every valid name works on every backend; backends escape names into keys, rows or znodes and
/// never strip characters, so two distinct names never collide.
///
/// ```
/// use lock_core::LockName;
/// let name = LockName::new("orders/42").unwrap();
/// assert_eq!(name.as_str(), "orders/42");
/// assert!(LockName::new("").is_err());
/// assert!(LockName::new("a\0b").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(Arc<str>);

impl LockName {
    /// Validates `name`.
    pub fn new(name: impl AsRef<str>) -> Result<Self, LockError> {
        let name = name.as_ref();
        let reason = if name.is_empty() {
            Some("it is empty")
        } else if name.len() > MAX_NAME_LEN {
            Some("it is longer than 255 bytes")
        } else if name.chars().any(char::is_control) {
            Some("it contains a NUL or other control character")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(LockError::InvalidName { name: shorten(name), reason }),
            None => Ok(LockName(Arc::from(name))),
        }
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name escaped into a single, collision-free segment of `[A-Za-z0-9_.-]` plus `%XX`
    /// escapes (every other byte, and `%` itself, is percent-encoded; a leading `.` too, so that
    /// `.` and `..` never appear as path segments). Handy for znodes, file names and keys.
    ///
    /// ```
    /// use lock_core::LockName;
    /// assert_eq!(LockName::new("a/b").unwrap().escaped(), "a%2Fb");
    /// assert_eq!(LockName::new("..").unwrap().escaped(), "%2E.");
    /// ```
    pub fn escaped(&self) -> String {
        escape_prefix(&self.0)
    }

    /// The name whose [`escaped`](Self::escaped) form is `escaped`; `None` when `escaped` is
    /// not such a form (a key or node written by something else).
    ///
    /// ```
    /// use lock_core::LockName;
    /// let name = LockName::new("a/b é").unwrap();
    /// assert_eq!(LockName::from_escaped(&name.escaped()), Some(name));
    /// assert_eq!(LockName::from_escaped("%4"), None);
    /// ```
    pub fn from_escaped(escaped: &str) -> Option<LockName> {
        let bytes = escaped.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = escaped.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        let name = LockName::new(String::from_utf8(out).ok()?).ok()?;
        (name.escaped() == escaped).then_some(name)
    }
}

/// The [`LockName::escaped`] form of a name prefix: every name starting with `prefix` has an
/// escaped form starting with this (backends enumerate names by prefix with it).
pub fn escape_prefix(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len());
    for (i, b) in prefix.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (b == b'.' && i > 0);
        if plain {
            out.push(b as char);
        } else {
            // By hand, not `format!`: this runs for every key of every call (it showed in the Redis free path's profile).
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xF)]));
        }
    }
    out
}

fn shorten(name: &str) -> String {
    let mut s: String = name.chars().take(64).collect::<String>().escape_debug().collect();
    if name.chars().count() > 64 {
        s.push('…');
    }
    s
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for LockName {
    type Err = LockError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LockName::new(s)
    }
}

impl TryFrom<&str> for LockName {
    type Error = LockError;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        LockName::new(s)
    }
}

impl TryFrom<String> for LockName {
    type Error = LockError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        LockName::new(s)
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A fencing token: for one lock name, strictly greater than every token issued before.
///
/// Pass it to the protected resource with every write; the resource rejects a write whose token
/// is lower than the highest it has seen (see [`FencedRegister`](crate::FencedRegister)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The token as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A random 128-bit id, unique per acquisition. Renew and release act only if the server still
/// stores this owner.
///
/// Drawn from the thread's CSPRNG (rand's `ThreadRng`, seeded from the OS), in uuid v4 form.
/// That generator's state is memory, so a copy of the process would draw the same ids as the
/// original — two owners that renew and release each other's leases:
/// - **`fork`**: the generator is reseeded from the OS when the process id differs from the one
///   it was last seeded in, so a forked child never repeats its parent's ids.
/// - **VM snapshots and process checkpoints** (CRIU, Firecracker snapshots, a cloned VM) keep
///   the process id: nothing inside the process can tell that it was restored, and two clones
///   of one snapshot can draw the same ids. Restart the processes that hold or take locks after
///   restoring a snapshot more than once (or drop every `Lease` before taking the snapshot).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OwnerId(u128);

thread_local! {
    /// The process id this thread's generator was last seeded in (0: not yet checked here).
    static SEEDED_IN: ForkCheck = const { ForkCheck::new() };
}

/// Tells a thread whose generator state was copied into another process (`fork`) apart from the
/// one that seeded it: by the process id it was seeded in.
struct ForkCheck(std::cell::Cell<u32>);

impl ForkCheck {
    const fn new() -> Self {
        ForkCheck(std::cell::Cell::new(0))
    }

    /// Whether a generator last seeded in another process than `pid` (or never checked) must be
    /// reseeded before it draws; records `pid` as seeded.
    fn must_reseed(&self, pid: u32) -> bool {
        self.0.replace(pid) != pid
    }
}

impl OwnerId {
    /// A fresh random id (uuid v4 from the thread's CSPRNG, reseeded from the OS after a fork:
    /// one `getpid` per acquisition, no entropy system call).
    pub fn random() -> Self {
        use rand::Rng;
        let mut rng = rand::rng();
        if SEEDED_IN.with(|check| check.must_reseed(std::process::id())) {
            // Without the OS (no entropy source at all) the thread's own seeding failed already.
            let _ = rng.reseed();
        }
        let mut bytes = [0u8; 16];
        rng.fill_bytes(&mut bytes);
        OwnerId(uuid::Builder::from_random_bytes(bytes).into_uuid().as_u128())
    }

    /// The id as 32 lowercase hex digits, the form stored by backends.
    pub fn to_hex(self) -> String {
        format!("{:032x}", self.0)
    }

    /// Parses the form produced by [`OwnerId::to_hex`].
    pub fn from_hex(s: &str) -> Option<Self> {
        if s.len() != 32 {
            return None;
        }
        u128::from_str_radix(s, 16).ok().map(OwnerId)
    }

    /// The raw value.
    pub fn as_u128(self) -> u128 {
        self.0
    }
}

impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerId({})", self.to_hex())
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names() {
        for n in ["a", "a/b", "../x", "'; DROP TABLE x; --", "ключ", "🔒", &"x".repeat(255)] {
            assert_eq!(LockName::new(n).unwrap().as_str(), n);
        }
    }

    #[test]
    fn invalid_names() {
        for n in ["", "a\0", "a\nb", "\u{7f}", &"x".repeat(256)] {
            assert!(matches!(LockName::new(n), Err(LockError::InvalidName { .. })), "{n:?}");
        }
        // 255 bytes of multibyte text is fine, 256 is not.
        let s = "é".repeat(128);
        assert_eq!(s.len(), 256);
        assert!(LockName::new(&s).is_err());
    }

    #[test]
    fn escaping_is_injective() {
        let names = ["a/b", "a%2Fb", "a_b", ".", "..", "%2E.", "a.b", "A", "a"];
        let mut seen = std::collections::HashSet::new();
        for n in names {
            let e = LockName::new(n).unwrap().escaped();
            assert!(!e.contains('/') && e != "." && e != "..", "{e}");
            assert!(seen.insert(e.clone()), "collision on {n} -> {e}");
        }
    }

    #[test]
    fn owner_hex_roundtrip() {
        let o = OwnerId::random();
        assert_eq!(OwnerId::from_hex(&o.to_hex()), Some(o));
        assert_ne!(OwnerId::random(), OwnerId::random());
        assert_eq!(uuid::Uuid::from_u128(o.as_u128()).get_version_num(), 4, "uuid v4 form");
    }

    /// A generator state copied into another process (a `fork`) is reseeded before it draws: the
    /// check answers yes on the first draw of a thread and whenever the process id has changed.
    #[test]
    fn the_generator_is_reseeded_when_the_process_id_changes() {
        let check = ForkCheck::new();
        assert!(check.must_reseed(100), "a thread's first draw reseeds");
        assert!(!check.must_reseed(100), "same process: no reseed");
        assert!(check.must_reseed(101), "a forked child (new pid) reseeds");
        assert!(!check.must_reseed(101));
        assert!(check.must_reseed(100), "any change of pid reseeds");
        // The real thread-local check is the same one, fed the real pid.
        let _ = OwnerId::random();
        assert!(!SEEDED_IN.with(|c| c.must_reseed(std::process::id())), "seeded in this process");
        assert!(SEEDED_IN.with(|c| c.must_reseed(std::process::id().wrapping_add(1))), "as if forked");
    }
}
