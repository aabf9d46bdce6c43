//! The shared conformance suite against a fresh local ZooKeeper per test (or
//! `DLOCK_TEST_ZK_URL`); ZooKeeper-specific cases live in `zk_specific.rs`.

mod common;

lock_conformance::conformance_tests!(zookeeper, || async { common::ZkFixture::start().await }, strict);
lock_conformance::waiter_child_test!(common::connect_child);
