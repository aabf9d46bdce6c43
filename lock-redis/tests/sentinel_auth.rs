//! Which credentials reach a Sentinel: a fake Sentinel (a small RESP responder that records
//! every command) names a real, password-protected data node. The client logs in to the
//! Sentinel with `sentinel_username`/`sentinel_password` only; the data password goes to the
//! data node alone.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock_testkit::process::{find_binary, free_port, wait_for_port, ChildServer};
use lock_core::{AcquireOptions, DistributedLock, LockName};
use lock_redis::RedisOptions;

const DATA_PASSWORD: &str = "data-secret-c41d";
const SENTINEL_PASSWORD: &str = "sentinel-secret-8a2f";

/// Every command the fake Sentinel received, as its arguments.
type Log = Arc<Mutex<Vec<Vec<String>>>>;

/// One complete RESP command at the start of `buf`: its arguments and its length in bytes.
fn parse_command(buf: &[u8]) -> Option<(Vec<String>, usize)> {
    fn line(buf: &[u8], at: usize) -> Option<(&str, usize)> {
        let end = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        Some((std::str::from_utf8(&buf[at..end]).ok()?, end + 2))
    }
    let (head, mut at) = line(buf, 0)?;
    let n: usize = head.strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        let (len, next) = line(buf, at)?;
        let len: usize = len.strip_prefix('$')?.parse().ok()?;
        let arg = buf.get(next..next + len)?;
        args.push(String::from_utf8_lossy(arg).into_owned());
        at = next + len + 2;
        if buf.len() < at {
            return None;
        }
    }
    Some((args, at))
}

fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}

/// The fake Sentinel's answer: it knows one master, `m`, at `primary`.
fn reply(args: &[String], primary: SocketAddr) -> String {
    let cmd = args.first().map(|c| c.to_ascii_uppercase()).unwrap_or_default();
    match cmd.as_str() {
        "AUTH" | "CLIENT" => "+OK\r\n".to_owned(),
        "PING" => "+PONG\r\n".to_owned(),
        "ROLE" => format!("*2\r\n{}*1\r\n{}", bulk("sentinel"), bulk("m")),
        "SENTINEL" => {
            let fields = [
                ("name", "m".to_owned()),
                ("ip", primary.ip().to_string()),
                ("port", primary.port().to_string()),
                ("flags", "master".to_owned()),
            ];
            let mut out = format!("*1\r\n*{}\r\n", fields.len() * 2);
            for (k, v) in fields {
                out.push_str(&bulk(k));
                out.push_str(&bulk(&v));
            }
            out
        }
        _ => format!("-ERR unknown command '{cmd}'\r\n"),
    }
}

async fn fake_sentinel(primary: SocketAddr) -> (SocketAddr, Log) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log: Log = Arc::default();
    let shared = Arc::clone(&log);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let log = Arc::clone(&shared);
            tokio::spawn(async move {
                let (mut buf, mut chunk) = (Vec::new(), vec![0u8; 4096]);
                while let Ok(n) = stream.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some((args, used)) = parse_command(&buf) {
                        buf.drain(..used);
                        let answer = reply(&args, primary);
                        log.lock().unwrap().push(args);
                        if stream.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, log)
}

/// A plaintext redis-server with `requirepass`.
async fn data_node(dir: &std::path::Path) -> (SocketAddr, ChildServer) {
    let port = free_port().unwrap();
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--requirepass",
        DATA_PASSWORD,
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        &dir.to_string_lossy(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let program = find_binary("redis-server", &["/usr/local/bin", "/usr/bin"]).expect("redis-server on PATH");
    let child = ChildServer::new(program, args, dir);
    child.start().unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_for_port(addr, Duration::from_secs(10)).await.unwrap();
    (addr, child)
}

/// The lock works through the fake Sentinel; the Sentinel got `AUTH <sentinel user>
/// <sentinel password>` and never the data password; the data node was reached with its own.
/// The same for the primary lookup of `dlock`'s clean-up (`sentinel_primary`).
#[tokio::test]
async fn the_data_password_never_reaches_a_sentinel() {
    let dir = tempfile::tempdir().unwrap();
    let (data, _server) = data_node(dir.path()).await;
    let (sentinel, log) = fake_sentinel(data).await;
    let url = format!(
        "redis+sentinel://:{DATA_PASSWORD}@{sentinel}/m?sentinel_username=watcher&sentinel_password={SENTINEL_PASSWORD}"
    );
    let options = RedisOptions { restart_quiet_period: Some(Duration::ZERO), ..common::test_options() };
    let client = lock_redis::connect(&url, options.clone()).await.expect("connects through the fake Sentinel");
    let opts = AcquireOptions::new(Duration::from_secs(2)).wait(Duration::from_secs(1));
    client.acquire(&LockName::new("fake-sentinel").unwrap(), &opts).await.unwrap().release().await.unwrap();
    let primary = lock_redis::sentinel_primary(&url, &options).await.unwrap();
    assert_eq!(primary, format!("redis://:{DATA_PASSWORD}@{data}"));

    let seen = log.lock().unwrap().clone();
    let auths: Vec<&Vec<String>> = seen.iter().filter(|a| a[0].eq_ignore_ascii_case("AUTH")).collect();
    assert!(!auths.is_empty(), "the client logged in to the Sentinel: {seen:?}");
    for a in &auths {
        assert_eq!(a[1..], ["watcher", SENTINEL_PASSWORD], "the Sentinel's own credentials, nothing else");
    }
    assert!(
        !seen.iter().flatten().any(|arg| arg.contains(DATA_PASSWORD)),
        "the data password reached the Sentinel: {seen:?}"
    );
}
