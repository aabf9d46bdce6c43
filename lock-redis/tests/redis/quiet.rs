//! A key prefix never used on a server looks like a server that lost its state: its first lock
//! waits the quiet period. That wait is never silent: the first refused attempt logs a warning
//! that names the prefix, the time left and how to mark a new deployment fresh (once per
//! prefix), and a wait that ends in it is a `Timeout` saying so — both within 100 ms here.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::{AcquireOptions, DistributedLock, LockError, LockName};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_new_prefix_says_why_its_first_lock_waits() {
    let logs = Captured::default();
    let sink = logs.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || sink.clone()).with_ansi(false).finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let fx = crate::common::RedisFixture::start().await.unwrap();
    let prefix = format!("{}-new", fx.options.key_prefix);
    let options = lock_redis::RedisOptions {
        key_prefix: prefix.clone(),
        restart_quiet_period: Some(Duration::from_secs(5)),
        ..crate::common::test_options()
    };
    let c = lock_redis::connect(fx.server.url(), options).await.unwrap();
    let name = LockName::new("first").unwrap();
    let began = Instant::now();
    let r = c.acquire(&name, &AcquireOptions::new(Duration::from_secs(2)).wait(Duration::from_millis(50))).await;
    let took = began.elapsed();
    match r {
        Err(LockError::Timeout { quiet_left: Some(left), .. }) => {
            assert!(left > Duration::from_secs(4) && left <= Duration::from_secs(5), "quiet left {left:?}")
        }
        other => panic!("expected a Timeout naming the quiet period, got {other:?}"),
    }
    let message = LockError::Timeout { name: "x".into(), waited: took, quiet_left: Some(Duration::from_secs(1)) };
    assert!(message.to_string().contains("mark a new deployment fresh"), "{message}");
    assert!(took < Duration::from_millis(100) + Duration::from_millis(50), "the Timeout came after {took:?}");
    let said = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        said.contains("WARN") && said.contains(&prefix) && said.contains(&format!("SET {prefix}:boot 0")),
        "logs: {said}"
    );
    // Said once per prefix, not at every attempt.
    let _ = c.try_acquire(&name, &AcquireOptions::new(Duration::from_secs(2))).await.unwrap();
    let again = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert_eq!(again.matches("restart quiet period").count(), 1, "logs: {again}");
}

/// The read-write lock and the semaphore say it the same way: a `Timeout` naming the quiet
/// period at the end of a 50 ms wait, not after the 5 s period (they refused in silence
/// before). The bound allows for the client's first connection on a loaded machine (150 ms was
/// exceeded once in a full run).
#[tokio::test]
async fn a_new_prefix_says_why_its_first_read_write_and_permit_wait() {
    use lock_core::{DistributedRwLock, DistributedSemaphore};
    let fx = crate::common::RedisFixture::start().await.unwrap();
    let options = |suffix: &str| lock_redis::RedisOptions {
        key_prefix: format!("{}-{suffix}", fx.options.key_prefix),
        restart_quiet_period: Some(Duration::from_secs(5)),
        ..crate::common::test_options()
    };
    let opts = AcquireOptions::new(Duration::from_secs(2)).wait(Duration::from_millis(50));
    let name = LockName::new("first").unwrap();
    let said = |what: &str, r: Result<lock_core::Lease, LockError>, took: Duration| {
        match r {
            Err(LockError::Timeout { quiet_left: Some(left), .. }) => {
                assert!(left > Duration::from_secs(4) && left <= Duration::from_secs(5), "{what}: quiet left {left:?}")
            }
            other => panic!("{what}: expected a Timeout naming the quiet period, got {other:?}"),
        }
        assert!(took < Duration::from_millis(600), "{what}: the Timeout came after {took:?}");
    };
    let rw = lock_redis::connect_rw(fx.server.url(), options("rw")).await.unwrap();
    let began = Instant::now();
    said("read", rw.acquire_read(&name, &opts).await, began.elapsed());
    let began = Instant::now();
    said("write", rw.acquire_write(&name, &opts).await, began.elapsed());
    let sem = lock_redis::connect_semaphore(fx.server.url(), options("sem")).await.unwrap();
    let began = Instant::now();
    said("permit", sem.acquire_permit(&name, 2, &opts).await, began.elapsed());
}
