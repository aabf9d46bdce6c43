//! etcd through the open backend table (feature `etcd`): chosen by URL like a bundled backend,
//! and every kind from one `Client`, against a local etcd. The `dlock` tool against etcd is
//! dlock-cli's `cli_etcd.rs`.

use std::time::Duration;

use dlock::{AcquireOptions, Client, LockName};
use dlock_testkit::servers::etcd::EtcdServer;

#[test]
fn etcd_is_chosen_by_url() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let server = runtime.block_on(EtcdServer::start()).expect("an etcd server for the test");
    let url = server.url_with_prefix("/dlock-facade");
    assert_eq!(dlock::Scheme::of(&url).expect("known scheme").driver().map(|d| d.name), Some("etcd"));
    let tls = url.replacen("etcd://", "etcds://", 1);
    assert_eq!(dlock::Scheme::of(&tls).expect("etcds is known").driver().map(|d| d.name), Some("etcd"));
    runtime.block_on(async {
        let client = Client::connect(&url).await.expect("connects");
        let name = LockName::new("facade/etcd").expect("valid");
        let opts = AcquireOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5));
        let first = client.lock().acquire(&name, &opts).await.expect("free");
        first.release().await.expect("released");
        let second = client.lock().acquire(&name, &opts).await.expect("free again");
        assert!(second.token() > first.token(), "tokens rise");
        second.release().await.expect("released");
        client
            .rw()
            .await
            .expect("rw")
            .acquire_write(&name, &opts)
            .await
            .expect("writer")
            .release()
            .await
            .expect("released");
        client
            .semaphore()
            .await
            .expect("semaphore")
            .acquire_permit(&name, 2, &opts)
            .await
            .expect("permit")
            .release()
            .await
            .expect("released");
    });
    drop(server);
}
