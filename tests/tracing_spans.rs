//! Tracing spans on acquire, renew, release and loss, on a backend built on `StoreLock`
//! (SQLite), on the in-memory backend, and on ZooKeeper (its own acquire path), captured by a
//! subscriber layer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock::{AcquireOptions, Config, LockName};
use dlock_testkit::servers::zookeeper::ZkServer;
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Records the name and fields of every span opened.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={:?}", field.name(), value));
            }
        }
        let mut fields = Fields(attrs.metadata().name().to_owned());
        attrs.record(&mut fields);
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(fields.0);
    }
}

impl Spans {
    fn named(&self, name: &str) -> Vec<String> {
        let all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().filter(|s| s.split(' ').next() == Some(name)).cloned().collect()
    }
}

/// Acquires, renews, releases, then acquires again and has the lease declared lost; checks a
/// span of each, naming the lock.
async fn lifecycle(url: &str, spans: &Spans) {
    let lock = dlock::connect_with(&Config::from_url(url)).await.expect("connect");
    let name = LockName::new(format!("tracing-{}", std::process::id())).expect("valid");
    let opts = AcquireOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(5)).auto_renew(false);
    let lease = lock.acquire(&name, &opts).await.expect("granted");
    lease.renew().await.expect("renewed");
    lease.release().await.expect("released");
    let lease = lock.try_acquire(&name, &opts).await.expect("answered").expect("free");
    lease.loss_trigger().fire("the test declared it lost");
    drop(lease);
    for span in ["dlock.acquire", "dlock.try_acquire", "dlock.renew", "dlock.release", "dlock.lost"] {
        let found = spans.named(span);
        assert!(
            found.iter().any(|s| s.contains(name.as_str())),
            "{url}: no {span} span naming the lock; spans: {:#?}",
            spans.0.lock().unwrap_or_else(|e| e.into_inner())
        );
    }
    let acquire = &spans.named("dlock.acquire")[0];
    assert!(acquire.contains(&format!("backend={:?}", lock.backend())), "{acquire}");
}

/// Runs `lifecycle` with the recording layer as the default subscriber of this thread; the
/// test runtime is current-thread, so every task of it runs here.
async fn traced(url: String) {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    lifecycle(&url, &spans).await;
}

#[tokio::test]
async fn memory_backend() {
    traced("memory://tracing".into()).await;
}

#[tokio::test]
async fn store_lock_backend_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    traced(format!("sqlite://{}", dir.path().join("tracing.db").display())).await;
}

#[tokio::test]
async fn zookeeper_backend() {
    let server = ZkServer::start().await.expect("a ZooKeeper server for the test");
    traced(server.url_with_root("/dlock-tracing")).await;
}
