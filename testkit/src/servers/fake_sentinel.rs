//! A fake Redis Sentinel for tests of what a client sends a Sentinel: a small RESP responder
//! on 127.0.0.1 that records every command (so a test can assert which credentials reached it)
//! and names one master, `m`, at an address the test chooses — a real server, or one that is
//! not what a Sentinel should name. Plaintext only. Also a password-protected `redis-server`
//! to name.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::LockError;

use super::redis::{node_args, redis_binary};
use crate::process::{free_port, server_dir, wait_for_port, ChildServer};

/// The master name the fake Sentinel knows.
pub const MASTER_NAME: &str = "m";

/// A running fake Sentinel; it stops with the test's runtime.
#[derive(Debug)]
pub struct FakeSentinel {
    /// Where it listens.
    pub addr: SocketAddr,
    log: Log,
}

impl FakeSentinel {
    /// Starts one that names `primary` as the master [`MASTER_NAME`] (flags `master`).
    pub async fn start(primary: SocketAddr) -> Result<FakeSentinel, LockError> {
        let (addr, log) = fake_sentinel(primary).await?;
        Ok(FakeSentinel { addr, log })
    }

    /// Every command received so far, as its arguments, in order.
    pub fn commands(&self) -> Vec<Vec<String>> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

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
        "ROLE" => format!("*2\r\n{}*1\r\n{}", bulk("sentinel"), bulk(MASTER_NAME)),
        "SENTINEL" if args.get(1).is_some_and(|a| a.eq_ignore_ascii_case("GET-MASTER-ADDR-BY-NAME")) => {
            format!("*2\r\n{}{}", bulk(&primary.ip().to_string()), bulk(&primary.port().to_string()))
        }
        "SENTINEL" => {
            let fields = [
                ("name", MASTER_NAME.to_owned()),
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

async fn fake_sentinel(primary: SocketAddr) -> Result<(SocketAddr, Log), LockError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let bound = async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        Ok::<_, std::io::Error>((listener, addr))
    };
    let (listener, addr) =
        bound.await.map_err(|e| LockError::unavailable_from("test", "cannot listen for the fake Sentinel", e))?;
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
                        log.lock().unwrap_or_else(|e| e.into_inner()).push(args);
                        if stream.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    Ok((addr, log))
}

/// A fresh local `redis-server` whose default user has `password`, with its directory (drop
/// both to stop it).
pub async fn protected_redis(password: &str) -> Result<(SocketAddr, ChildServer, tempfile::TempDir), LockError> {
    let program = redis_binary()?;
    let dir = server_dir("redis")?;
    let port = free_port()?;
    let mut args = node_args(port, dir.path());
    args.extend(["--requirepass".to_owned(), password.to_owned()]);
    let child = ChildServer::new(&program, args, dir.path());
    child.start()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_for_port(addr, Duration::from_secs(10)).await?;
    Ok((addr, child, dir))
}
