//! A TCP relay to the API server that a test can stall: after `stall()`,
//! every connection, open or new, stays open and carries nothing, which is
//! what a client sees when the API server's host stops answering (the worst
//! case for shutdown: nothing fails, everything waits).

use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The relay; stops (closing every connection) when dropped.
pub struct StallableRelay {
    /// `127.0.0.1:<port>` to dial instead of the API server.
    pub addr: String,
    stalled: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl StallableRelay {
    /// Relays 127.0.0.1:<free port> to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let addr = listener.local_addr().expect("relay address").to_string();
        let (tx, rx) = watch::channel(false);
        let upstream = upstream.to_string();
        let task = tokio::spawn(async move {
            // Connections held, not closed, once stalled.
            let mut held: Vec<TcpStream> = Vec::new();
            let (held_tx, mut held_rx) = tokio::sync::mpsc::unbounded_channel();
            loop {
                tokio::select! {
                    Ok((client, _)) = listener.accept() => {
                        let rx = rx.clone();
                        let upstream = upstream.clone();
                        let held_tx = held_tx.clone();
                        tokio::spawn(relay(client, upstream, rx, held_tx));
                    }
                    Some(s) = held_rx.recv() => held.push(s),
                }
            }
        });
        StallableRelay {
            addr,
            stalled: Arc::new(tx),
            task,
        }
    }

    /// From now on nothing passes, in either direction, on any connection.
    pub fn stall(&self) {
        let _ = self.stalled.send(true);
    }
}

impl Drop for StallableRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(
    mut client: TcpStream,
    upstream: String,
    mut stalled: watch::Receiver<bool>,
    held: tokio::sync::mpsc::UnboundedSender<TcpStream>,
) {
    if *stalled.borrow() {
        let _ = held.send(client);
        return;
    }
    let Ok(mut server) = TcpStream::connect(&upstream).await else {
        let _ = client.shutdown().await;
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = stalled.wait_for(|s| *s) => {
            let _ = held.send(client);
            let _ = held.send(server);
        }
    }
}
