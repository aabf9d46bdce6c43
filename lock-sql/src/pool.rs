//! A small connection pool for the network databases and SQLite files.
//!
//! sqlx's pool pings every connection when it is returned, in a background task: each lock
//! operation then costs two round trips, and the next operation, finding no idle connection
//! yet, opens a new one (several more round trips, each statement prepared again). On a slow
//! link that makes renewals miss their lease. On SQLite each ping is a trip through the
//! connection's worker thread instead: a free lock ran at 0.68× its floor through sqlx's pool,
//! 0.92–0.97× through this one (dialect/sqlite.rs). Lock statements are short and never leave a
//! transaction open, so this pool simply keeps connections that finished cleanly, hands them
//! out again at once, and drops any connection whose statement failed or was cancelled
//! mid-flight. Connections idle for a while are pinged before reuse, and closed after a minute.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::{AssertSqlSafe, ConnectOptions, Connection, Executor, SqlSafeStr};
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::{timeout, Instant};

/// Connections idle at least this long are pinged before use (a dead one is replaced).
const PING_IF_IDLE: Duration = Duration::from_secs(2);
/// Connections idle this long are closed instead of reused.
const CLOSE_IF_IDLE: Duration = Duration::from_secs(60);

/// A boxed future borrowing a pooled connection for `'c`.
pub(crate) type ConnFuture<'c, T> = Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'c>>;

/// Connections beyond `max` kept for renew and release.
pub(crate) const RESERVED: usize = 2;

/// What a statement is for, which decides the connections it may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Use {
    /// Acquire attempts and everything else: the `max` shared connections.
    Take,
    /// Renew and release of a lease held now: a shared connection when one is free, else one
    /// of [`RESERVED`] more. Waiters' acquires (a burst of them can occupy every shared
    /// connection, each blocked on a row lock) then never delay a lease past its validity.
    Keep,
}

/// Runs on every new connection (session settings).
pub(crate) type Setup<C> =
    Arc<dyn for<'c> Fn(&'c mut C) -> Pin<Box<dyn Future<Output = Result<(), sqlx::Error>> + Send + 'c>> + Send + Sync>;

/// Around every connection borrowed from the application's pool: `enter` puts on the session
/// settings the statements need and returns the application's values, which `leave` puts
/// back, so the application's session (its `search_path` above all) is left as it was.
pub(crate) struct Borrow<C> {
    pub(crate) enter: Enter<C>,
    pub(crate) leave: Leave<C>,
}

/// [`Borrow::enter`]: returns the application's values of what it set.
pub(crate) type Enter<C> = Arc<dyn for<'c> Fn(&'c mut C) -> ConnFuture<'c, Vec<String>> + Send + Sync>;

/// [`Borrow::leave`]: puts back what `enter` returned.
pub(crate) type Leave<C> = Arc<dyn for<'c> Fn(&'c mut C, Vec<String>) -> ConnFuture<'c, ()> + Send + Sync>;

pub(crate) struct ConnPool<C: Connection> {
    /// The application's own sqlx pool, when the backend was built from one: connections are
    /// then borrowed from it instead of kept here (see [`ConnPool::app`] for what that costs).
    app: Option<sqlx::Pool<C::Database>>,
    options: C::Options,
    idle: Mutex<Vec<(C, Instant)>>,
    permits: Semaphore,
    /// Connections only renew and release may use (see [`Use::Keep`]).
    reserved: Semaphore,
    connect_timeout: Duration,
    setup: Option<Setup<C>>,
    /// Application pools only: settings put on and taken off around each borrowed connection.
    borrow: Option<Borrow<C>>,
}

impl<C: Connection + 'static> ConnPool<C> {
    /// A pool of at most `max` connections; a background task closes connections idle for a
    /// minute, and ends with the pool.
    pub(crate) fn new(options: C::Options, max: u32, connect_timeout: Duration, setup: Option<Setup<C>>) -> Arc<Self> {
        let pool = Arc::new(ConnPool {
            app: None,
            options,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(max.max(1) as usize),
            reserved: Semaphore::new(RESERVED),
            connect_timeout,
            setup,
            borrow: None,
        });
        let weak = Arc::downgrade(&pool);
        // Without a Tokio runtime (sqlx needs one anyway) idle connections are pruned on use.
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return pool };
        rt.spawn(async move {
            loop {
                tokio::time::sleep(CLOSE_IF_IDLE / 2).await;
                let Some(pool) = weak.upgrade() else { return };
                pool.idle
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .retain(|(_, since)| since.elapsed() < CLOSE_IF_IDLE);
            }
        });
        pool
    }
}

