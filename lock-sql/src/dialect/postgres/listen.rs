//! PostgreSQL wake-ups: one LISTEN connection per client, fanned out to local waiters through a
//! [`WakeHub`]. Releases run `pg_notify(<table>, <key>)` in the same statement that frees the
//! row, so a notification is sent exactly when (and only if) the release commits. Election
//! observers of a name ([`WakeHub::observe`]) hear its `dlock:<name>` key. A grant in a
//! release (`dlock-grant:<owner>:<fence>`, handoff.rs) only wakes its waiter, if it is one
//! of ours, marked to claim first: `NOTIFY` needs no privilege, so a notification is a hint
//! whoever sent it, on whichever channel, and its fence is never read; the waiter's lease is
//! what the database answers to its claim.
//!
//! **A client with nobody waiting stops listening.** PostgreSQL (before 19) signals every
//! backend of the database that `LISTEN`s on any channel at each `NOTIFY`, and each then reads
//! the notification queue: about 9 µs of server work per listening connection per notification
//! on this machine (docs/benchmarks-log.md, 2026-12-06 17:00), paid by every hand-off on a busy
//! name. So a listener whose client has had no waiter, observer or expected grant for
//! [`IDLE_UNLISTEN`] runs `UNLISTEN *` and keeps its connection; the next subscription
//! ([`Listener::want`]) makes it `LISTEN` again, after which it wakes every waiter, as after a
//! reconnect (a waiter that subscribed meanwhile was told the hub could not vouch for the gap,
//! `WakeHub::set_live_since`, and a hint sent in between is lost: the wake-up makes it look).

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    backend::{Backoff, WakeHub},
    LockError,
};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout, Instant};

use super::handoff::{Handoffs, GRANT};
use crate::error::{to_lock_error, Codes};

/// How long the listener may hear nothing before it checks that its connection still answers:
/// a half-open TCP connection would otherwise swallow notifications forever.
const IDLE_PING: Duration = Duration::from_secs(15);

/// How long a listener keeps listening while its client has nobody waiting or observing
/// (module docs): long enough that a client taking turns on a busy name never stops between
/// two waits, short enough that idle clients soon cost the server nothing per notification.
pub(crate) const IDLE_UNLISTEN: Duration = Duration::from_secs(30);

/// The background listener; stopped when dropped (with the store that owns it).
pub(crate) struct Listener {
    task: JoinHandle<()>,
    /// Set at each subscription: a listener that stopped listening starts again.
    wanted: Arc<Notify>,
}

impl Listener {
    /// A waiter or observer subscribed: a listener that stopped listening (idle) starts again.
    pub(crate) fn want(&self) {
        self.wanted.notify_one();
    }
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
    /// How long the client may have nobody waiting before the listener stops listening
    /// ([`IDLE_UNLISTEN`]).
    pub(crate) idle: Duration,
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
    let wanted = Arc::new(Notify::new());
    let link = Link { hub, handoffs, wanted: Arc::clone(&wanted), channels, bounds };
    let since = Instant::now();
    link.live(Some(since));
    let task = rt.spawn(run(pool, link, listener, since));
    Ok(Listener { task, wanted })
}

/// What the listener's task serves: the hub and hand-offs it feeds, and how to listen again.
struct Link {
    hub: WakeHub,
    handoffs: Arc<Handoffs>,
    wanted: Arc<Notify>,
    channels: Vec<String>,
    bounds: Bounds,
}

impl Link {
    /// Nobody of this client waits, observes or expects a grant.
    fn unused(&self) -> bool {
        self.hub.is_empty() && self.handoffs.is_empty()
    }

    /// Every notification from `since` on is heard (`None`: not any more), for the hub's new
    /// subscriptions and the hand-offs' reused answers alike.
    fn live(&self, since: Option<Instant>) {
        self.hub.set_live_since(since);
        self.handoffs.set_listening(since);
    }

