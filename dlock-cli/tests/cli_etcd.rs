//! The `dlock` tool against etcd (feature `etcd`), a backend of the open table: `conformance`
//! (the whole suite, with the tool's own fixture), `run` and `status` against a local etcd.

use std::process::ExitCode;

use dlock_testkit::servers::etcd::EtcdServer;

#[test]
fn etcd_is_certified_by_the_tool() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let server = runtime.block_on(EtcdServer::start()).expect("an etcd server for the test");
    let url = server.url_with_prefix("/dlock-cli");
    let tool = |args: &[&str]| dlock_cli::main_from(std::iter::once("dlock").chain(args.iter().copied()));
    assert_eq!(tool(&["conformance", "--url", &url]), ExitCode::SUCCESS, "dlock conformance against etcd");
    assert_eq!(tool(&["run", "--url", &url, "--name", "job", "--", "true"]), ExitCode::SUCCESS);
    assert_eq!(tool(&["status", "--url", &url, "job"]), ExitCode::SUCCESS);
    drop(server);
}
