//! The threads that serve client connections. Each is a single-threaded
//! runtime with its own pool of upstream connections, so a client
//! connection, its requests and the origin connections they use stay on
//! one thread, as in nginx's workers: no task is stolen across threads and
//! an origin's answer wakes the thread that waits for it. On the shared
//! loopback benchmark this served 10–14% more requests than one
//! work-stealing runtime with as many threads (bench/README).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The serving threads; dropping it (or [`Shards::stop`]) ends them.
pub(crate) struct Shards {
    handles: Vec<Handle>,
    /// Connections each thread is serving now; a new one goes to the least
    /// busy thread.
    live: Arc<[AtomicUsize]>,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Shards {
    /// Starts `n` serving threads (at least one).
    pub(crate) fn start(n: usize) -> std::io::Result<Shards> {
        let n = n.max(1);
        let mut shards = Shards {
            handles: Vec::with_capacity(n),
            live: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            stops: Vec::with_capacity(n),
            threads: Vec::with_capacity(n),
        };
        for i in 0..n {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (stop, stopped) = oneshot::channel::<()>();
            shards.handles.push(rt.handle().clone());
            shards.stops.push(stop);
            let thread = std::thread::Builder::new()
                .name(format!("mannerly-serve-{i}"))
                .spawn(move || {
                    crate::upstream::serve_on_shard(i);
                    // Ends when the sender is used or dropped.
                    let _ = rt.block_on(stopped);
                })?;
            shards.threads.push(thread);
        }
        Ok(shards)
    }

    /// Runs `serve` (one client connection) on the least busy thread.
    pub(crate) fn spawn(&self, serve: impl Future<Output = ()> + Send + 'static) {
        let i = (0..self.live.len())
            .min_by_key(|&i| self.live[i].load(Ordering::Relaxed))
            .unwrap_or(0);
        self.live[i].fetch_add(1, Ordering::Relaxed);
        let live = self.live.clone();
        self.handles[i].spawn(async move {
            let _done = Done(&live[i]);
            serve.await;
        });
    }

    /// Ends the threads once their runtimes have dropped what they still
    /// hold (pooled upstream connections, idle client connections); waits
    /// for them on the blocking pool.
    pub(crate) async fn stop(mut self) {
        self.stops.clear();
        let threads = std::mem::take(&mut self.threads);
        let _ = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await;
    }
}

/// Counts a connection as done however its task ends (finished, or
/// dropped with its runtime).
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_go_to_the_least_busy_thread_and_run_there() {
        let shards = Shards::start(2).expect("threads");
        assert_eq!(shards.handles.len(), 2);
        let (hold, held) = tokio::sync::watch::channel(false);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..4 {
            let (tx, mut held) = (tx.clone(), held.clone());
            shards.spawn(async move {
                let name = std::thread::current().name().map(str::to_string);
                let _ = tx.send(name);
                let _ = held.wait_for(|h| *h).await;
            });
        }
        let mut names = Vec::new();
        for _ in 0..4 {
            names.push(rx.recv().await.flatten().expect("a named thread"));
        }
        names.sort();
        assert_eq!(
            names,
            [
                "mannerly-serve-0",
                "mannerly-serve-0",
                "mannerly-serve-1",
                "mannerly-serve-1"
            ]
        );
        assert_eq!(shards.live[0].load(Ordering::Relaxed), 2);
        hold.send_replace(true);
        // Released connections are counted out.
        for _ in 0..200 {
            if shards.live.iter().all(|l| l.load(Ordering::Relaxed) == 0) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(shards.live.iter().all(|l| l.load(Ordering::Relaxed) == 0));
        shards.stop().await;
    }

    #[tokio::test]
    async fn stopping_drops_what_the_threads_still_hold() {
        let shards = Shards::start(1).expect("threads");
        let (tx, rx) = oneshot::channel::<()>();
        shards.spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        shards.stop().await;
        // The never-ending task was dropped with its runtime.
        assert!(rx.await.is_err());
    }
}
