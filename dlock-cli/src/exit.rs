//! The exit codes of the `dlock` tool, so a script can tell "someone else holds it" from "the
//! backend is down" from "the configuration is wrong" (sysexits.h numbers where one fits).
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (`dlock run`: the command's own status otherwise) |
//! | 1 | busy: the wait elapsed while someone else held the lock; also a failed conformance run |
//! | 2 | usage: bad arguments, an invalid lock name or option |
//! | 3 | the lease was lost (`dlock run` stopped the command) |
//! | 69 | backend unavailable, or it failed an operation (EX_UNAVAILABLE) |
//! | 78 | configuration error (EX_CONFIG) |
//! | 126 / 127 | `dlock run`: the command could not be executed / was not found (as in a shell) |

use std::process::{ExitCode, ExitStatus};

use dlock::LockError;

/// An exit code of the tool.
pub(crate) type Exit = u8;

pub(crate) const SUCCESS: Exit = 0;
pub(crate) const BUSY: Exit = 1;
pub(crate) const USAGE: Exit = 2;
pub(crate) const LOST: Exit = 3;
pub(crate) const UNAVAILABLE: Exit = 69;
pub(crate) const CONFIG: Exit = 78;
pub(crate) const NOT_EXECUTABLE: Exit = 126;
pub(crate) const NOT_FOUND: Exit = 127;

/// The code for an error.
pub(crate) fn of_error(e: &LockError) -> Exit {
    match e {
        LockError::Timeout { .. } => BUSY,
        LockError::InvalidName { .. } | LockError::InvalidOptions { .. } => USAGE,
        LockError::Lost { .. } => LOST,
        LockError::Config { .. } | LockError::Unsupported { .. } => CONFIG,
        _ => UNAVAILABLE,
    }
}

/// A command's status as a shell reports it (128 + N for a signal N), clamped to a byte.
pub(crate) fn of_status(status: ExitStatus) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    let shell = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    u8::try_from(shell.clamp(0, 255)).unwrap_or(u8::MAX)
}

/// For `main`.
pub(crate) fn code(e: Exit) -> ExitCode {
    ExitCode::from(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_distinct_codes() {
        assert_eq!(
            of_error(&LockError::Timeout { name: "x".into(), waited: Default::default(), quiet_left: None }),
            BUSY
        );
        assert_eq!(of_error(&LockError::Lost { name: "x".into() }), LOST);
        assert_eq!(of_error(&LockError::unavailable("redis", "down")), UNAVAILABLE);
        assert_eq!(of_error(&LockError::config("bad")), CONFIG);
        assert_eq!(of_error(&LockError::invalid_options("zero ttl")), USAGE);
        assert_ne!(SUCCESS, BUSY);
    }
}