    /// Hints may have been lost: every waiter and observer looks again, and a wait whose
    /// attempt is still in flight finds a wake-up left for it when it waits.
    fn wake_everybody(&self) {
        self.hub.wake_all();
        self.hub.wake_each();
    }
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

async fn run(pool: PgPool, link: Link, mut listener: PgListener, mut since: Instant) {
    loop {
        let broken = match listening(&mut listener, &link).await {
            Ok(()) => match pause(&mut listener, &link, since).await {
                Ok(Some(relistened)) => {
                    since = relistened;
                    continue;
                }
                Ok(None) => continue,
                Err(e) => e,
            },
            Err(e) => e,
        };
        let (channels, hub) = (&link.channels, &link.hub);
        tracing::warn!(?channels, reason = %broken, "postgres listener lost its connection; reconnecting");
        drop(listener);
        link.live(None);
        // Waiters also wake on their own timers (never later than the holder's lease ends), so
        // a lost notification only costs latency.
        hub.wake_all();
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        listener = loop {
            tokio::time::sleep(backoff.next_delay()).await;
            match open(&pool, channels, link.bounds).await {
                Ok(l) => break l,
                Err(e) => tracing::debug!(?channels, error = %e, "postgres listener reconnect failed"),
            }
        };
        tracing::info!(?channels, "postgres listener reconnected");
        since = Instant::now();
        link.live(Some(since));
        // Releases sent while we were away are lost: let every waiter try again.
        link.wake_everybody();
    }
}

/// Serves notifications until the client has had nobody waiting for `link.bounds.idle`
/// (`Ok`), or the connection fails (`Err`, why).
async fn listening(listener: &mut PgListener, link: &Link) -> Result<(), String> {
    let (hub, handoffs, bounds) = (&link.hub, &link.handoffs, link.bounds);
    // One timer for both the idle check and the ping; a quarter of the shorter, so each
    // fires at most a quarter late.
    let tick = bounds.idle.min(IDLE_PING) / 4;
    let (mut heard, mut unused_since) = (Instant::now(), None::<Instant>);
    // Kept across notifications: a stream of other clients' notifications on the table's
    // channel must not keep putting the check off.
    let mut check = Instant::now() + tick;
    loop {
        // `try_recv` is cancel-safe (sqlx keeps partial messages buffered), so the timer
        // winning the race loses nothing.
        let received = tokio::select! {
            r = listener.try_recv() => r,
            () = sleep_until(check) => {
                let now = Instant::now();
                check = now + tick;
                if now >= heard + IDLE_PING {
                    ping(listener, bounds).await?;
                    heard = now;
                }
                match (link.unused(), unused_since) {
                    (false, _) => unused_since = None,
                    (true, None) => unused_since = Some(now),
                    (true, Some(t)) if now >= t + bounds.idle => return Ok(()),
                    (true, Some(_)) => {}
                }
                continue;
            }
        };
        heard = Instant::now();
        let n = match received {
            Ok(Some(n)) => n,
            Ok(None) => return Err("the connection was closed".to_owned()),
            Err(e) => return Err(e.to_string()),
        };
        // A grant to one of our waiters: the waiter is marked to claim before it wakes.
        // Wake-ups nobody waits for yet are kept: the waiter they are for may register just
        // after (the hub is live, `WakeHub::set_live_since`).
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
    }
}

/// Checks that a listener that heard nothing for a while still answers: a half-open TCP
/// connection would otherwise swallow notifications forever.
async fn ping(listener: &mut PgListener, bounds: Bounds) -> Result<(), String> {
    match timeout(bounds.query, sqlx::query("SELECT 1").execute(listener)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("a ping did not answer within {:?}", bounds.query)),
    }
}

