//! A fenced register: the protected-resource side of fencing tokens.

use std::sync::Mutex;

use crate::{FencingToken, OwnerId};

/// An in-memory resource that accepts a write only with a token at least as high as every token
/// it has seen (docs/contract.md §2). Tests and examples use it to show that a paused former holder's
/// write is rejected; real resources do the same with `UPDATE … WHERE fence <= $token`.
///
/// Equal is not greater: with [`FencedRegister::write_as`] a write carrying the highest token
/// seen is accepted only from the holder that wrote it first (identified by the lease's
/// [`OwnerId`], unique per acquisition), so two grants that carry the same token cannot both
/// write. [`FencedRegister::write`] has no identity to compare and accepts an equal token.
///
/// ```
/// use lock_core::{FencedRegister, FencingToken, OwnerId};
/// let reg = FencedRegister::new(0u64);
/// let (a, b) = (OwnerId::random(), OwnerId::random());
/// assert!(reg.write_as(a, FencingToken(2), |v| *v += 1).is_ok());
/// assert!(reg.write_as(a, FencingToken(2), |v| *v += 1).is_ok()); // the same holder again
/// assert!(reg.write_as(b, FencingToken(2), |v| *v += 1).is_err()); // another grant, same token
/// assert!(reg.write_as(b, FencingToken(1), |v| *v += 1).is_err()); // stale holder
/// assert_eq!(reg.read(), 2);
/// ```
#[derive(Debug, Default)]
pub struct FencedRegister<T> {
    inner: Mutex<Inner<T>>,
}

#[derive(Debug, Default)]
struct Inner<T> {
    /// The highest token seen, and who wrote with it first (`None`: an anonymous write).
    highest: Option<(FencingToken, Option<OwnerId>)>,
    value: T,
}

/// A write carried a token lower than one the register has already seen, or the same token as
/// another holder (`offered == highest`).
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
        FencedRegister { inner: Mutex::new(Inner { highest: None, value }) }
    }

    /// Applies `f` if `token` is not below the highest token seen, and records the token. An
    /// equal token is accepted: without a holder identity the register cannot tell two grants
    /// apart (use [`FencedRegister::write_as`] where it can).
    pub fn write<R>(&self, token: FencingToken, f: impl FnOnce(&mut T) -> R) -> Result<R, StaleToken> {
        self.write_checked(None, token, f)
    }

    /// Applies `f` if `token` is above the highest token seen, or equal to it and `holder` is
    /// the one that wrote with it first; records the token.
    pub fn write_as<R>(
        &self,
        holder: OwnerId,
        token: FencingToken,
        f: impl FnOnce(&mut T) -> R,
    ) -> Result<R, StaleToken> {
        self.write_checked(Some(holder), token, f)
    }

    fn write_checked<R>(
        &self,
        holder: Option<OwnerId>,
        token: FencingToken,
        f: impl FnOnce(&mut T) -> R,
    ) -> Result<R, StaleToken> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((highest, first)) = g.highest {
            if token < highest || (token == highest && first != holder) {
                return Err(StaleToken { offered: token, highest });
            }
        }
        if g.highest.is_none_or(|(h, _)| token > h) {
            g.highest = Some((token, holder));
        }
        Ok(f(&mut g.value))
    }

    /// The current value.
    pub fn read(&self) -> T {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).value.clone()
    }

    /// The highest token seen.
    pub fn highest(&self) -> Option<FencingToken> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).highest.map(|(t, _)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_tokens_only_from_the_same_holder() {
        let (a, b) = (Some(OwnerId::random()), Some(OwnerId::random()));
        // (writer, token, accepted) in order, on one register.
        let table: &[(Option<OwnerId>, u64, bool)] = &[
            (a, 5, true),
            (a, 5, true),
            (b, 5, false),
            (None, 5, false),
            (a, 4, false),
            (b, 6, true),
            (a, 6, false),
            (b, 6, true),
            (None, 7, true),
            (None, 7, true),
            (a, 7, false),
            (a, u64::MAX, true),
        ];
        let reg = FencedRegister::new(0u32);
        for (i, &(who, token, ok)) in table.iter().enumerate() {
            let got = reg.write_checked(who, FencingToken(token), |v| *v += 1).is_ok();
            assert_eq!(got, ok, "row {i}: token {token}");
        }
        assert_eq!(reg.read() as usize, table.iter().filter(|r| r.2).count());
        assert_eq!(reg.highest(), Some(FencingToken(u64::MAX)));
    }
}