impl<C: Connection> ConnPool<C>
where
    C::Database: sqlx::Database<Connection = C>,
{
    /// Borrows connections from the application's own sqlx pool. What that costs, per
    /// operation, against this crate's pool: sqlx's own checks (by default a ping before a
    /// connection idle for a while is handed out, `test_before_acquire`, and a check when it
    /// goes back), plus one round trip for `setup`, which runs on every borrowed connection
    /// because the pool cannot say which connections already ran it. No connections are kept
    /// for renew and release: size the pool for both.
    pub(crate) fn app(pool: sqlx::Pool<C::Database>, connect_timeout: Duration, setup: Option<Setup<C>>) -> Arc<Self> {
        ConnPool::lent(pool, connect_timeout, setup, None)
    }

    fn lent(
        pool: sqlx::Pool<C::Database>,
        connect_timeout: Duration,
        setup: Option<Setup<C>>,
        borrow: Option<Borrow<C>>,
    ) -> Arc<Self> {
        let options = (*pool.connect_options()).clone();
        Arc::new(ConnPool {
            app: Some(pool),
            options,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(1),
            reserved: Semaphore::new(RESERVED),
            connect_timeout,
            setup,
            borrow,
        })
    }

    /// [`ConnPool::app`] whose session settings are put on before each use and taken off after
    /// (one more round trip per operation than `setup`); a connection whose settings could not
    /// be put back, or whose use was cancelled half-way, is closed rather than returned.
    pub(crate) fn app_borrowing(
        pool: sqlx::Pool<C::Database>,
        connect_timeout: Duration,
        borrow: Borrow<C>,
    ) -> Arc<Self> {
        ConnPool::lent(pool, connect_timeout, None, Some(borrow))
    }

    /// A connection of its own, without the session setup (to read the session's defaults
    /// before the setup overrides them); [`ConnPool::keep`] gives it to the pool afterwards.
    pub(crate) async fn connect_bare(&self) -> Result<C, sqlx::Error> {
        match timeout(self.connect_timeout, self.options.connect()).await {
            Ok(r) => r,
            Err(_) => Err(sqlx::Error::PoolTimedOut),
        }
    }

    /// Runs the setup on `conn` and keeps it as idle (best effort: one whose setup fails is
    /// dropped).
    pub(crate) async fn keep(&self, mut conn: C) {
        if let Some(setup) = &self.setup {
            if !matches!(timeout(self.connect_timeout, setup(&mut conn)).await, Ok(Ok(()))) {
                return;
            }
        }
        self.put(conn);
    }

    /// [`ConnPool::with`] on a connection of the application's pool: one whose statement failed
    /// or was cancelled mid-flight is closed instead of going back.
    async fn with_app<A, T>(
        &self,
        app: &sqlx::Pool<C::Database>,
        arg: &A,
        op: impl for<'c> FnOnce(&'c mut C, &'c A) -> ConnFuture<'c, T>,
    ) -> Result<T, sqlx::Error>
    where
        A: Sync + ?Sized,
    {
        let mut conn = match timeout(self.connect_timeout, app.acquire()).await {
            Ok(r) => r?,
            Err(_) => return Err(sqlx::Error::PoolTimedOut),
        };
        if let Some(borrow) = &self.borrow {
            return borrowing(borrow, CloseUnlessDone(Some(conn)), arg, op).await;
        }
        // A connection dropped mid-statement (cancelled) goes back through sqlx's release
        // check, which drains or closes it; one whose statement broke is closed here.
        let result = match &self.setup {
            Some(setup) => match setup(&mut conn).await {
                Ok(()) => op(&mut conn, arg).await,
                Err(e) => Err(e),
            },
            None => op(&mut conn, arg).await,
        };
        if !matches!(result, Ok(_) | Err(sqlx::Error::Database(_))) {
            conn.close_on_drop();
        }
        result
    }

    /// Runs `op` on a pooled connection with `arg` (what the statement binds). The connection
    /// goes back to the pool only if `op` ended in an orderly way: success, or an error the
    /// server reported while the session stayed in sync. An `op` that opens a transaction must
    /// end it (commit or roll back) before it returns, whatever happened.
    pub(crate) async fn with<A, T>(
        &self,
        purpose: Use,
        arg: &A,
        op: impl for<'c> FnOnce(&'c mut C, &'c A) -> ConnFuture<'c, T>,
    ) -> Result<T, sqlx::Error>
    where
        A: Sync + ?Sized,
    {
        if let Some(app) = &self.app {
            return self.with_app(app, arg, op).await;
        }
        let mut guard = self.get(purpose).await?;
        let result = match guard.conn.as_mut() {
            Some(c) => op(c, arg).await,
            None => Err(sqlx::Error::PoolClosed),
        };
        guard.reuse = matches!(result, Ok(_) | Err(sqlx::Error::Database(_)));
        result
    }

    /// Opens a second connection and prepares `statements` on both (best effort: a failure
    /// resurfaces, with its real error, when the statement runs). Statements are prepared per
    /// connection, so later each costs one round trip, not two; and the spare connection serves
    /// a release while a renewal that the release cancelled takes the other one down with it.
    pub(crate) async fn prepare_on_two(&self, statements: &[Arc<str>])
    where
        for<'c> &'c mut C: Executor<'c, Database = C::Database>,
    {
        if self.app.is_some() {
            // Statements are prepared on the application's connections as they are used.
            return;
        }
        let (mut a, mut b) = (self.get(Use::Take).await, self.get(Use::Take).await);
        for guard in [&mut a, &mut b].into_iter().flatten() {
            let Some(c) = guard.conn.as_mut() else { continue };
            for sql in statements {
                if let Err(e) = (&mut *c).prepare(AssertSqlSafe(Arc::clone(sql)).into_sql_str()).await {
                    tracing::debug!(error = %e, "could not prepare a lock statement ahead");
                }
            }
            guard.reuse = true;
        }
    }

    /// An idle connection, or a new one; waits at most `connect_timeout` for either.
    async fn get(&self, purpose: Use) -> Result<PooledConn<'_, C>, sqlx::Error> {
        let wait = async {
            if purpose == Use::Take {
                return self.permits.acquire().await;
            }
            if let Ok(p) = self.permits.try_acquire() {
                return Ok(p);
            }
            tokio::select! {
                p = self.permits.acquire() => p,
                p = self.reserved.acquire() => p,
            }
        };
        let permit = match timeout(self.connect_timeout, wait).await {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => return Err(sqlx::Error::PoolClosed),
            Err(_) => return Err(sqlx::Error::PoolTimedOut),
        };
        while let Some((mut conn, since)) = self.pop() {
            let idle = since.elapsed();
            if idle >= CLOSE_IF_IDLE {
                continue;
            }
            if idle >= PING_IF_IDLE && !matches!(timeout(self.connect_timeout, conn.ping()).await, Ok(Ok(()))) {
                continue;
            }
            return Ok(PooledConn { conn: Some(conn), pool: self, reuse: false, _permit: permit });
        }
        let fresh = async {
            let mut conn = self.options.connect().await?;
            if let Some(setup) = &self.setup {
                setup(&mut conn).await?;
            }
            Ok::<_, sqlx::Error>(conn)
        };
        match timeout(self.connect_timeout, fresh).await {
            Ok(Ok(conn)) => Ok(PooledConn { conn: Some(conn), pool: self, reuse: false, _permit: permit }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(sqlx::Error::PoolTimedOut),
        }
    }

    /// How many connections are idle (tests: which pool a statement ran on).
    #[cfg(test)]
    pub(crate) fn idle_count(&self) -> usize {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn pop(&self) -> Option<(C, Instant)> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn put(&self, conn: C) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|(_, since)| since.elapsed() < CLOSE_IF_IDLE);
        idle.push((conn, Instant::now()));
    }
}

