//! The SQLite dialect's own tests, on a file in a temporary directory.

use super::*;
use crate::dialect::Who;
use crate::queue::Wait;

/// `PRAGMA synchronous` of the connection `pool` hands out next (2: FULL, 1: NORMAL).
async fn synchronous(pool: &ConnPool<SqliteConnection>) -> i64 {
    pool.with(Use::Keep, &(), |c, _| Box::pin(sqlx::query_scalar("PRAGMA synchronous").fetch_one(c))).await.unwrap()
}

/// On a file, a grant commits with `synchronous = FULL` (its fsync makes every release
/// before it durable) and the exclusive lock's release with `NORMAL`, on connections of its
/// own (lock-sql docs, "Durable commits").
#[tokio::test]
async fn a_release_commits_without_its_own_fsync_a_grant_with_one() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    let lite = open(&url, &SqlOptions::default()).await.unwrap();
    lite.execute(&lite.profile.lease_ddl).await.unwrap();
    lite.execute(&lite.profile.queue_ddl).await.unwrap();
    let grant = Grant { name: "n", owner: "a", ttl_ms: 10_000, who: Who::default(), wait: Wait::No };
    assert!(matches!(lite.acquire(grant).await.unwrap(), Upsert::Granted(_)));
    assert_eq!(lite.releases.idle_count(), 0, "no release yet");
    assert!(lite.release("n", "a").await.unwrap());
    assert_eq!(lite.releases.idle_count(), 1, "the release ran on the releases' pool");
    assert_eq!(synchronous(&lite.releases).await, 1, "a release: NORMAL");
    assert_eq!(synchronous(&lite.pool).await, 2, "a grant: FULL");
}
