//! The masters of a Redlock deployment as one [`LeaseStore`]: connecting, and the trait that
//! calls the phases (`super::acquire`, `super::extend`, `super::release`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use lock_core::{
    backend::{Claim, LeaseStore, ReleaseOutcome, RenewOutcome, TryLock, WakeSubscription},
    Capabilities, FencingToken, LockError, LockName, OwnerId,
};
use tokio::time::Instant;

use super::blocking::Delivery;
use crate::blocking::Blocking;
use crate::boot::Boot;
use crate::conn::Node;
use crate::endpoint::Endpoint;
use crate::options::queued_capabilities;
use crate::pubsub::Notifier;
use crate::scripts::{Keys, REDLOCK_ARM_SRC};
use crate::RedisOptions;

pub(super) const BACKEND: &str = "redlock";

/// N independent Redis masters as one [`LeaseStore`]; use it through [`Redlock`](crate::Redlock).
pub struct RedlockStore {
    pub(super) nodes: Vec<Arc<Node>>,
    pub(super) notifier: Notifier,
    pub(super) prefix: String,
    pub(super) quorum: usize,
    pub(super) request_timeout: Duration,
    pub(super) boot: Boot,
    pub(super) max_ttl: Duration,
    /// `RedisOptions::max_waiters`, per master.
    pub(super) max_waiters: u32,
    /// The ticket of each wait in progress (by its owner id) and when it was last used: one
    /// ticket for every attempt of a wait, on every master.
    pub(super) tickets: Mutex<HashMap<OwnerId, (u64, Instant)>>,
    /// Blocking delivery of grants in the release (`super::blocking`), `RedisOptions::blocking_handoff`.
    delivery: Option<Arc<Delivery>>,
}

impl std::fmt::Debug for RedlockStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockStore")
            .field("masters", &self.nodes.iter().map(|n| n.label.as_str()).collect::<Vec<_>>())
            .field("quorum", &self.quorum)
            .field("key_prefix", &self.prefix)
            .finish()
    }
}

impl RedlockStore {
    /// Opens a client per master and checks that a majority answers.
    pub(crate) async fn connect(url: &str, options: &RedisOptions) -> Result<RedlockStore, LockError> {
        options.validate()?;
        let urls = crate::url::parse_redlock(url)?;
        let ca = options.read_ca().await?;
        let mut nodes = Vec::with_capacity(urls.len());
        let mut pubsub = Vec::with_capacity(urls.len());
        let mut blocking = Vec::with_capacity(urls.len());
        for u in &urls {
            let client = crate::url::open_client_with_ca(u, ca.as_deref())?;
            let endpoint = Endpoint::Fixed(client);
            let node = Node::new(endpoint.clone(), u, BACKEND, options.connect_timeout, options.request_timeout);
            let (connect, request) = (options.connect_timeout, options.request_timeout);
            let label = node.label.clone();
            blocking.push(Arc::new(Blocking::with_arm(endpoint.clone(), label, connect, request, REDLOCK_ARM_SRC)));
            pubsub.push((endpoint, node.label.clone()));
            nodes.push(Arc::new(node));
        }
        let quorum = nodes.len() / 2 + 1;
        if nodes.len() % 2 == 0 || nodes.len() < 3 {
            tracing::warn!(
                masters = nodes.len(),
                "redlock works best with an odd number of at least 3 independent masters"
            );
        }
        let bound = options.connect_timeout + options.request_timeout;
        let pings = join_all(nodes.iter().map(|n| n.ping(bound))).await;
        let up = pings.iter().filter(|r| r.is_ok()).count();
        if up < quorum {
            let reasons: Vec<String> = pings.into_iter().filter_map(|r| r.err()).map(|e| e.to_string()).collect();
            if let Some(cfg) = reasons.iter().find(|r| r.starts_with("configuration error")) {
                return Err(LockError::config(cfg.clone()));
            }
            return Err(LockError::unavailable(
                BACKEND,
                format!(
                    "only {up} of {} masters answered, a majority of {quorum} is needed: {}",
                    nodes.len(),
                    reasons.join("; ")
                ),
            ));
        }
        // The masters that answered must let this user run everything (the others are checked
        // by their first refusal, which the watchdog reports).
        for (node, ping) in nodes.iter().zip(&pings) {
            if ping.is_ok() {
                let db = node.db();
                crate::acl::check(node, &options.key_prefix, db, crate::acl::Needs::Exclusive).await?;
            }
        }
        let notifier = Notifier::new(pubsub, &options.key_prefix, options.connect_timeout, options.request_timeout);
        let delivery = options.blocking_handoff.then(|| Arc::new(Delivery::new(blocking, nodes.clone(), quorum)));
        Ok(RedlockStore {
            nodes,
            notifier,
            prefix: options.key_prefix.clone(),
            quorum,
            request_timeout: options.request_timeout,
            boot: Boot::new(&options.key_prefix, options.quiet_period(), false),
            max_ttl: options.max_ttl,
            max_waiters: options.max_waiters,
            tickets: Mutex::new(HashMap::new()),
            delivery,
        })
    }

