//! The conformance suite on PostgreSQL through the bring-your-own constructor: every client is
//! a `SqlBackend` over an application's own sqlx `PgPool` (`SqlBackend::from_pg_pool`).

mod common;

use std::sync::Arc;

use common::SqlFixture;
use lock_conformance::LinkedClient;
use lock_core::LockError;
use lock_sql::SqlBackend;
use sqlx::postgres::PgPoolOptions;

/// The shared-server fixture, with every client built from a pool of the "application".
pub struct PgPoolFixture(SqlFixture);

impl PgPoolFixture {
    async fn start() -> Result<PgPoolFixture, LockError> {
        Ok(PgPoolFixture(SqlFixture::postgres().await?))
    }

    /// A new application pool and a backend over it, set up as the `SqlBackend` docs advise:
    /// sized for the suite's waiters plus their renewals (a backend over an application pool
    /// keeps none apart), with connections kept open (sqlx pings each connection as it goes
    /// back, so the next operation needs another idle one or opens a new connection), and
    /// without sqlx's ping before every hand-out: over a slow link those round trips make
    /// renewals miss their lease (`fault_latency` fails without the last two).
    async fn backend_at(&self, url: &str) -> Result<SqlBackend, LockError> {
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .min_connections(4)
            .test_before_acquire(false)
            .acquire_timeout(std::time::Duration::from_secs(2))
            .connect_lazy(url)
            .map_err(|e| LockError::config(format!("bad test URL: {e}")))?;
        SqlBackend::from_pg_pool(pool, self.0.options()).await
    }

    async fn backend(&self) -> Result<SqlBackend, LockError> {
        self.backend_at(self.0.url()).await
    }
}

lock_conformance::impl_fixture! {
    PgPoolFixture, backend: "postgres", |f| {
        kinds_of: f.backend().await?,
        faults_of: f.0,
    }

    async fn linked_client(&self) -> Result<Option<LinkedClient>, LockError> {
        let Some((url, proxy)) = self.0.linked_url().await? else { return Ok(None) };
        Ok(Some(LinkedClient { client: Arc::new(self.backend_at(&url).await?.lock()), link: proxy }))
    }

    fn provenance(&self) -> String {
        format!("{} (through an application's sqlx PgPool)", self.0.provenance())
    }

    /// Measured here: through the application's pool every statement pays extra round trips
    /// (the per-use session settings, sqlx's connection checks), so under these cases' added
    /// link latency a renewal takes longer than the lease has left. The documented cost of
    /// `SqlBackend::from_pg_pool`; dlock's own pool (lock-sql/src/pool.rs) passes the case.
    fn not_applicable(&self, case: &str) -> Option<String> {
        ["fault_latency", "slow_grant_renewed_in_time"].contains(&case).then(|| {
            "through an application's sqlx pool each statement costs extra round trips (session settings, \
             sqlx's connection checks); on a link this slow a renewal outlasts the lease: use dlock's own pool \
             on slow links (SqlBackend::from_pg_pool docs)"
                .to_owned()
        })
    }
}

lock_conformance::conformance_tests!(postgres_byo, || async { crate::PgPoolFixture::start().await });
