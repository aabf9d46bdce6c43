//! `dlock::blocking` from plain threads, on every bundled backend: exclusion under contention
//! (an exact counter), `try_acquire_for` answering `None` on a held lock after about its wait,
//! the read-write lock and the semaphore where the backend has them, and a call from inside an
//! async runtime refused with a typed error instead of stalling a worker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dlock::blocking::Client;
use dlock::{AcquireOptions, LockError};

mod common;
use common::backends::{serve, Served};

/// The backend's servers, started on a runtime of their own (the blocking client has its own).
fn served(backend: &str) -> (tokio::runtime::Runtime, Served) {
    let rt = tokio::runtime::Runtime::new().expect("a runtime for the test servers");
    let served = rt.block_on(serve(backend, &format!("blocking_{backend}"), 3));
    (rt, served)
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    format!("{prefix}/{nanos:x}")
}

/// Runs `check` on the handle of a kind the backend may not have; a backend without it
/// (`Unsupported`) is said and passed over, any other error fails the test.
fn where_supported<H>(backend: &str, kind: &str, handle: Result<H, LockError>, check: impl FnOnce(H)) {
    match handle {
        Ok(handle) => check(handle),
        Err(LockError::Unsupported { .. }) => eprintln!("{backend}: no {kind} (Unsupported), not checked"),
        Err(e) => panic!("{backend}: {kind} handle: {e}"),
    }
}

fn exercise(backend: &str) {
    let (_rt, served) = served(backend);
    let client = Client::connect(&served.url).expect("connect");
    let opts = AcquireOptions::new(Duration::from_secs(10));
    let handle = client.handle(&unique("blocking")).expect("handle").with_options(opts.clone());

    // Three threads, five read-sleep-writes each: exact only if nobody overlapped.
    let counter = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for _ in 0..5 {
                    handle
                        .run_locked(|| {
                            let seen = counter.load(Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(2));
                            counter.store(seen + 1, Ordering::SeqCst);
                        })
                        .expect("run_locked");
                }
            });
        }
    });
    assert_eq!(counter.load(Ordering::SeqCst), 15, "{backend}: two holders at once");

    let lease = handle.acquire().expect("acquire");
    let other = handle.clone();
    let began = Instant::now();
    let got = std::thread::spawn(move || other.try_acquire_for(Duration::from_millis(300)).map(|l| l.is_some()))
        .join()
        .expect("thread");
    let took = began.elapsed();
    assert!(!got.expect("try_acquire_for"), "{backend}: try_acquire_for got a held lock");
    assert!(took >= Duration::from_millis(295) && took < Duration::from_secs(5), "{backend}: gave up after {took:?}");
    let token = lease.token();
    lease.release().expect("release");
    let next = handle.try_acquire_for(Duration::from_secs(5)).expect("try_acquire_for").expect("free lock");
    assert!(next.token() > token, "{backend}: token did not rise");
    drop(next); // released on drop, waited for
    assert!(handle.try_acquire().expect("try_acquire").is_some(), "{backend}: a dropped lease kept the lock");

    where_supported(backend, "read-write lock", client.rw_handle(&unique("blocking-rw")), |rw| {
        let rw = rw.with_options(opts.clone());
        let reader = rw.read().expect("read");
        let writer = rw.try_write_for(Duration::from_millis(200)).expect("try_write_for");
        assert!(writer.is_none(), "{backend}: writer beside a reader");
        reader.release().expect("release reader");
        assert_eq!(rw.run_write_locked(|| 5).expect("run_write_locked"), 5);
    });
    where_supported(backend, "semaphore", client.semaphore_handle(&unique("blocking-sem"), 1), |sem| {
        let sem = sem.with_options(opts);
        let permit = sem.acquire().expect("permit");
        let second = sem.try_acquire_for(Duration::from_millis(200)).expect("try_acquire_for");
        assert!(second.is_none(), "{backend}: a second permit of 1");
        permit.release().expect("release permit");
        assert_eq!(sem.run_locked(|| 6).expect("run_locked"), 6);
    });
}

#[test]
fn blocking_sqlite() {
    exercise("sqlite");
}

#[test]
fn blocking_postgres() {
    exercise("postgres");
}

#[test]
fn blocking_mysql() {
    exercise("mysql");
}

#[test]
fn blocking_redis() {
    exercise("redis");
}

#[test]
fn blocking_redlock() {
    exercise("redlock");
}

#[test]
fn blocking_zookeeper() {
    exercise("zookeeper");
}

#[cfg(feature = "etcd")]
#[test]
fn blocking_etcd() {
    exercise("etcd");
}

/// Inside an async runtime every blocking call is refused with a typed error (it would stall a
/// worker thread), never a panic or a hang.
#[tokio::test]
async fn refused_inside_an_async_runtime() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("b.db").display());
    match Client::connect(&url) {
        Err(LockError::InvalidOptions { reason }) => assert!(reason.contains("async"), "{reason}"),
        Err(e) => panic!("expected InvalidOptions, got {e}"),
        Ok(_) => panic!("a blocking connect inside a runtime was not refused"),
    }
}
