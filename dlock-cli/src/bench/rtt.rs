//! `dlock bench --rtt`: a network round trip between the clients and the server, so the ratios
//! are the ones a real network gives (on one machine a round trip costs ~30 µs and the server's
//! own work dominates; across a data centre it is 0.2–1 ms and round trips dominate).
//!
//! A proxy per server address the URL names delays every chunk by half the round trip in each
//! direction, as a constant offset (chunks in flight do not queue behind each other's delay), and
//! the URL is rewritten to the proxies, so the lock client and the baseline go through the same
//! delay. Written here, not with the suite's `FaultProxy`: that one runs on tokio's timer, whose
//! 1 ms granularity cannot delay by 0.25 ms; these are OS threads that sleep to the microsecond
//! (Linux timer slack, ~50 µs) and keep blocking I/O off the runtime.
//!
//! Only URLs whose hosts are every server the client talks to qualify: not Sentinel or Cluster
//! (the servers name further nodes), not SQLite (no network), not a PostgreSQL `?host=`.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use dlock::LockError;

/// `url` with every host of its authority replaced by a local proxy that delays each direction by
/// `rtt / 2`; the proxies live as long as the process (a bench is one run).
pub(crate) fn through_delay(url: &str, rtt: Duration) -> Result<String, LockError> {
    let hosts = HostList::parse(url)?;
    let mut proxied = Vec::new();
    for host in &hosts.hosts {
        let upstream = resolve(host, hosts.default_port)?;
        proxied.push(DelayProxy::start(upstream, rtt / 2)?.to_string());
    }
    Ok(hosts.render(&proxied))
}

fn resolve(host: &str, default_port: u16) -> Result<SocketAddr, LockError> {
    let with_port = if host.starts_with('[') {
        if host.contains("]:") {
            host.to_owned()
        } else {
            format!("{host}:{default_port}")
        }
    } else if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:{default_port}")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| LockError::config(format!("--rtt: cannot resolve {with_port:?}: {e}")))?
        .next()
        .ok_or_else(|| LockError::config(format!("--rtt: {with_port:?} resolves to no address")))
}

/// A URL cut around its host list: `scheme://[userinfo@]h1[:p1],h2[:p2][/rest]`.
#[derive(Debug, PartialEq)]
struct HostList<'a> {
    /// Up to and including `@` (or `://` without userinfo).
    head: &'a str,
    hosts: Vec<&'a str>,
    /// From the first `/`, `?` or `#` after the hosts.
    tail: &'a str,
    default_port: u16,
}

impl<'a> HostList<'a> {
    fn parse(url: &'a str) -> Result<HostList<'a>, LockError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| LockError::config("--rtt needs a URL of the form scheme://host[:port]/…"))?;
        let default_port = match scheme {
            "redis" | "rediss" | "redlock" => 6379,
            "postgres" | "postgresql" => 5432,
            "mysql" | "mariadb" => 3306,
            "zk" | "zookeeper" => 2181,
            "etcd" | "etcds" => 2379,
            other => {
                return Err(LockError::config(format!(
                    "--rtt cannot put a delay in front of {other}:// (it works for redis, rediss, redlock, postgres, \
                     mysql, zk and etcd URLs: Sentinel and Cluster servers name further nodes, SQLite has no network)"
                )))
            }
        };
        if url.contains("host=") {
            return Err(LockError::config("--rtt: a URL with a host= parameter names servers --rtt cannot proxy"));
        }
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        let at = authority.rfind('@').map_or(0, |i| i + 1);
        let head_len = scheme.len() + 3 + at;
        let hosts: Vec<&str> = authority[at..].split(',').collect();
        if hosts.iter().any(|h| h.is_empty()) {
            return Err(LockError::config("--rtt: the URL names an empty host"));
        }
        Ok(HostList { head: &url[..head_len], hosts, tail: &rest[end..], default_port })
    }

    fn render(&self, hosts: &[String]) -> String {
        format!("{}{}{}", self.head, hosts.join(","), self.tail)
    }
}

/// One listening proxy to `upstream`.
struct DelayProxy;

