//! One handle on the cluster's Redis, whichever shape it has: a single node
//! (`redis://host:port/db`) or a Redis Cluster (`redis+cluster://a:p,b:p`).
//!
//! Everything shared (budgets, leases, robots.txt copies, stored pages) goes
//! through a [`Link`]. Each key names its host or origin in a hash tag
//! ([`tagged`]), so every script and every multi-key command stays in one
//! slot; on a Cluster the client follows `MOVED`/`ASK` and refreshes its
//! slot map after a failover, so a promoted replica takes over without the
//! proxy noticing more than a few slow or failed commands (which the
//! callers treat as Redis being out of reach, not as an error).

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// The scheme that selects Redis Cluster: `redis+cluster://` followed by
/// one or more seed nodes, comma-separated (`user:pass@` before them is
/// used on every node).
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// A cheap-to-clone connection to a Redis node or a Redis Cluster.
#[derive(Clone)]
pub enum Link {
    /// One node; reconnects by itself.
    Node(ConnectionManager),
    /// A Redis Cluster; routes each command by its key's slot.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Link::Node(_) => "Link::Node",
            Link::Cluster(_) => "Link::Cluster",
        })
    }
}

impl Link {
    /// Opens `url` lazily: nothing is dialled until the first command, so a
    /// proxy starts (degraded) while Redis is still down. `timeout` bounds
    /// connecting and each answer. Needs a tokio runtime.
    pub fn open(url: &str, timeout: Duration) -> Result<Link, redis::RedisError> {
        if let Some(nodes) = cluster_nodes(url)? {
            let client = ClusterClientBuilder::new(nodes)
                .connection_timeout(timeout)
                .response_timeout(timeout)
                // A failover moves slots: one retry after a MOVED or a
                // refused connection finds the promoted replica, more would
                // only hold the request past its budget's patience.
                .retries(2)
                .min_retry_wait(10)
                .max_retry_wait(200)
                .build()?;
            let config = redis::cluster::ClusterConfig::new()
                .set_connection_timeout(timeout)
                .set_response_timeout(timeout);
            return Ok(Link::Cluster(
                client.get_pending_async_connection_with_config(config),
            ));
        }
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        Ok(Link::Node(ConnectionManager::new_lazy_with_config(
            client, config,
        )?))
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Link::Cluster(_))
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Node(c) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Node(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Node(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
        }
    }
}

/// The key `{prefix}{{name}}:{kind}`: every key of one host (or origin)
/// carries the same hash tag, so they share a slot. Braces inside `name`
/// would end the tag early; host names and origins have none, and any
/// that sneaks in is replaced so that the tag stays the whole name.
pub fn tagged(prefix: &str, name: &str, kind: &str) -> String {
    let clean: std::borrow::Cow<'_, str> = if name.contains(['{', '}']) {
        name.replace(['{', '}'], "_").into()
    } else {
        name.into()
    };
    format!("{prefix}{{{clean}}}:{kind}")
}

/// The seed node URLs of a `redis+cluster://` URL; `None` for any other.
pub(crate) fn cluster_nodes(url: &str) -> Result<Option<Vec<String>>, redis::RedisError> {
    let Some(rest) = url.strip_prefix(CLUSTER_SCHEME) else {
        return Ok(None);
    };
    let rest = rest.trim_end_matches('/');
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((a, h)) => (format!("{a}@"), h),
        None => (String::new(), rest),
    };
    let nodes: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| format!("redis://{auth}{h}"))
        .collect();
    if nodes.is_empty() {
        return Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "redis+cluster:// names no node (write redis+cluster://host:port,host:port)",
        )));
    }
    Ok(Some(nodes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_one_host_share_a_hash_tag() {
        assert_eq!(tagged("m:", "example.com", "h"), "m:{example.com}:h");
        // Redis hashes only what is inside the first braces.
        let tag = |k: &str| {
            k.split_once('{')
                .and_then(|(_, r)| r.split_once('}'))
                .map(|t| t.0.to_string())
        };
        assert_eq!(tag(&tagged("{x}:", "a.com", "h")), Some("x".into()));
        assert_eq!(
            tag(&tagged("m:", "a.com", "h")),
            tag(&tagged("m:", "a.com", "rl"))
        );
        assert_eq!(tagged("m:", "a{b}c", "h"), "m:{a_b_c}:h");
    }

    #[test]
    fn a_cluster_url_names_its_seed_nodes() {
        assert_eq!(cluster_nodes("redis://h:1/0").unwrap(), None);
        assert_eq!(
            cluster_nodes("redis+cluster://a:1, b:2/").unwrap(),
            Some(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
        assert_eq!(
            cluster_nodes("redis+cluster://u:p@a:1,b:2").unwrap(),
            Some(vec!["redis://u:p@a:1".into(), "redis://u:p@b:2".into()])
        );
        assert!(cluster_nodes("redis+cluster://").is_err());
    }
}
