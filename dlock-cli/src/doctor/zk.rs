//! ZooKeeper checks: the server version and mode from the `srvr` four-letter word (which servers
//! may not allow: then the version is told by whether a container node can be created), the
//! lock root, the negotiated session timeout and the clock (the creation time of a probe node).

use std::time::{Duration, SystemTime};

use dlock::{Config, LockError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client::{Acls, Client, CreateMode};

use super::{clock_skew, Finding};
use crate::raw;

pub(super) async fn checks(config: &Config) -> Result<Vec<Finding>, LockError> {
    // These checks speak plaintext (the srvr word, a raw client): to a TLS deployment they would
    // send its digest credentials in the clear, to whoever answers on its port.
    if let Some(ca) = &config.zk.tls_ca_file {
        return Ok(vec![Finding::fail(
            "tls",
            format!(
                "[zk] tls_ca_file ({}) is set, and dlock doctor checks ZooKeeper only in plaintext: nothing was sent",
                ca.display()
            ),
            "check the ensemble with zkServer.sh status (or point doctor at a plaintext test server without tls_ca_file)",
        )]);
    }
    let target = raw::ZkTarget::parse(&config.url);
    let mut findings = Vec::new();
    for host in target.hosts.split(',').filter(|h| !h.is_empty()) {
        findings.push(version(host, &srvr(host).await));
    }
    let (client, target) = raw::zk(&config.url).await?;
    findings.push(session(&client, config.zk.session_timeout));
    findings.extend(probe(&client, &target.root, target.auth.is_some()).await);
    Ok(findings)
}

/// The answer to `srvr` (empty when the server closed the connection without one).
async fn srvr(host: &str) -> Result<String, String> {
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(host).await?;
        s.write_all(b"srvr").await?;
        let mut text = String::new();
        s.read_to_string(&mut text).await?;
        Ok::<_, std::io::Error>(text)
    };
    match tokio::time::timeout(raw::WAIT, ask).await {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {:?}", raw::WAIT)),
    }
}

/// Reads the version and mode from a `srvr` answer; without one (the word is not whitelisted),
/// says so and leaves the version to the container-node probe.
fn version(host: &str, answer: &Result<String, String>) -> Finding {
    let check = format!("{host}: version");
    let text = match answer {
        Ok(t) if t.contains("Zookeeper version:") => t,
        Ok(t) => {
            return Finding::warn(
                &check,
                format!(
                "the srvr four-letter word is disabled ({}); the version is checked by creating a container node below",
                t.lines().next().unwrap_or("no answer").trim()
            ),
                "to let dlock doctor read it, add srvr to 4lw.commands.whitelist in zoo.cfg",
            )
        }
        Err(e) => return Finding::fail(&check, format!("cannot ask {host}: {e}"), "start the server or fix the URL"),
    };
    let line = text.lines().find_map(|l| l.strip_prefix("Zookeeper version:")).unwrap_or("").trim();
    let mode = text.lines().find_map(|l| l.strip_prefix("Mode:")).unwrap_or("unknown").trim().to_owned();
    let number = line.split(['-', ',']).next().unwrap_or("");
    let parts: Vec<u32> = number.split('.').filter_map(|p| p.parse().ok()).collect();
    let at_least_3_5 = matches!(parts.as_slice(), [major, minor, ..] if (*major, *minor) >= (3, 5));
    if !at_least_3_5 {
        return Finding::fail(
            &check,
            format!("ZooKeeper {number} (mode {mode}): container nodes need 3.5 or later, so empty lock nodes pile up"),
            "upgrade ZooKeeper to 3.5 or later (3.8 or 3.9 recommended)",
        );
    }
    if mode == "standalone" {
        return Finding::warn(
            &check,
            format!("ZooKeeper {number}, standalone: one server, no fault tolerance"),
            "run an ensemble of 3 or 5 servers for production",
        );
    }
    Finding::ok(&check, format!("ZooKeeper {number}, mode {mode}"))
}

/// A session shorter than asked for (the server's `maxSessionTimeout` caps it) makes a paused
/// client lose its locks sooner than configured; a longer one keeps a crashed holder's lock.
fn session(client: &Client, asked: Duration) -> Finding {
    const CHECK: &str = "session timeout";
    let got = client.session_timeout();
    let detail = format!("asked for {asked:?}, the server granted {got:?}");
    if got + Duration::from_millis(1) < asked || got > asked * 2 {
        Finding::warn(
            CHECK,
            detail,
            "set [zk] session_timeout within the server's minSessionTimeout..maxSessionTimeout (tickTime × 2..20 by default)",
        )
    } else {
        Finding::ok(CHECK, detail)
    }
}

/// The probe node's ACL: the lock client's (lock-zk's `acl.rs`), the creator's alone when the
/// URL carries credentials (`anyone` cannot be narrowed without them).
fn probe_acls(authenticated: bool) -> Acls<'static> {
    if authenticated {
        Acls::creator_all()
    } else {
        Acls::anyone_all()
    }
}

/// Creates a container node under the root (container nodes are what the lock recipe uses for
/// its parents; a server before 3.5 refuses them), reads its creation time for the clock check,
/// and deletes it. With credentials the node is the creator's alone, as the lock client's are:
/// nobody else may change it (or plant children in it) while it exists.
async fn probe(client: &Client, root: &str, authenticated: bool) -> Vec<Finding> {
    const CHECK: &str = "container nodes";
    let path = format!("{root}/dlock-doctor-{:016x}", rand_u64());
    let options = CreateMode::Container.with_acls(probe_acls(authenticated));
    let before = SystemTime::now();
    let created = tokio::time::timeout(raw::WAIT, client.create(&path, &[], &options)).await;
    let after = SystemTime::now();
    let stat = match created {
        Ok(Ok((stat, _))) => stat,
        Ok(Err(zookeeper_client::Error::NoNode)) => {
            return vec![Finding::warn(
                CHECK,
                format!("the lock root {root} does not exist yet"),
                format!("create {root} (the lock client creates it on first use if its parent allows)"),
            )]
        }
        Ok(Err(zookeeper_client::Error::Unimplemented)) => {
            return vec![Finding::fail(
                CHECK,
                "the server refused to create a container node: it is older than 3.5",
                "upgrade ZooKeeper to 3.5 or later",
            )]
        }
        Ok(Err(zookeeper_client::Error::NoAuth)) => {
            return vec![Finding::fail(
                CHECK,
                format!("no permission to create nodes under {root}"),
                format!("give the lock user CREATE and DELETE on {root} (setAcl)"),
            )]
        }
        Ok(Err(e)) => return vec![Finding::unknown(CHECK, e, "check the server's log")],
        Err(_) => return vec![Finding::unknown(CHECK, "no answer", "check the server is healthy")],
    };
    let _ = tokio::time::timeout(raw::WAIT, client.delete(&path, None)).await;
    vec![
        Finding::ok(CHECK, format!("a container node was created and deleted under {root}")),
        clock_skew("zookeeper", stat.ctime, before, after),
    ]
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id().into());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_node_is_the_creators_alone_with_credentials() {
        assert_eq!(probe_acls(true), Acls::creator_all());
        assert_eq!(probe_acls(false), Acls::anyone_all(), "without credentials only world access exists");
    }
}
