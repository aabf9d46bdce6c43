//! PostgreSQL wake-ups: one LISTEN connection per client, fanned out to local waiters through a
//! [`WakeHub`]. Releases run `pg_notify(<table>, <key>)` in the same statement that frees the
//! row, so a notification is sent exactly when (and only if) the release commits. Election
//! observers of a name ([`WakeHub::observe`]) hear its `dlock:<name>` key. A grant in a
//! release (`dlock-grant:<owner>:<fence>`, handoff.rs) only wakes its waiter, if it is one
//! of ours, marked to claim first: `NOTIFY` needs no privilege, so a notification is a hint
//! whoever sent it, on whichever channel, and its fence is never read; the waiter's lease is
//! what the database answers to its claim.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    backend::{Backoff, WakeHub},
    LockError,
};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

use super::handoff::{Handoffs, GRANT};
use crate::error::{to_lock_error, Codes};

/// How long the listener may hear nothing before it checks that its connection still answers:
/// a half-open TCP connection would otherwise swallow notifications forever.
const IDLE_PING: Duration = Duration::from_secs(15);

/// The background listener; stopped when dropped (with the store that owns it).
pub(crate) struct Listener {
    task: JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Timeouts of the listener's own connection.
#[derive(Clone, Copy)]
pub(crate) struct Bounds {
    pub(crate) connect: Duration,
    pub(crate) query: Duration,
    /// PostgreSQL's error codes, for the errors of the first LISTEN.
    pub(crate) codes: Codes,
}

/// Opens the LISTEN connection now (so `connect` fails loudly when it cannot) and keeps it open
/// in a background task, reconnecting with back-off.
pub(crate) async fn start(
    options: PgConnectOptions,
    channels: Vec<String>,
    hub: WakeHub,
    handoffs: Arc<Handoffs>,
    bounds: Bounds,
) -> Result<Listener, LockError> {
    // A pool of one just for the listener: its connection is held for good, and must not
    // starve the statements of the main pool.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(bounds.connect)
        .max_lifetime(None)
        .idle_timeout(None)
        .after_connect(|c, _| super::pin::listener_session(c))
        .connect_lazy_with(options);
    let rt = tokio::runtime::Handle::try_current()
        .map_err(|_| LockError::config("lock-sql needs a Tokio runtime: connect from within one"))?;
    let listener = open(&pool, &channels, bounds).await?;
    hub.set_live_since(Some(Instant::now()));
    let task = rt.spawn(run(pool, channels, hub, handoffs, listener, bounds));
    Ok(Listener { task })
}

async fn open(pool: &PgPool, channels: &[String], bounds: Bounds) -> Result<PgListener, LockError> {
    let work = async {
        let mut l = PgListener::connect_with(pool).await?;
        // We reconnect ourselves, so that we know when to wake everybody.
        l.eager_reconnect(false);
        l.listen_all(channels.iter().map(String::as_str)).await?;
        Ok::<_, sqlx::Error>(l)
    };
    match timeout(bounds.connect + bounds.query, work).await {
        Ok(Ok(l)) => Ok(l),
        Ok(Err(e)) => Err(to_lock_error(bounds.codes, "LISTEN for release notifications", e)),
        Err(_) => Err(LockError::unavailable(
            bounds.codes.label,
            format!("LISTEN for release notifications did not answer within {:?}", bounds.connect + bounds.query),
        )),
    }
}

async fn run(
    pool: PgPool,
    channels: Vec<String>,
    hub: WakeHub,
    handoffs: Arc<Handoffs>,
    mut listener: PgListener,
    bounds: Bounds,
) {
    loop {
        // `try_recv` is cancel-safe (sqlx keeps partial messages buffered), so a timeout here
        // loses nothing.
        let broken = match timeout(IDLE_PING, listener.try_recv()).await {
            Ok(Ok(Some(n))) => {
                // A grant to one of our waiters: the waiter is marked to claim before it wakes.
                // Wake-ups nobody waits for yet are kept: the waiter they are for may register
                // just after (the hub is live, `WakeHub::set_live_since`).
                if let Some(waiter) = handoffs.heard(n.payload()) {
                    tracing::trace!(%waiter, "grant heard");
                    hub.wake_or_keep(&waiter);
                    continue;
                }
                // Another client's grant: nobody here waits for it, nor observes it.
                if n.payload().starts_with(GRANT) {
                    continue;
                }
                // The observers of a name (`dlock:<name>`) are woken apart from its waiters.
                hub.changed(n.payload());
                hub.wake_or_keep(n.payload());
                continue;
            }
            Ok(Ok(None)) => "the connection was closed".to_owned(),
            Ok(Err(e)) => e.to_string(),
            Err(_) => match timeout(bounds.query, sqlx::query("SELECT 1").execute(&mut listener)).await {
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("a ping did not answer within {:?}", bounds.query),
            },
        };
        tracing::warn!(?channels, reason = %broken, "postgres listener lost its connection; reconnecting");
        drop(listener);
        hub.set_live_since(None);
        // Waiters also wake on their own timers (never later than the holder's lease ends), so
        // a lost notification only costs latency.
        hub.wake_all();
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        listener = loop {
            tokio::time::sleep(backoff.next_delay()).await;
            match open(&pool, &channels, bounds).await {
                Ok(l) => break l,
                Err(e) => tracing::debug!(?channels, error = %e, "postgres listener reconnect failed"),
            }
        };
        tracing::info!(?channels, "postgres listener reconnected");
        hub.set_live_since(Some(Instant::now()));
        // Releases sent while we were away are lost: let every waiter try again.
        hub.wake_all();
    }
}
