//! [`Runner`]: how one dialect operation is run, re-run and bounded.
//!
//! A dialect method runs one statement (or one short transaction) and says nothing about
//! retries or time. Everything the store and the lock kinds send goes through here instead:
//! transient conflicts between contenders (deadlock, lock wait, busy) are re-run with a short
//! back-off, a connection that broke under a statement is replaced and the statement re-run
//! (every statement is idempotent for its owner id), and the whole of it is bounded by
//! `request_timeout`, past which the caller gets `Unavailable`. Kept apart from the store so
//! that the background tasks (an observer's row, the kinds) run their statements the same way.

use std::future::Future;
use std::time::Duration;

use lock_core::{backend::Backoff, LockError};
use tokio::time::timeout;

use crate::error::{classify, to_lock_error, Class, Codes};

/// Runs dialect operations within the request timeout, re-running what may be re-run.
#[derive(Clone, Copy)]
pub(crate) struct Runner {
    codes: Codes,
    request_timeout: Duration,
}

impl Runner {
    pub(crate) fn new(codes: Codes, request_timeout: Duration) -> Runner {
        Runner { codes, request_timeout }
    }

    /// The bound of one operation, re-runs included.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Runs `op`, re-running it on transient conflicts (deadlock, busy), all within
    /// `request_timeout`.
    pub(crate) async fn run<T, F, Fut>(&self, what: &str, op: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        self.run_bounded(what, usize::MAX, op).await
    }

    /// [`Runner::run`], re-running at most `conflicts` times on transient conflicts.
    pub(crate) async fn run_bounded<T, F, Fut>(&self, what: &str, conflicts: usize, op: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        self.run_tracked(what, conflicts, op).await.map(|(v, _)| v)
    }

    /// Runs an owner-checked release; whether it freed a live lease of ours. A release whose
    /// connection broke may have committed before the reply was lost: the re-run then finds
    /// nothing of ours, because we freed it. That is a release, not a lost lease.
    pub(crate) async fn run_release<F, Fut>(&self, what: &str, op: F) -> Result<bool, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<bool, sqlx::Error>>,
    {
        let (freed, unknown) = self.run_tracked(what, usize::MAX, op).await?;
        if !freed && unknown {
            tracing::debug!(
                backend = self.codes.label,
                "{what}: an earlier attempt may have committed; counted as released"
            );
        }
        Ok(freed || unknown)
    }

    /// The retry loop: also says whether an attempt before the last one ended with its outcome
    /// unknown (the connection broke under it).
    async fn run_tracked<T, F, Fut>(&self, what: &str, conflicts: usize, mut op: F) -> Result<(T, bool), LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let codes = self.codes;
        let mut conflicted = 0;
        let work = async {
            let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(100));
            let mut broken = 0;
            loop {
                match op().await {
                    Ok(v) => return Ok((v, broken > 0)),
                    // Every statement is safe to repeat: acquire and renew are idempotent for one
                    // owner, and a repeated release is told apart by `run_release`.
                    Err(e) if broken < 2 && classify(codes, &e) == Class::Broken => {
                        broken += 1;
                        tracing::debug!(backend = codes.label, error = %e, "{what}: connection broken; retrying on another");
                    }
                    Err(e) if conflicted < conflicts && classify(codes, &e) == Class::Transient => {
                        conflicted += 1;
                        tracing::debug!(backend = codes.label, error = %e, "{what}: transient conflict; retrying");
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                    Err(e) => return Err(to_lock_error(codes, what, e)),
                }
            }
        };
        match timeout(self.request_timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(LockError::unavailable(
                codes.label,
                format!("{what} did not answer within {:?} (request_timeout)", self.request_timeout),
            )),
        }
    }
}
