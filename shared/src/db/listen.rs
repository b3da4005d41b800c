//! A dedicated connection that `LISTEN`s on one channel, outside the pool: a
//! pooled connection's notifications are never read, and a listening one
//! must not be handed to other work.
//!
//! A notification only wakes whoever waits on the [`Listener`]; what it
//! means, and what to do when notifications stop, is the caller's business.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tokio_postgres::{AsyncMessage, Connection, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::error::DbResult;

/// Opens connections with the pool's settings and TLS ([`super::DbConfig::connector`]).
#[derive(Clone)]
pub struct Connector {
    pub(super) pg: tokio_postgres::Config,
    pub(super) tls: Option<MakeRustlsConnect>,
}

/// A live `LISTEN`: [`Listener::wait`] returns early when a notification
/// arrives. One that arrives while nobody waits is kept for the next wait.
pub struct Listener {
    _client: tokio_postgres::Client,
    woken: Arc<Notify>,
    alive: Arc<AtomicBool>,
}

impl Connector {
    /// Opens a connection and `LISTEN`s on `channel` (a plain identifier).
    pub async fn listen(&self, channel: &str) -> DbResult<Listener> {
        let woken = Arc::new(Notify::new());
        let alive = Arc::new(AtomicBool::new(true));
        let client = match &self.tls {
            None => {
                let (client, conn) = self.pg.connect(NoTls).await?;
                drive(conn, woken.clone(), alive.clone());
                client
            }
            Some(tls) => {
                let (client, conn) = self.pg.connect(tls.clone()).await?;
                drive(conn, woken.clone(), alive.clone());
                client
            }
        };
        client.batch_execute(&format!("LISTEN \"{}\"", channel.replace('"', "\"\""))).await?;
        Ok(Listener { _client: client, woken, alive })
    }
}

impl Listener {
    /// Waits up to `timeout` for a notification; true if one came (or the
    /// connection ended, which [`Listener::is_alive`] then reports).
    pub async fn wait(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.woken.notified()).await.is_ok()
    }

    /// False once the connection has ended: no notification will come.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }
}

/// Reads the connection's messages until it ends: each notification wakes
/// the waiter. The connection closes when the [`Listener`] is dropped.
fn drive<S, T>(mut conn: Connection<S, T>, woken: Arc<Notify>, alive: Arc<AtomicBool>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(_))) => woken.notify_one(),
                Some(Ok(_)) => {} // a notice
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "the LISTEN connection failed");
                    break;
                }
                None => break,
            }
        }
        alive.store(false, Ordering::SeqCst);
        woken.notify_one();
    });
}
