//! The rules every read-write lock and semaphore backend shares (docs/contract.md §5.2, §5.3):
//! the writer's claim, the permits check and the permits-mismatch error. A leaf of `kinds/`.

use std::fmt::Display;
use std::time::Duration;

use crate::{LockError, LockName};

/// How long a refused writer's claim holds back new readers (docs/contract.md §5.2): long
/// enough to outlast the writer's re-try interval (a refused writer re-tries within a third of it),
/// short enough that a writer that vanished (a crashed process) delays readers only briefly. A
/// write wait that ends without a grant in a live process withdraws its claim at once
/// ([`LeaseStore::abandon`](crate::backend::LeaseStore::abandon)).
pub fn writer_claim(ttl: Duration) -> Duration {
    (ttl / 2).clamp(Duration::from_millis(300), Duration::from_secs(2))
}

/// A semaphore needs at least one permit (docs/contract.md §5.3): `permits == 0` is
/// `InvalidOptions`.
pub fn check_permits(permits: u32) -> Result<(), LockError> {
    if permits == 0 {
        return Err(LockError::invalid_options("a semaphore needs at least one permit; ask for permits >= 1"));
    }
    Ok(())
}

/// The error of a caller asking semaphore `name` for `asked` permits while it is in use with
/// `held` (docs/contract.md §5.3).
pub fn permits_mismatch(name: &LockName, held: impl Display, asked: u32) -> LockError {
    LockError::invalid_options(format!(
        "semaphore {name} is in use with {held} permits, not {asked}; every user of a semaphore must ask for the \
         same number of permits"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_rules() {
        let ms = Duration::from_millis;
        assert_eq!(writer_claim(ms(100)), ms(300));
        assert_eq!(writer_claim(ms(1000)), ms(500));
        assert_eq!(writer_claim(ms(60_000)), ms(2000));
        assert!(matches!(check_permits(0), Err(LockError::InvalidOptions { .. })));
        assert!(check_permits(1).is_ok());
        let name = LockName::new("encoders").expect("name");
        let e = permits_mismatch(&name, 3, 2);
        assert!(matches!(e, LockError::InvalidOptions { .. }));
        assert!(e.to_string().contains("in use with 3 permits, not 2"), "{e}");
    }
}
