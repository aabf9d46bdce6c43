//! `dlock init --url URL [--force]`: marks a new deployment fresh, so its first lock is granted
//! at once instead of after the restart quiet period (docs/contract.md §3). dlock cannot tell a
//! key prefix never used from one whose data was lost; the operator can, and this is how they
//! say it: the boot marker `<key_prefix>:boot` is set to 0 on the server (single instance), on
//! the primary the Sentinels name, or on every Redlock master. Without `--force` a marker that is
//! already there is left alone (the deployment is in use, or in a quiet period that protects
//! forgotten leases); `--force` overwrites it, only for a deployment known to hold no lease.
//! Redis Cluster keeps one marker per hash slot (`dlock::redis::cluster_boot_markers`): every one
//! of the 16384 is set, each on its slot's master. Other backends keep their state and need no
//! marking.

use clap::Args;

use crate::redactor::Redactor;
use dlock::{LockError, Scheme};

/// Arguments of `dlock init`.
#[derive(Args)]
pub(crate) struct InitArgs {
    #[command(flatten)]
    target: crate::target::Target,
    /// Overwrite a marker that is already there (ends a running quiet period: only for a
    /// deployment known to hold no lease).
    #[arg(long)]
    force: bool,
}

/// Marks every server of the deployment; prints one line per server.
pub(crate) async fn run(args: InitArgs, out: &Redactor) -> Result<bool, LockError> {
    let config = args.target.load(out)?;
    let scheme = config.url.split_once("://").map_or("", |(s, _)| s).to_ascii_lowercase();
    match Scheme::of(&config.url)? {
        #[cfg(feature = "redis")]
        Scheme::Redis if scheme == "redis+cluster" => {
            let line = mark_cluster(&config.url, &config.redis_options(), args.force).await?;
            out.println(&format!("{}: {line}", dlock::url::redact_url(&config.url)));
            Ok(true)
        }
        #[cfg(feature = "redis")]
        Scheme::Redis | Scheme::Redlock => {
            let servers = match scheme.as_str() {
                "redis+sentinel" | "rediss+sentinel" => vec![crate::raw::sentinel_primary(&config).await?],
                _ => crate::raw::redis_urls(&config.url)?,
            };
            let marker = format!("{}:boot", config.redis.key_prefix);
            for server in servers {
                let line = mark(&server, &config.redis_options(), &marker, args.force).await?;
                out.println(&format!("{}: {line}", dlock::url::redact_url(&server)));
            }
            Ok(true)
        }
        _ => {
            out.println("nothing to mark: this backend keeps its state across restarts (no quiet period)");
            Ok(true)
        }
    }
}

/// Sets every slot's boot marker of `prefix` to 0 on a Redis Cluster (only those missing unless
/// `force`), 512 at a time through a cluster connection that routes each to its slot's master;
/// `?tls=true` nodes verified as the lock client does (`crate::raw::redis_tls`).
#[cfg(feature = "redis")]
async fn mark_cluster(url: &str, options: &dlock::redis::RedisOptions, force: bool) -> Result<String, LockError> {
    use crate::raw::within;
    let prefix = options.key_prefix.as_str();
    let nodes = crate::raw::redis_urls(url)?;
    let tls = nodes.first().is_some_and(|n| n.starts_with("rediss://"));
    let mut builder = redis::cluster::ClusterClient::builder(nodes);
    if let Some(certs) = crate::raw::redis_tls(options, tls).await? {
        builder = builder.certs(certs);
    }
    let client = builder.build().map_err(|e| LockError::config(format!("invalid redis+cluster URL: {e}")))?;
    let con = within("redis", "connect to the cluster", client.get_async_connection()).await?;
    let markers = dlock::redis::cluster_boot_markers(prefix);
    let (mut marked, mut kept) = (0usize, 0usize);
    for chunk in markers.chunks(512) {
        let sets = chunk.iter().map(|key| {
            let mut con = con.clone();
            let mut set = redis::cmd("SET");
            set.arg(key).arg(0);
            if !force {
                set.arg("NX");
            }
            async move { set.query_async::<Option<String>>(&mut con).await }
        });
        let answers = within("redis", "set the slots' boot markers", async {
            futures::future::join_all(sets).await.into_iter().collect::<Result<Vec<_>, _>>()
        })
        .await?;
        let set = answers.iter().filter(|a| a.is_some()).count();
        marked += set;
        kept += answers.len() - set;
    }
    Ok(match (marked, kept) {
        (_, 0) if force => format!("marked fresh: all {marked} slot markers of {prefix:?} set to 0 (--force)"),
        (_, 0) => format!("marked fresh: all {marked} slot markers of {prefix:?} set to 0"),
        _ => format!(
            "{marked} slot markers of {prefix:?} set to 0; {kept} already marked, left alone (a value in the future is a \
             quiet period: --force ends it, only for a deployment known to hold no lease)"
        ),
    })
}

/// Sets `marker` to 0 on one server (only if missing unless `force`); says what it found.
#[cfg(feature = "redis")]
async fn mark(
    server: &str,
    options: &dlock::redis::RedisOptions,
    marker: &str,
    force: bool,
) -> Result<String, LockError> {
    use crate::raw::{redis, redis_query};
    let mut conn = redis(server, options).await?;
    let before: Option<String> = redis_query(&mut conn, redis::cmd("GET").arg(marker)).await?;
    match before {
        None => {
            let set: Option<String> = redis_query(&mut conn, redis::cmd("SET").arg(marker).arg(0).arg("NX")).await?;
            Ok(if set.is_some() { format!("marked fresh ({marker} = 0)") } else { format!("{marker} appeared meanwhile; left alone") })
        }
        Some(value) if force => {
            let _: () = redis_query(&mut conn, redis::cmd("SET").arg(marker).arg(0)).await?;
            Ok(format!("marked fresh ({marker} was {value}, now 0: --force)"))
        }
        Some(value) => Ok(format!(
            "already marked ({marker} = {value}); left alone (a value in the future is a quiet period: --force ends it, \
             only for a deployment known to hold no lease)"
        )),
    }
}
