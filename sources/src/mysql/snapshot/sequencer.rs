//! The order and markers of the snapshot's records (see the parent module's "Markers and
//! order"): every reader sends through one [`Sequencer`], which holds back the records
//! that may still become a table's or the snapshot's last.

use super::*;

/// Per table: what the sequencer knows.
pub(super) struct TableSeq {
    id: TableId,
    chunks_left: usize,
    seen: bool,
    rows: u64,
    /// The newest record read, not sent yet: it may be the table's last.
    held: Option<ChangeEvent>,
}

pub(super) struct SeqState {
    first_sent: bool,
    tables: Vec<TableSeq>,
    /// The `last_in_data_collection` record of the table completed most recently, not
    /// sent yet: it may be the snapshot's last.
    tail: Option<ChangeEvent>,
}

/// The one way snapshot records reach the pipeline; assigns the markers (see the module
/// documentation). Sending happens under its lock: the channel is the only order.
pub(super) struct Sequencer {
    out: mpsc::Sender<ChangeBatch>,
    state: tokio::sync::Mutex<SeqState>,
    /// The first table not read completely yet: a table's records wait until every
    /// table before it is done, so tables go out in their order (Debezium's, which its
    /// markers assume) while the chunks of one table are read in parallel.
    front: tokio::sync::watch::Sender<usize>,
    progress: Option<Arc<SnapshotProgress>>,
    /// Checked after each batch: a shutdown stops the snapshot (it starts over next time).
    shutdown: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Sequencer {
    pub(super) fn new(
        out: mpsc::Sender<ChangeBatch>,
        tables: Vec<TableId>,
        chunks: Vec<usize>,
        progress: Arc<SnapshotProgress>,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        let mut s = Sequencer::unobserved(out, tables, chunks);
        s.progress = Some(progress);
        s.shutdown = Some(shutdown);
        s
    }

    pub(super) fn unobserved(
        out: mpsc::Sender<ChangeBatch>,
        tables: Vec<TableId>,
        chunks: Vec<usize>,
    ) -> Self {
        Sequencer {
            out,
            state: tokio::sync::Mutex::new(SeqState {
                first_sent: false,
                tables: tables
                    .into_iter()
                    .zip(chunks)
                    .map(|(id, chunks_left)| TableSeq {
                        id,
                        chunks_left,
                        seen: false,
                        rows: 0,
                        held: None,
                    })
                    .collect(),
                tail: None,
            }),
            front: tokio::sync::watch::Sender::new(0),
            progress: None,
            shutdown: None,
        }
    }

    /// Sends `events` (rows of table `table` in read order, `bytes` their
    /// [`ChangeEvent::approx_size`]), holding the newest back.
    pub(super) async fn emit(
        &self,
        table: usize,
        mut events: Vec<ChangeEvent>,
        bytes: u64,
    ) -> Result<(), SourceError> {
        if events.is_empty() {
            return Ok(());
        }
        let n = events.len();
        // Chunks are handed out in table order, so the readers of earlier tables are not
        // waiting here: the front always advances.
        let mut front = self.front.subscribe();
        front
            .wait_for(|&f| f >= table)
            .await
            .map_err(|_| SourceError::transient("snapshot", "the snapshot stopped"))?;
        let mut guard = self.state.lock().await;
        let st = &mut *guard;
        let t = &mut st.tables[table];
        if !t.seen {
            t.seen = true;
            events[0].snapshot = SnapshotMarker::FirstInDataCollection;
        }
        t.rows += n as u64;
        let newest = events.pop();
        let bytes = bytes.saturating_sub(newest.as_ref().map_or(0, |e| e.approx_size() as u64));
        // The records held back so far go first, as a batch of their own: prepending them
        // would move every event of the batch.
        let mut front = Vec::new();
        front.extend(st.tail.take());
        front.extend(std::mem::replace(&mut t.held, newest));
        if let Some(p) = &self.progress {
            p.add_rows(n as u64);
        }
        if !front.is_empty() {
            self.send(st, front, 0).await?;
        }
        self.send(st, events, bytes).await
    }

    /// One chunk of `table` is read completely.
    pub(super) async fn chunk_done(&self, table: usize) -> Result<(), SourceError> {
        let mut guard = self.state.lock().await;
        let st = &mut *guard;
        let t = &mut st.tables[table];
        t.chunks_left = t.chunks_left.saturating_sub(1);
        if t.chunks_left > 0 {
            return Ok(());
        }
        let last = t.held.take();
        let next = st
            .tables
            .iter()
            .position(|t| t.chunks_left > 0)
            .unwrap_or(st.tables.len());
        self.front.send_replace(next);
        let t = &mut st.tables[table];
        tracing::info!(table = %t.id, rows = t.rows, "table snapshot read");
        if let Some(p) = &self.progress {
            p.table_done();
        }
        let Some(mut last) = last else {
            return Ok(());
        };
        last.snapshot = SnapshotMarker::LastInDataCollection;
        match st.tail.replace(last) {
            Some(previous) => self.send(st, vec![previous], 0).await,
            None => Ok(()),
        }
    }

    /// Every table is read: the held record is the snapshot's last.
    pub(super) async fn finish(&self) -> Result<(), SourceError> {
        let mut guard = self.state.lock().await;
        let st = &mut *guard;
        match st.tail.take() {
            Some(mut last) => {
                last.snapshot = SnapshotMarker::Last;
                self.send(st, vec![last], 0).await
            }
            None => Ok(()),
        }
    }

    pub(super) async fn send(
        &self,
        st: &mut SeqState,
        mut events: Vec<ChangeEvent>,
        approx_bytes: u64,
    ) -> Result<(), SourceError> {
        let Some(first) = events.first_mut() else {
            return Ok(());
        };
        if !st.first_sent {
            st.first_sent = true;
            if first.snapshot != SnapshotMarker::Last {
                first.snapshot = SnapshotMarker::First;
            }
        }
        send(
            &self.out,
            ChangeBatch {
                events,
                commit: None,
                approx_bytes,
                snapshot: None,
            },
        )
        .await
        .map_err(|_| SourceError::transient("snapshot", "the pipeline stopped"))?;
        if self.shutdown.as_ref().is_some_and(|s| *s.borrow()) {
            return Err(SourceError::transient(
                "snapshot",
                "stopped by the shutdown; it starts over on the next run",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_schemas::{Column, ColumnType, TableSchema, Value};

    fn ev(t: &Arc<TableSchema>, id: i32) -> ChangeEvent {
        ChangeEvent::read(
            t.clone(),
            Row::new(vec![Value::Int32(id)]),
            SourcePosition::Mysql(MySqlPosition::default()),
            0,
        )
        .unwrap()
    }

    /// The records sent when `tables` (each a list of chunks of rows) are read, chunk
    /// after chunk, in batches of at most `max`.
    async fn run(tables: Vec<Vec<Vec<i32>>>, max: usize) -> Vec<(i32, SnapshotMarker)> {
        let t = Arc::new(
            TableSchema::new(
                TableId::new("d", "t"),
                vec![Column::new("id", ColumnType::Int32, "int")],
                &["id"],
            )
            .unwrap(),
        );
        let (tx, mut rx) = mpsc::channel(1000);
        let ids = tables.iter().map(|_| TableId::new("d", "t")).collect();
        let chunks = tables.iter().map(Vec::len).collect();
        let seq = Sequencer::unobserved(tx, ids, chunks);
        for (i, chunks) in tables.into_iter().enumerate() {
            for rows in chunks {
                for part in rows.chunks(max) {
                    let evs = part.iter().map(|&r| ev(&t, r)).collect();
                    seq.emit(i, evs, 0).await.unwrap();
                }
                seq.chunk_done(i).await.unwrap();
            }
        }
        seq.finish().await.unwrap();
        drop(seq);
        let mut out = Vec::new();
        while let Some(b) = rx.recv().await {
            assert!(!b.events.is_empty() && b.events.len() <= max && b.commit.is_none());
            for e in b.events {
                let Value::Int32(i) = e.after.as_ref().unwrap().0[0] else {
                    unreachable!()
                };
                out.push((i, e.snapshot));
            }
        }
        out
    }

    use SnapshotMarker as M;

    #[tokio::test]
    async fn markers() {
        assert_eq!(
            run(
                vec![
                    vec![vec![1, 2], vec![3]],
                    vec![vec![]],
                    vec![vec![4]],
                    vec![vec![5, 6]]
                ],
                2
            )
            .await,
            vec![
                (1, M::First),
                (2, M::True),
                (3, M::LastInDataCollection),
                (4, M::LastInDataCollection),
                (5, M::FirstInDataCollection),
                (6, M::Last),
            ]
        );
        assert_eq!(run(vec![vec![vec![7]]], 10).await, vec![(7, M::Last)]);
        assert_eq!(
            run(vec![vec![vec![1]], vec![vec![], vec![2]]], 10).await,
            vec![(1, M::First), (2, M::Last)]
        );
        assert!(run(vec![vec![vec![]], vec![vec![]]], 10).await.is_empty());
    }
}
