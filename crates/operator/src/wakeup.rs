//! Reconciles asked for at a later time, unless the service was reconciled to
//! the end meanwhile.
//!
//! A reconcile that holds a new service's first status back (`settle.rs`) must
//! look again when the settle window ends, but only if nothing has written the
//! status by then: a requeue would reconcile every quickly started service once
//! more for nothing (at 1,000 services, 2.8 reconciles per service instead of
//! 2). So the hold registers a wake-up here, a reconcile that finishes without
//! holding cancels it, and only a wake-up still registered when its time comes
//! reaches the controller (as a trigger stream, `Controller::reconcile_on`).

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{Stream, channel::mpsc};
use kube::runtime::reflector::ObjectRef;
use vllmservice_api::VLLMService;

use crate::compact::Compact;

type Key = ObjectRef<Compact<VLLMService>>;

/// The registered wake-ups of one controller.
#[derive(Clone)]
pub struct Wakeups {
    pending: Arc<Mutex<HashSet<Key>>>,
    due: mpsc::UnboundedSender<Key>,
}

impl Wakeups {
    /// The wake-ups and the stream of those that came due (for `reconcile_on`).
    pub fn new() -> (Wakeups, impl Stream<Item = Key> + Send + 'static) {
        let (due, stream) = mpsc::unbounded();
        let wakeups = Wakeups {
            pending: Arc::default(),
            due,
        };
        (wakeups, stream)
    }

    /// Reconcile `key` after `delay` unless [`Wakeups::cancel`] comes first.
    pub fn after(&self, key: Key, delay: Duration) {
        self.pending
            .lock()
            .expect("wakeups lock")
            .insert(key.clone());
        let (pending, due) = (self.pending.clone(), self.due.clone());
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let still = pending.lock().expect("wakeups lock").remove(&key);
            if still {
                // The controller has stopped if nobody receives: nothing to wake.
                let _ = due.unbounded_send(key);
            }
        });
    }

    /// Forgets `key`'s wake-up, if it has one.
    pub fn cancel(&self, key: &Key) {
        self.pending.lock().expect("wakeups lock").remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn key(name: &str) -> Key {
        ObjectRef::new(name).within("ns")
    }

    fn registered(wakeups: &Wakeups) -> usize {
        wakeups.pending.lock().unwrap().len()
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_wakeups_not_cancelled_come_due_at_their_time() {
        let (wakeups, due) = Wakeups::new();
        let mut due = std::pin::pin!(due);
        wakeups.after(key("slow"), Duration::from_secs(5));
        wakeups.after(key("quick"), Duration::from_secs(5));
        wakeups.after(key("later"), Duration::from_secs(9));
        assert_eq!(registered(&wakeups), 3);
        wakeups.cancel(&key("quick"));
        let started = tokio::time::Instant::now();
        assert_eq!(due.next().await, Some(key("slow")));
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert_eq!(due.next().await, Some(key("later")));
        assert_eq!(started.elapsed(), Duration::from_secs(9));
        assert_eq!(registered(&wakeups), 0);
        // Nothing else comes: the cancelled one's timer found nothing to send.
        drop(wakeups);
        assert_eq!(due.next().await, None);
    }
}