/// The client is idle: stops listening until a subscription wants it again, then listens
/// again and wakes everybody (module docs). `Ok(None)`: somebody subscribed before the
/// listener stopped, it listens on (since `since`); `Ok(Some(t))`: listening again since `t`;
/// `Err`: the connection failed.
async fn pause(listener: &mut PgListener, link: &Link, since: Instant) -> Result<Option<Instant>, String> {
    let bounds = link.bounds;
    // From here a new subscription is told the hub cannot vouch for the gap; one that came
    // before this line is seen by the check below and keeps the listener listening.
    link.live(None);
    if !link.unused() {
        link.live(Some(since));
        return Ok(None);
    }
    match timeout(bounds.query, listener.unlisten_all()).await {
        Ok(Ok(())) => tracing::debug!(channels = ?link.channels, "nobody waits: postgres listener stopped listening"),
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err(format!("UNLISTEN did not answer within {:?}", bounds.query)),
    }
    // A permit left by an earlier subscription ends a wait at once: look again.
    while link.unused() {
        link.wanted.notified().await;
    }
    let channels = link.channels.iter().map(String::as_str);
    match timeout(bounds.connect + bounds.query, listener.listen_all(channels)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err(format!("LISTEN did not answer within {:?}", bounds.connect + bounds.query)),
    }
    let now = Instant::now();
    link.live(Some(now));
    // A hint sent while nobody listened is lost: every waiter looks again.
    link.wake_everybody();
    tracing::debug!(channels = ?link.channels, "postgres listener listens again");
    Ok(Some(now))
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use sqlx::{Connection, PgConnection};

    use super::*;
    use crate::dialect::Handoff;

    /// The statement the listener's session ran last, as the server reports it.
    async fn last_statement(c: &mut PgConnection, app: &str) -> Option<String> {
        sqlx::query_scalar("SELECT query FROM pg_stat_activity WHERE application_name = $1")
            .bind(app)
            .fetch_optional(c)
            .await
            .unwrap()
    }

    /// Polls until the listener's last statement starts with `prefix`; false after 5 s.
    async fn ran(c: &mut PgConnection, app: &str, prefix: &str) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if last_statement(c, app).await.is_some_and(|q| q.starts_with(prefix)) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// A client with nobody waiting stops listening after its idle time, so that the server
    /// no longer wakes its session at every notification; a subscription makes it listen
    /// again, tells the subscriber it could not vouch for the gap, and wakes it once listening;
    /// a notification sent after that reaches it; while a subscription or an expected grant
    /// lives, it keeps listening.
    #[tokio::test]
    async fn an_idle_listener_stops_listening_and_a_subscription_brings_it_back() {
        let url = std::env::var("DLOCK_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let tag = lock_core::OwnerId::random().to_hex();
        let app = format!("dlock-idle-{}", &tag[..12]);
        let channel = format!("dlock_idle_{}", &tag[..12]);
        let opts = PgConnectOptions::from_str(&url).unwrap().application_name(&app);
        let (hub, handoffs) = (WakeHub::new(), Arc::new(Handoffs::default()));
        let idle = Duration::from_millis(200);
        let bounds =
            Bounds { connect: Duration::from_secs(5), query: Duration::from_secs(5), codes: super::super::CODES, idle };
        let listener = start(opts, vec![channel.clone()], hub.clone(), Arc::clone(&handoffs), bounds).await.unwrap();
        let mut c = PgConnection::connect(&url).await.unwrap();
        assert!(ran(&mut c, &app, "LISTEN").await, "listening at first: {:?}", last_statement(&mut c, &app).await);

        // Notifications for nobody here, more often than the idle check runs, do not keep an
        // idle client listening.
        let chatter = {
            let (url, channel) = (url.clone(), channel.clone());
            tokio::spawn(async move {
                let mut n = PgConnection::connect(&url).await.unwrap();
                loop {
                    sqlx::query("SELECT pg_notify($1, 'dlock:nobody')").bind(&channel).execute(&mut n).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        };
        assert!(ran(&mut c, &app, "UNLISTEN").await, "idle: {:?}", last_statement(&mut c, &app).await);
        chatter.abort();
        let sub = hub.subscribe("dlock:k");
        listener.want();
        assert_eq!(sub.live_since(), None, "subscribed while nobody listened: the gap is not vouched for");
        assert!(ran(&mut c, &app, "LISTEN").await, "a subscription brings it back");
        timeout(Duration::from_secs(5), sub.woken()).await.expect("woken once listening again");
        assert!(hub.subscribe("dlock:other").live_since().is_some(), "live again");

        // Heard again: a notification from now on reaches the subscriber.
        sqlx::query("SELECT pg_notify($1, 'dlock:k')").bind(&channel).execute(&mut c).await.unwrap();
        timeout(Duration::from_secs(5), sub.woken()).await.expect("a notification after it listens again");

        // A live subscription keeps it listening well past its idle time.
        tokio::time::sleep(idle * 4).await;
        let last = last_statement(&mut c, &app).await.unwrap_or_default();
        assert!(last.starts_with("LISTEN"), "kept listening while subscribed: {last}");
        drop(sub);
        // So does a wait that expects a grant.
        handoffs.expect(&tag);
        tokio::time::sleep(idle * 4).await;
        let last = last_statement(&mut c, &app).await.unwrap_or_default();
        assert!(last.starts_with("LISTEN"), "kept listening while a grant is expected: {last}");
        handoffs.forget(&tag);
        assert!(ran(&mut c, &app, "UNLISTEN").await, "idle again: {:?}", last_statement(&mut c, &app).await);
    }
}
