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
        let mut fields = Fields(attrs.metadata().name().to_owned());
        attrs.record(&mut fields);
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(fields.0);
    }

    /// Events are recorded as `event:<target> <level> field=value…`.
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut fields = Fields(format!("event:{} {}", meta.target(), meta.level()));
        event.record(&mut fields);
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(fields.0);
    }
}

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={:?}", field.name(), value));
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
    force_release_is_audited(&*lock, &name, spans).await;
}

/// An operator's `force_release` of a live holder leaves one WARN on `dlock::audit` naming the
/// lock, the evicted token and the holder id; freeing a free lock says nobody held it.
async fn force_release_is_audited(lock: &dyn dlock::DistributedLock, name: &LockName, spans: &Spans) {
    let name = &LockName::new(format!("{name}-audit")).expect("valid");
    let opts = AcquireOptions::new(Duration::from_secs(10)).holder(dlock::Holder::new("audited-worker").expect("id"));
    let lease = lock.try_acquire(name, &opts).await.expect("answered").expect("free");
    let token = lease.token().get();
    assert_eq!(lock.force_release(name).await.expect("forced").map(|t| t.get()), Some(token));
    assert_eq!(lock.force_release(name).await.expect("forced again"), None);
    drop(lease);
    let audit = spans.named("event:dlock::audit");
    let evicted: Vec<_> = audit.iter().filter(|e| e.contains("holder=\"audited-worker\"")).collect();
    assert_eq!(evicted.len(), 1, "one audit line for the eviction: {audit:#?}");
    let line = evicted[0];
    assert!(line.contains(" WARN ") || line.contains("WARN"), "{line}");
    assert!(line.contains(&format!("token={token}")) && line.contains(name.as_str()), "{line}");
    assert!(audit.iter().any(|e| e.contains("nobody held it")), "the second call says nobody held: {audit:#?}");
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
