//! MySQL's exclusive acquire: the upsert that evaluates its condition (queue check included)
//! once, in its first assignment, and the waiter queue's statements, which MySQL runs apart from the
//! upsert (it has no data-modifying CTEs; see queue.rs).

use std::sync::Arc;

use sqlx::mysql::{MySql, MySqlArguments};
use sqlx::query::QueryAs;
use sqlx::AssertSqlSafe;

use super::sql::Shape;
use super::{Args, Mysql, Row};
use crate::dialect::Who;
use crate::pool::Use;
use crate::queue::Wait;

/// The count of the waiters ahead (see `sql::ahead`): name, owner, place, owner.
fn bind_ahead<'q>(
    q: QueryAs<'q, MySql, Row, MySqlArguments>,
    name: &'q [u8],
    owner: &'q [u8],
    place: i64,
) -> QueryAs<'q, MySql, Row, MySqlArguments> {
    q.bind(name).bind(owner).bind(place).bind(owner)
}

impl Mysql {
    /// The acquire upsert with the queue check of `shape`; the row as it is afterwards
    /// (returned, or read back), with the waiters ahead counted when a refusal will not refresh
    /// the caller's entry (which counts them).
    pub(super) async fn upsert(
        &self,
        shape: Shape,
        name: &str,
        owner: &str,
        ttl_ms: i64,
        who: Who<'_>,
        wait: Wait,
    ) -> Result<Vec<Row>, sqlx::Error> {
        let args =
            (Args { dialect: self, name: name.as_bytes(), owner: owner.as_bytes(), ms: ttl_ms, who }, wait, shape);
        self.pool
            .with(Use::Take, &args, |c, (a, wait, shape)| {
                Box::pin(async move {
                    let (d, o, n, p) = (a.dialect, a.owner, a.name, wait.place());
                    // A queued waiter between two writes of its entry learns its place here.
                    let count = *shape == Shape::Queue && wait.queued() && !wait.refresh();
                    let (h, m) = (a.who.holder.map(str::as_bytes), a.who.metadata.map(str::as_bytes));
                    // A refusal raises the queue's summary to cover the entry written next.
                    let bump = if wait.refresh() { wait.lifetime_ms() } else { 0 };
                    let sql = match shape {
                        Shape::Light => &d.acquire,
                        Shape::Queue if count && d.returning => &d.acquire_counting,
                        Shape::Queue => &d.acquire_queued,
                    };
                    // VALUES, the condition, then each assignment's new value.
                    let mut upsert = sqlx::query_as::<_, Row>(AssertSqlSafe(Arc::clone(sql)))
                        .bind(n)
                        .bind(o)
                        .bind(a.ms)
                        .bind(h)
                        .bind(m);
                    // The condition (see `sql::upsert`): the caller as owner, then the queue check,
                    // bound as the count of the waiters ahead is.
                    upsert = match shape {
                        Shape::Light => upsert.bind(o),
                        Shape::Queue => bind_ahead(upsert.bind(o), n, o, p),
                    };
                    upsert = upsert.bind(o).bind(o).bind(a.ms).bind(h).bind(m).bind(bump).bind(bump);
                    if d.returning {
                        if count {
                            upsert = bind_ahead(upsert, n, o, p);
                        }
                        return upsert.fetch_all(&mut *c).await;
                    }
                    // sqlx sets CLIENT_FOUND_ROWS: rows_affected cannot tell a grant from a
                    // refusal. Read the row back; only our own attempt can make us the owner.
                    upsert.fetch_all(&mut *c).await?;
                    let read = if count { &d.read_back_counting } else { &d.read_back };
                    let mut read = sqlx::query_as::<_, Row>(AssertSqlSafe(Arc::clone(read)));
                    if count {
                        read = bind_ahead(read, n, o, p);
                    }
                    read.bind(n).fetch_all(&mut *c).await
                })
            })
            .await
    }

    /// Queues a refused waiting attempt (or refreshes its entry), to end no later than
    /// `queued_until` (as the attempt returned it: `sql::enqueue`); its place and the live
    /// waiters ahead of it. `None` for `try_acquire`, which never queues.
    pub(super) async fn enqueue(
        &self,
        name: &str,
        owner: &str,
        wait: Wait,
        queued_until: i64,
    ) -> Result<Option<(i64, i64)>, sqlx::Error> {
        let lifetime = wait.lifetime_ms();
        if lifetime == 0 {
            return Ok(None);
        }
        let args = (self, name.as_bytes(), owner.as_bytes(), lifetime, queued_until);
        self.pool
            .with(Use::Take, &args, |c, (d, name, owner, lifetime, until)| {
                Box::pin(async move {
                    let q = sqlx::query_as::<_, (i64, i64)>(AssertSqlSafe(d.enqueue.clone()))
                        .bind(*name)
                        .bind(*owner)
                        .bind(*lifetime)
                        .bind(*until)
                        .bind(*lifetime)
                        .bind(*until);
                    if d.returning {
                        return q.fetch_optional(&mut *c).await;
                    }
                    q.fetch_optional(&mut *c).await?;
                    sqlx::query_as::<_, (i64, i64)>(AssertSqlSafe(d.place.clone()))
                        .bind(*name)
                        .bind(*owner)
                        .fetch_optional(&mut *c)
                        .await
                })
            })
            .await
    }
}
