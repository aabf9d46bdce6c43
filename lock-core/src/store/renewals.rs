//! Renewals of a [`LeaseStore`]'s leases, gathered into rounds ([`Batcher`]) and sent with
//! [`LeaseStore::renew_many`]: thousands of held leases cost a few statements per second
//! instead of one per lease and renewal. Each lease still learns its own outcome.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::timeout;

use super::lease_store::LeaseStore;
use crate::batch::Batcher;
use crate::lease::RenewOutcome;
use crate::{LockError, LockName, OwnerId};

/// How long a round waits for more renewals: short against any lease (a renewal is due a third
/// of a ttl before it is needed), long enough to gather many leases' renewals.
const GATHER: Duration = Duration::from_millis(5);

/// At most this many leases per round.
const MAX_ROUND: usize = 512;

/// One lease's renewal: which lease, and the ttl it asks for.
pub(crate) struct Renewal {
    name: LockName,
    owner: OwnerId,
    ttl: Duration,
}

type Outcome = Result<RenewOutcome, LockError>;

/// The renewal rounds of one store.
pub(crate) struct Renewals {
    batcher: Batcher<Renewal, Outcome>,
}

impl Renewals {
    pub(crate) fn new<S: LeaseStore>(store: Arc<S>) -> Renewals {
        let round = move |batch: Vec<Renewal>| {
            let store = Arc::clone(&store);
            async move { round(&*store, batch).await }
        };
        Renewals { batcher: Batcher::new(GATHER, MAX_ROUND, round) }
    }

    /// Renews one lease in the next round. The caller bounds its own wait.
    pub(crate) async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Outcome {
        let ask = Renewal { name: name.clone(), owner, ttl };
        match self.batcher.ask(ask).await {
            Some(outcome) => outcome,
            None => Err(LockError::unavailable("lease", "the renewal round ended without an answer; it is retried")),
        }
    }
}

/// One round: one `renew_many` per distinct ttl (usually one), each bounded by that ttl (a
/// renewal answered later is worth nothing: its lease has ended on the client); the answers in
/// the order of the batch.
async fn round<S: LeaseStore>(store: &S, batch: Vec<Renewal>) -> Vec<Outcome> {
    let mut outcomes: Vec<Option<Outcome>> = batch.iter().map(|_| None).collect();
    let mut left: Vec<usize> = (0..batch.len()).collect();
    while let Some(&first) = left.first() {
        let ttl = batch[first].ttl;
        let (same, rest): (Vec<usize>, Vec<usize>) = left.into_iter().partition(|&i| batch[i].ttl == ttl);
        left = rest;
        let leases: Vec<(LockName, OwnerId)> = same.iter().map(|&i| (batch[i].name.clone(), batch[i].owner)).collect();
        match timeout(ttl, store.renew_many(&leases, ttl)).await {
            Ok(answers) if answers.len() == same.len() => {
                for (i, answer) in same.into_iter().zip(answers) {
                    outcomes[i] = Some(answer);
                }
            }
            Ok(answers) => {
                let reason = format!("renew_many answered {} of {} leases", answers.len(), same.len());
                for i in same {
                    outcomes[i] = Some(Err(LockError::backend(store.backend(), reason.clone())));
                }
            }
            Err(_) => {
                for i in same {
                    let reason = format!("renewal did not answer within {ttl:?}");
                    outcomes[i] = Some(Err(LockError::unavailable(store.backend(), reason)));
                }
            }
        }
    }
    outcomes.into_iter().map(|o| o.unwrap_or_else(|| Err(LockError::unavailable("lease", "not renewed")))).collect()
}
