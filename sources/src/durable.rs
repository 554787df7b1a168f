//! The one acknowledgement path: how far the log is durable, from the pipeline to the
//! source.
//!
//! The pipeline holds the [`DurablePublisher`]; after each flush that made a checkpoint
//! durable it publishes that checkpoint. A source holds a [`Durable`] handle and maps
//! what it says to its own position (an LSN, a GTID set, a binlog file + offset) when it
//! acknowledges to its database.
//!
//! Invariants: the published checkpoint only moves forward (the pipeline publishes in
//! commit order, one flush after another); a reader never sees a checkpoint whose records
//! are not durable; a reader sees the newest value, not every value (intermediate ones
//! may be skipped, which is safe: acknowledging the newest covers them).

use cdc_schemas::{Checkpoint, SourcePosition};
use tokio::sync::watch;

/// The pipeline's side: publishes checkpoints once they are durable.
#[derive(Debug)]
pub struct DurablePublisher(watch::Sender<Option<Checkpoint>>);

/// The source's side: "durable up to". Cheap to clone.
#[derive(Clone, Debug)]
pub struct Durable(watch::Receiver<Option<Checkpoint>>);

/// The pipeline is gone: nothing more will become durable in this attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the pipeline stopped")]
pub struct PipelineGone;

impl DurablePublisher {
    /// A publisher and its first handle, starting at the checkpoint already durable.
    pub fn new(initial: Option<Checkpoint>) -> (DurablePublisher, Durable) {
        let (tx, rx) = watch::channel(initial);
        (DurablePublisher(tx), Durable(rx))
    }

    /// `checkpoint` and every record before it are durable.
    pub fn publish(&self, checkpoint: Checkpoint) {
        self.0.send_replace(Some(checkpoint));
    }

    /// Another handle for a reader (a metrics task, a second consumer).
    pub fn subscribe(&self) -> Durable {
        Durable(self.0.subscribe())
    }
}

impl Durable {
    /// The newest durable checkpoint.
    pub fn latest(&self) -> Option<Checkpoint> {
        self.0.borrow().clone()
    }

    /// The newest durable position mapped by `f` (None while nothing is durable, while a
    /// snapshot is incomplete, or when `f` says the position is not of its kind).
    pub fn position_with<T>(&self, f: impl FnOnce(&SourcePosition) -> Option<T>) -> Option<T> {
        match &*self.0.borrow() {
            Some(Checkpoint::At(p)) => f(p),
            _ => None,
        }
    }

    /// Waits until a newer checkpoint is published (returns at once if one was published
    /// since the last call).
    pub async fn changed(&mut self) -> Result<(), PipelineGone> {
        self.0.changed().await.map_err(|_| PipelineGone)
    }

    /// Waits until `done` holds for the durable checkpoint, or the pipeline is gone.
    pub async fn wait_for(
        &mut self,
        mut done: impl FnMut(Option<&Checkpoint>) -> bool,
    ) -> Result<(), PipelineGone> {
        self.0
            .wait_for(|c| done(c.as_ref()))
            .await
            .map(|_| ())
            .map_err(|_| PipelineGone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_schemas::{Lsn, PgPosition};

    fn at(lsn: u64) -> Checkpoint {
        Checkpoint::At(SourcePosition::Postgres(PgPosition {
            commit_lsn: Lsn(lsn),
            lsn: Lsn(lsn),
            ..Default::default()
        }))
    }

    fn lsn(p: &SourcePosition) -> Option<Lsn> {
        match p {
            SourcePosition::Postgres(p) => Some(p.lsn),
            _ => None,
        }
    }

    #[tokio::test]
    async fn readers_see_the_newest_and_map_it() {
        let (publisher, mut d) = DurablePublisher::new(Some(Checkpoint::SnapshotIncomplete));
        assert_eq!(d.position_with(lsn), None);
        publisher.publish(at(10));
        publisher.publish(at(20));
        d.changed().await.unwrap();
        assert_eq!(d.position_with(lsn), Some(Lsn(20)));
        let mut other = publisher.subscribe();
        let waiter = tokio::spawn(async move {
            other
                .wait_for(|c| c.and_then(|c| c.position()).and_then(lsn) >= Some(Lsn(30)))
                .await
        });
        publisher.publish(at(30));
        waiter.await.unwrap().unwrap();
        drop(publisher);
        d.changed().await.unwrap(); // 30, not yet seen by `d`
        assert_eq!(d.changed().await, Err(PipelineGone));
    }
}