impl DelayProxy {
    /// Listens on a free local port and returns it; serves until the process ends.
    fn start(upstream: SocketAddr, one_way: Duration) -> Result<SocketAddr, LockError> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(|e| LockError::backend("dlock bench", e))?;
        let local = listener.local_addr().map_err(|e| LockError::backend("dlock bench", e))?;
        thread::Builder::new()
            .name(format!("rtt-proxy-{local}"))
            .spawn(move || {
                for client in listener.incoming().flatten() {
                    match TcpStream::connect(upstream) {
                        Ok(server) => relay(client, server, one_way),
                        Err(_) => {
                            let _ = client.shutdown(Shutdown::Both);
                        }
                    }
                }
            })
            .map_err(|e| LockError::backend("dlock bench", e))?;
        Ok(local)
    }
}

/// Both directions of one connection, each through a reader and a writer thread.
fn relay(client: TcpStream, server: TcpStream, one_way: Duration) {
    for s in [&client, &server] {
        let _ = s.set_nodelay(true);
    }
    let pairs = [(client.try_clone(), server.try_clone()), (server.try_clone(), client.try_clone())];
    for (from, to) in pairs {
        if let (Ok(from), Ok(to)) = (from, to) {
            direction(from, to, one_way);
        }
    }
}

/// Reads chunks from `from` and writes each to `to` `one_way` after it was read; an end of
/// stream is passed on as a write shutdown, a failed write closes both.
fn direction(mut from: TcpStream, mut to: TcpStream, one_way: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let _ = thread::Builder::new().name("rtt-read".into()).spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = from.read(&mut buf).unwrap_or(0);
            if tx.send((Instant::now() + one_way, buf[..n].to_vec())).is_err() || n == 0 {
                return;
            }
        }
    });
    let _ = thread::Builder::new().name("rtt-write".into()).spawn(move || {
        for (due, chunk) in rx {
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                thread::sleep(wait);
            }
            if chunk.is_empty() {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            if to.write_all(&chunk).is_err() {
                let _ = to.shutdown(Shutdown::Both);
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_cut_out_of_every_url_form() {
        let cut = |url| HostList::parse(url).map(|h| (h.head, h.hosts, h.tail, h.default_port));
        assert_eq!(cut("redis://127.0.0.1:6379/0").unwrap(), ("redis://", vec!["127.0.0.1:6379"], "/0", 6379));
        assert_eq!(
            cut("postgres://u:p%40ss@db.example:5433/test?sslmode=disable").unwrap(),
            ("postgres://u:p%40ss@", vec!["db.example:5433"], "/test?sslmode=disable", 5432)
        );
        assert_eq!(cut("redlock://a:1,b:2,c").unwrap(), ("redlock://", vec!["a:1", "b:2", "c"], "", 6379));
        assert_eq!(cut("zk://h1,h2:2182/prefix").unwrap(), ("zk://", vec!["h1", "h2:2182"], "/prefix", 2181));
        assert_eq!(cut("mysql://root@[::1]:3306/test").unwrap(), ("mysql://root@", vec!["[::1]:3306"], "/test", 3306));
        for refused in [
            "redis+sentinel://h/mymaster",
            "redis+cluster://h",
            "sqlite://x.db",
            "postgres:///test?host=/run/pg",
            "redis://",
            "nonsense",
        ] {
            assert!(HostList::parse(refused).is_err(), "{refused}");
        }
        let h = HostList::parse("redlock://u@a:1,b:2/x").unwrap();
        assert_eq!(h.render(&["127.0.0.1:9".into(), "127.0.0.1:8".into()]), "redlock://u@127.0.0.1:9,127.0.0.1:8/x");
    }

    /// An echo server behind the proxy: a round trip takes at least the configured rtt.
    #[test]
    fn a_round_trip_takes_the_rtt() {
        let echo = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let upstream = echo.local_addr().unwrap();
        thread::spawn(move || {
            for mut s in echo.incoming().flatten() {
                thread::spawn(move || {
                    let mut b = [0u8; 64];
                    while let Ok(n @ 1..) = s.read(&mut b) {
                        if s.write_all(&b[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let rtt = Duration::from_micros(2_500);
        let url = through_delay(&format!("redis://{upstream}/0"), rtt).unwrap();
        let proxied = url.trim_start_matches("redis://").trim_end_matches("/0");
        let mut c = TcpStream::connect(proxied).unwrap();
        c.set_nodelay(true).unwrap();
        let mut times = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            c.write_all(b"ping").unwrap();
            let mut b = [0u8; 4];
            c.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"ping");
            times.push(t.elapsed());
        }
        times.sort();
        let median = times[times.len() / 2];
        assert!(median >= rtt, "median round trip {median:?} below the rtt {rtt:?}");
    }
}
