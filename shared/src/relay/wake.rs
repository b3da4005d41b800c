//! Waking an idle poller when an event commits: the booking transaction
//! notifies [`events::CHANNEL`], and the poller waits on a dedicated
//! `LISTEN` connection instead of sleeping. The timed poll stays as the
//! fallback, for a lost notification and for an event whose backoff expires
//! (nothing notifies then).

use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use crate::db::{Connector, Listener};
use crate::outbox::events;

/// After a failed `LISTEN`, the poller falls back to timed polls for this long
/// before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

pub struct Wake {
    connector: Connector,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    listener: Option<Listener>,
    retry_at: Option<Instant>,
}

impl Wake {
    pub fn new(connector: Connector) -> Self {
        Self { connector, state: Mutex::new(State::default()) }
    }

    /// Waits up to `timeout`, returning as soon as an event commits. Opens
    /// (or reopens) the `LISTEN` connection first when there is none; a new
    /// one returns at once, since an event may have committed before it
    /// listened.
    pub async fn wait(&self, timeout: Duration) {
        let mut state = self.state.lock().await;
        if state.listener.as_ref().is_some_and(|l| !l.is_alive()) {
            tracing::warn!("the LISTEN connection ended; timed polls until it is back");
            state.listener = None;
        }
        if state.listener.is_none() && state.retry_at.is_none_or(|at| Instant::now() >= at) {
            match self.connector.listen(events::CHANNEL).await {
                Ok(listener) => {
                    state.listener = Some(listener);
                    state.retry_at = None;
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot LISTEN for new events; timed polls meanwhile");
                    state.retry_at = Some(Instant::now() + RETRY_AFTER);
                }
            }
        }
        match &state.listener {
            Some(listener) => {
                listener.wait(timeout).await;
            }
            None => tokio::time::sleep(timeout).await,
        }
    }
}