    /// How many masters must agree.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// How many masters there are.
    pub fn masters(&self) -> usize {
        self.nodes.len()
    }

    /// The error of a round that a majority did not answer.
    pub(super) fn unavailable(&self, answered: usize, errors: &[LockError]) -> LockError {
        let first = errors.first().map(|e| e.to_string()).unwrap_or_default();
        LockError::unavailable(
            BACKEND,
            format!(
                "only {answered} of {} masters answered, a majority of {} is needed (first error: {first})",
                self.nodes.len(),
                self.quorum
            ),
        )
    }
}

#[async_trait]
impl LeaseStore for RedlockStore {
    fn backend(&self) -> &str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        // The ticket-ordered queue on each master (crate::scripts::redlock).
        queued_capabilities(Duration::from_millis(50), self.max_ttl)
    }

    /// No holder identity on Redlock (`inspect` is unsupported): the claim's holder is not kept.
    async fn try_lock(&self, claim: &Claim<'_>, waiting: bool) -> Result<TryLock, LockError> {
        let (name, owner, ttl) = (claim.name, claim.owner, claim.ttl);
        if waiting {
            self.waiting_try(name, owner, ttl).await
        } else {
            self.single_try(name, owner, ttl).await
        }
    }

    /// Withdraws the wait's places (and any partial grant of it) on every master, handing a
    /// master whose head it was to the next waiter.
    async fn abandon(&self, name: &LockName, owner: OwnerId) -> Result<(), LockError> {
        self.withdraw(name, owner).await
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<RenewOutcome, LockError> {
        self.extend_round(name, owner, ttl, None).await
    }

    /// The renewal round with `RedlockClaim` on every master: it extends only the owner's lease,
    /// never grants, and makes each master keep `token` (the one a majority of pushes named); a
    /// majority must answer, else the lease is lost.
    async fn claim(
        &self,
        name: &LockName,
        owner: OwnerId,
        token: FencingToken,
        ttl: Duration,
    ) -> Result<RenewOutcome, LockError> {
        // The wait ended with the pushed grant: its ticket is done with.
        self.forget_ticket(owner);
        self.extend_round(name, owner, ttl, Some(token)).await
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<ReleaseOutcome, LockError> {
        self.release_round(name, owner, 0).await
    }

    /// The lease's token goes with the release: a master whose counter fell behind (its push
    /// was outvoted and the grant never claimed) leaves the next token above it, as the others.
    async fn release_held(
        &self,
        name: &LockName,
        owner: OwnerId,
        token: FencingToken,
    ) -> Result<ReleaseOutcome, LockError> {
        self.release_round(name, owner, token.0).await
    }

    async fn subscribe(&self, name: &LockName) -> Result<Option<WakeSubscription>, LockError> {
        self.notifier.subscribe(&Keys::new(&self.prefix, name).channel, None).await
    }

    /// A release or undo wakes the head of a master's queue only, on the head's client's own
    /// wake channel (`PUBLISH <wake channel> @<owner>`), so each waiter listens there for its
    /// own owner id; the first such message of any master wakes it. With blocking delivery the
    /// wait also arms a connection of its own on every master, and a release that grants it there
    /// pushes the grant instead (`super::blocking`).
    async fn subscribe_waiter(&self, name: &LockName, owner: OwnerId) -> Result<Option<WakeSubscription>, LockError> {
        let owner = owner.to_hex();
        let sub = self.notifier.subscribe_waiter(&owner).await?;
        Ok(match (sub, &self.delivery) {
            (Some(sub), Some(delivery)) => {
                let keys = Keys::new(&self.prefix, name);
                Some(delivery.arm(sub, &keys, &owner, self.notifier.wake_channel()))
            }
            (sub, _) => sub,
        })
    }
}