/// [`ConnPool::with_app`] with settings put on and taken off around `op`.
async fn borrowing<C, A, T>(
    borrow: &Borrow<C>,
    mut conn: CloseUnlessDone<C::Database>,
    arg: &A,
    op: impl for<'c> FnOnce(&'c mut C, &'c A) -> ConnFuture<'c, T>,
) -> Result<T, sqlx::Error>
where
    C: Connection,
    C::Database: sqlx::Database<Connection = C>,
    A: Sync + ?Sized,
{
    let Some(c) = conn.0.as_deref_mut() else { return Err(sqlx::Error::PoolClosed) };
    let saved = (borrow.enter)(c).await?;
    let result = op(c, arg).await;
    let restored = (borrow.leave)(c, saved).await;
    if restored.is_ok() && matches!(result, Ok(_) | Err(sqlx::Error::Database(_))) {
        // Back to the application as it lent it.
        drop(conn.0.take());
    }
    result
}

/// A borrowed connection that is closed, not returned, unless taken out: dropped half-way (a
/// cancelled operation), it may still carry our session settings.
struct CloseUnlessDone<DB: sqlx::Database>(Option<sqlx::pool::PoolConnection<DB>>);

impl<DB: sqlx::Database> Drop for CloseUnlessDone<DB> {
    fn drop(&mut self) {
        if let Some(conn) = self.0.as_mut() {
            conn.close_on_drop();
        }
    }
}

/// A connection on loan. Returned to the pool on drop only if marked reusable: a statement
/// that failed or was cancelled half-way may have left it mid-protocol.
struct PooledConn<'a, C: Connection> {
    conn: Option<C>,
    pool: &'a ConnPool<C>,
    reuse: bool,
    _permit: SemaphorePermit<'a>,
}

impl<C: Connection> Drop for PooledConn<'_, C> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.reuse {
                self.pool.put(conn);
            }
        }
    }
}
