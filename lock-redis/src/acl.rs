//! The permission check at connect: every command the scripts, the pub/sub connection and the
//! health check use, on this client's keys and channels, asked of the server once
//! (`redis.acl_check_cmd`, Redis ≥ 7). Redis scripts do not roll back, so a permission that
//! is missing half-way through a script (a release that deleted the key and then may not
//! `PUBLISH`) would leave its work half done; finding it at connect turns it into a `Config`
//! error that names what to grant.

use std::sync::LazyLock;

use lock_core::LockError;
use redis::Script;

use crate::conn::Node;

/// ARGV: groups of `n, command, args…`. Returns the groups the user may not run. Servers
/// before Redis 7 have no `redis.acl_check_cmd`: nothing is checked there.
const CHECK_SRC: &str = r#"
if not redis.acl_check_cmd then return {} end
local missing, i = {}, 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local cmd = {}
  for j = 1, n do cmd[j] = ARGV[i + j] end
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(cmd))
  if not ok or not allowed then table.insert(missing, table.concat(cmd, ' ')) end
  i = i + n + 1
end
return missing
"#;
static CHECK: LazyLock<Script> = LazyLock::new(|| Script::new(CHECK_SRC));

/// What a client will run, so what it must be allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Needs {
    /// The exclusive lock (single instance or one Redlock master).
    Exclusive,
    /// A read-write lock or a semaphore.
    Kinds,
}

/// The least ACL, as documented in the crate docs (`~<prefix>:* &<prefix>:*` plus these).
/// The sorted-set and hash commands are the exclusive lock's waiter queue's
/// (`crate::scripts::waiters`).
pub(crate) const EXCLUSIVE_ACL: &str = "+evalsha +script|load +ping +subscribe +unsubscribe +publish +hget +hmget \
                                        +hset +pexpire +pttl +time +incr +get +set +del +zadd +zrange +zrangebyscore \
                                        +zscore +zrem +zcard +hdel +exists +rpush +blpop";
/// What read-write locks and semaphores need on top of [`EXCLUSIVE_ACL`]: `zrank` and `zcount`
/// place a waiter and count the readers at the head of the kinds' queues.
pub(crate) const KINDS_ACL: &str = "+zremrangebyscore +zrank +zcount";

/// The commands to check, each as the script would send it (so key and channel patterns are
/// checked too).
fn commands(prefix: &str, db: i64, needs: Needs) -> Vec<Vec<String>> {
    let key = format!("{prefix}:{{dlock-permission-check}}:lock");
    let boot = format!("{prefix}:boot");
    let channel = format!("{prefix}:{{dlock-permission-check}}:released");
    let k = |cmd: &str, rest: &[&str]| {
        let mut v = vec![cmd.to_owned(), key.clone()];
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    };
    let mut out = vec![
        vec!["ping".to_owned()],
        vec!["subscribe".to_owned(), channel.clone()],
        vec!["unsubscribe".to_owned(), channel.clone()],
        vec!["publish".to_owned(), channel, "released".to_owned()],
        vec!["time".to_owned()],
        vec!["get".to_owned(), boot.clone()],
        vec!["set".to_owned(), boot, "0".to_owned()],
        k("hget", &["o"]),
        k("hmget", &["o", "q"]),
        k("hset", &["o", "x"]),
        k("pexpire", &["1000"]),
        k("pttl", &[]),
        k("incr", &[]),
        k("del", &[]),
        k("zadd", &["1", "x"]),
        k("zrange", &["0", "-1"]),
        k("zrangebyscore", &["-inf", "1"]),
        k("zscore", &["x"]),
        k("zrem", &["x"]),
        k("zcard", &[]),
        k("hdel", &["x"]),
        k("exists", &[]),
        k("rpush", &["x"]),
        k("blpop", &["1"]),
    ];
    if needs == Needs::Kinds {
        out.extend([k("zremrangebyscore", &["-inf", "1"]), k("zrank", &["x"]), k("zcount", &["-inf", "1"])]);
    }
    if db != 0 {
        out.push(vec!["select".to_owned(), db.to_string()]);
    }
    out
}

/// Asks the server whether this client's user may run everything it will run. `Config` naming
/// the missing commands when not; a user that may not even run the check (`EVALSHA`) is a
/// `Config` error from the server's own refusal.
pub(crate) async fn check(node: &Node, prefix: &str, db: i64, needs: Needs) -> Result<(), LockError> {
    let commands = commands(prefix, db, needs);
    let mut args = Vec::new();
    for c in &commands {
        args.push(c.len().to_string());
        args.extend(c.iter().cloned());
    }
    let args = &args;
    let missing: Vec<String> = node
        .run_idempotent(node.request_timeout(), |mut c| async move {
            let mut call = CHECK.prepare_invoke();
            for a in args {
                call.arg(a);
            }
            call.invoke_async(&mut c).await
        })
        .await?;
    if missing.is_empty() {
        return Ok(());
    }
    let grant = match needs {
        Needs::Exclusive => EXCLUSIVE_ACL.to_owned(),
        Needs::Kinds => format!("{EXCLUSIVE_ACL} {KINDS_ACL}"),
    };
    let select = if db != 0 { " +select" } else { "" };
    Err(LockError::config(format!(
        "the Redis user on {} may not run what dlock needs: {}; grant it, e.g. ACL SETUSER <user> ~{prefix}:* \
         &{prefix}:* {grant}{select}",
        node.label,
        missing.join(", ")
    )))
}
