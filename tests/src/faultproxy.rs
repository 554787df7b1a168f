//! A TCP proxy on loopback that injects network faults between a client (the connector)
//! and a real server, for the fault suite: [`FaultProxy::cut`] closes every open
//! connection (both ends, at once, like a broken link or a firewall reset);
//! [`FaultProxy::stall`] stops moving bytes while the connections stay open (a black
//! hole: the peers see silence, not an error); [`FaultProxy::slow`] delays every chunk it
//! forwards. New connections are accepted in every mode (a stalled one stays silent).
//!
//! It runs on its own thread and runtime, so a test's runtime stalling does not stall it,
//! and stops when dropped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Pass,
    Stall,
    Slow(Duration),
}

struct Shared {
    mode: watch::Sender<Mode>,
    /// Bumped by `cut`: connections of an older generation close.
    generation: watch::Sender<u64>,
    connections: AtomicU64,
    cuts: AtomicU64,
}

pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// A proxy on a free loopback port forwarding to `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<FaultProxy> {
        Self::start_on(([127, 0, 0, 1], 0).into(), upstream)
    }

    /// A proxy listening on `listen` (port 0: a free one) forwarding to `upstream`: another
    /// loopback address (127.0.0.2, …) stands for another host. Dropping it closes its
    /// connections and its address then refuses new ones, as a host that went away.
    pub fn start_on(listen: SocketAddr, upstream: SocketAddr) -> Result<FaultProxy> {
        let std_listener =
            std::net::TcpListener::bind(listen).with_context(|| format!("bind {listen}"))?;
        std_listener.set_nonblocking(true)?;
        let port = std_listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            mode: watch::channel(Mode::Pass).0,
            generation: watch::channel(0).0,
            connections: AtomicU64::new(0),
            cuts: AtomicU64::new(0),
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{port}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("fault proxy runtime");
                rt.block_on(async move {
                    let listener = TcpListener::from_std(std_listener).expect("listener");
                    let accept = async {
                        loop {
                            let Ok((client, _)) = listener.accept().await else {
                                continue;
                            };
                            let s = s.clone();
                            tokio::spawn(async move {
                                if let Ok(server) = TcpStream::connect(upstream).await {
                                    s.connections.fetch_add(1, Ordering::Relaxed);
                                    connection(client, server, s).await;
                                }
                            });
                        }
                    };
                    tokio::select! {
                        _ = accept => {}
                        _ = stop_rx => {}
                    }
                });
                rt.shutdown_timeout(Duration::from_millis(100));
            })?;
        Ok(FaultProxy {
            port,
            shared,
            stop: Mutex::new(Some(stop_tx)),
            thread: Some(thread),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Closes every open connection now.
    pub fn cut(&self) {
        self.shared.cuts.fetch_add(1, Ordering::Relaxed);
        self.shared.generation.send_modify(|g| *g += 1);
    }

    /// Stops (true) or resumes (false) moving bytes.
    pub fn stall(&self, on: bool) {
        let _ = self
            .shared
            .mode
            .send(if on { Mode::Stall } else { Mode::Pass });
    }

    /// Delays every forwarded chunk by `delay` (None: full speed again).
    pub fn slow(&self, delay: Option<Duration>) {
        let _ = self.shared.mode.send(delay.map_or(Mode::Pass, Mode::Slow));
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(s) = self.stop.lock().unwrap().take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn connection(client: TcpStream, server: TcpStream, s: Arc<Shared>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let mut cut = s.generation.subscribe();
    cut.borrow_and_update();
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pump(cr, sw, s.mode.subscribe());
    let down = pump(sr, cw, s.mode.subscribe());
    // Either direction ending (a peer closed), or a cut, ends both: the halves drop.
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = cut.changed() => {}
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        // Stalled: read nothing (the sender's buffers fill up) until the mode changes.
        while *mode.borrow_and_update() == Mode::Stall {
            if mode.changed().await.is_err() {
                return;
            }
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Stalled while the read was pending: hold the bytes until it resumes.
        loop {
            let m = *mode.borrow_and_update();
            match m {
                Mode::Stall => {
                    if mode.changed().await.is_err() {
                        return;
                    }
                }
                Mode::Slow(d) => {
                    tokio::time::sleep(d).await;
                    break;
                }
                Mode::Pass => break,
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
