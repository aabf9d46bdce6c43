//! Read-write locks and semaphores through the facade: the config URL picks the backend, and
//! the same code runs on every backend that declares the kind.

use std::time::Duration;

use dlock::{AcquireOptions, Config, LockName};
use dlock_testkit::servers::redis::RedisServer;
use dlock_testkit::servers::zookeeper::ZkServer;

mod common;
use common::{mysql_url, postgres_url};

async fn exercise(url: &str) {
    let config = Config::from_url(url);
    let rw = dlock::connect_rw_with(&config).await.expect("rw client");
    let other = dlock::connect_rw_with(&config).await.expect("rw client");
    let name = LockName::new(format!("kinds/{}", std::process::id())).expect("valid");
    let opts = AcquireOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5));
    let r1 = rw.acquire_read(&name, &opts).await.expect("reader 1");
    let r2 = other.acquire_read(&name, &opts).await.expect("reader 2 shares");
    assert!(other.try_acquire_write(&name, &opts).await.expect("ok").is_none(), "{url}: writer beside readers");
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    let w = other.acquire_write(&name, &opts).await.expect("writer");
    assert!(w.token() > r2.token(), "{url}: writer token must exceed the readers'");
    assert!(rw.try_acquire_read(&name, &opts).await.expect("ok").is_none(), "{url}: reader beside writer");
    w.release().await.expect("release");

    let sem = dlock::connect_semaphore_with(&config).await.expect("semaphore client");
    let a = sem.acquire_permit(&name, 2, &opts).await.expect("permit 1");
    let b = sem.acquire_permit(&name, 2, &opts).await.expect("permit 2");
    assert!(sem.try_acquire_permit(&name, 2, &opts).await.expect("ok").is_none(), "{url}: a third permit of 2");
    a.release().await.expect("release");
    b.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory() {
    exercise("memory://lock-kinds").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis() {
    let server = RedisServer::start().await.expect("a Redis server");
    exercise(server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper() {
    let server = ZkServer::start().await.expect("a ZooKeeper server");
    exercise(&server.url_with_root("/dlock-kinds")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    exercise(&format!("sqlite://{}", dir.path().join("kinds.db").display())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    exercise(&postgres_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    exercise(&mysql_url()).await;
}

#[tokio::test]
async fn redlock_says_unsupported() {
    let url = "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3";
    let e = dlock::connect_rw_with(&Config::from_url(url)).await.err().expect("unsupported");
    assert!(matches!(e, dlock::LockError::Unsupported { .. }), "{url}: {e}");
    let e = dlock::connect_semaphore_with(&Config::from_url(url)).await.err().expect("unsupported");
    assert!(matches!(e, dlock::LockError::Unsupported { .. }), "{url}: {e}");
}
