//! The source position stored in Kafka: `<name>.offsets` (one partition, compacted), one
//! record per commit, keyed by the connector's name, valued with the checkpoint's bytes
//! (the same JSON the embedded log's ledger holds). Written by [`KafkaLog::commit`] in the
//! transaction of the records it covers; read back here on start.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::ClientContext;
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::error::KafkaLogError;
use crate::log::KafkaLog;
use crate::settings::KafkaSettings;

impl KafkaLog {
    /// The last committed position of this connector, `None` before its first commit.
    /// Reads `<name>.offsets` from its start with `read_committed` (after `connect`
    /// aborted any transaction a crashed producer left open, so the end is reachable).
    /// Blocking.
    pub fn checkpoint(&self) -> Result<Option<Vec<u8>>, KafkaLogError> {
        read_checkpoint(&self.settings, self.offsets_topic(), self.offsets_key())
    }
}

/// The last position connector `name` committed to Kafka, read without a producer (so
/// without fencing the connector's): for `cdc verify` beside a running `cdc run`. A
/// transaction the connector has open is not waited for (`read_committed` stops before
/// it only at its end; the partition's end is where the committed records end). Blocking.
pub fn committed_checkpoint(
    settings: &KafkaSettings,
    name: &str,
) -> Result<Option<Vec<u8>>, KafkaLogError> {
    read_checkpoint(settings, &crate::log::offsets_topic(name), name.as_bytes())
}

fn read_checkpoint(
    settings: &KafkaSettings,
    topic: &str,
    key: &[u8],
) -> Result<Option<Vec<u8>>, KafkaLogError> {
    let tid = &settings.transactional_id;
    let consumer: BaseConsumer<QuietEof> = settings
        .reader(&format!("{tid}.offsets-reader"))
        .create_with_context(QuietEof)
        .map_err(KafkaLogError::Config)?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .map_err(|e| KafkaLogError::from_kafka("offsets read", e, tid))?;
    consumer
        .assign(&tpl)
        .map_err(|e| KafkaLogError::from_kafka("offsets read", e, tid))?;
    let deadline = Instant::now() + settings.timeout;
    let mut last: Option<Vec<u8>> = None;
    loop {
        match consumer.poll(Duration::from_millis(100)) {
            // A tombstone forgets the position: a reset by an operator.
            Some(Ok(m)) if m.key() == Some(key) => last = m.payload().map(<[u8]>::to_vec),
            Some(Ok(_)) => {}
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(last),
            // Before the connector's first commit there is no such topic yet.
            Some(Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::UnknownTopicOrPartition,
            ))) => return Ok(None),
            Some(Err(e)) => return Err(KafkaLogError::from_kafka("offsets read", e, tid)),
            None if Instant::now() >= deadline => {
                return Err(KafkaLogError::Transient {
                    what: "offsets read",
                    source: KafkaError::MessageConsumption(RDKafkaErrorCode::OperationTimedOut),
                })
            }
            None => {}
        }
    }
}

/// The reader's context: the end of the partition is what it waits for, not an error
/// worth a log line (librdkafka also reports it as a global error).
pub(crate) struct QuietEof;

impl ClientContext for QuietEof {
    fn error(&self, error: KafkaError, reason: &str) {
        let eof = match &error {
            KafkaError::PartitionEOF(_) => true,
            KafkaError::Global(code) => *code == rdkafka::error::RDKafkaErrorCode::PartitionEOF,
            _ => false,
        };
        if !eof {
            tracing::warn!(%error, reason, "Kafka client error while reading the stored position");
        }
    }
}

impl ConsumerContext for QuietEof {}
