//! A fenced register: the protected-resource side of fencing tokens.

use std::sync::Mutex;

use crate::FencingToken;

/// An in-memory resource that accepts a write only with a token at least as high as every token
/// it has seen (docs/contract.md §2). Tests and examples use it to show that a paused former holder's
/// write is rejected; real resources do the same with `UPDATE … WHERE fence <= $token`.
///
/// ```
/// use lock_core::{FencedRegister, FencingToken};
/// let reg = FencedRegister::new(0u64);
/// assert!(reg.write(FencingToken(2), |v| *v += 1).is_ok());
/// assert!(reg.write(FencingToken(1), |v| *v += 1).is_err()); // stale holder
/// assert_eq!(reg.read(), 1);
/// ```
#[derive(Debug, Default)]
pub struct FencedRegister<T> {
    inner: Mutex<(Option<FencingToken>, T)>,
}

/// A write carried a token lower than one the register has already seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale fencing token {offered}: the register has seen {highest}")]
pub struct StaleToken {
    /// The token of the rejected write.
    pub offered: FencingToken,
    /// The highest token seen.
    pub highest: FencingToken,
}

impl<T: Clone> FencedRegister<T> {
    /// A register holding `value`, having seen no token yet.
    pub fn new(value: T) -> Self {
        FencedRegister { inner: Mutex::new((None, value)) }
    }

    /// Applies `f` if `token` is not below the highest token seen, and records the token.
    pub fn write<R>(&self, token: FencingToken, f: impl FnOnce(&mut T) -> R) -> Result<R, StaleToken> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(highest) = g.0 {
            if token < highest {
                return Err(StaleToken { offered: token, highest });
            }
        }
        g.0 = Some(token);
        Ok(f(&mut g.1))
    }

    /// The current value.
    pub fn read(&self) -> T {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).1.clone()
    }

    /// The highest token seen.
    pub fn highest(&self) -> Option<FencingToken> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).0
    }
}
