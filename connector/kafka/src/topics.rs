//! Topic administration: each topic the connector writes is checked (or created) once
//! per producer, before its first record ([`Admin`], which [`KafkaLog`] holds).

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use rdkafka::error::RDKafkaErrorCode;

use crate::error::KafkaLogError;
use rdkafka::admin::AdminClient;

use crate::log::{KafkaLog, Reports};
use crate::settings::KafkaSettings;
use crate::settings::TopicSpec;

/// An admin client of the cluster and the settings it was made with.
pub(crate) struct Admin {
    pub(crate) admin: AdminClient<Reports>,
    pub(crate) settings: KafkaSettings,
}

impl KafkaLog {
    /// See [`Admin::ensure_topic`].
    pub fn ensure_topic(&self, name: &str, spec: &TopicSpec) -> Result<u32, KafkaLogError> {
        self.admin.ensure_topic(name, spec)
    }

    /// See [`Admin::topics_with_records`].
    pub fn topics_with_records(&self, topics: &[String]) -> Result<Vec<String>, KafkaLogError> {
        self.admin.topics_with_records(topics)
    }
}

impl Admin {
    /// An admin client for `settings`' cluster.
    pub(crate) fn new(settings: &KafkaSettings) -> Result<Admin, KafkaLogError> {
        Ok(Admin {
            admin: settings
                .admin()
                .create_with_context(Reports::default())
                .map_err(KafkaLogError::Config)?,
            settings: settings.clone(),
        })
    }

    /// The partition count of topic `name`, which is created with `spec` if it does not
    /// exist. An existing topic with another partition count than `spec`'s is a definite
    /// error: the pipeline places keys by the configured count. Blocking.
    pub fn ensure_topic(&self, name: &str, spec: &TopicSpec) -> Result<u32, KafkaLogError> {
        if let Some(n) = self.partitions_of(name)? {
            return check(name, n, spec);
        }
        let mut topic = NewTopic::new(
            name,
            spec.partitions as i32,
            TopicReplication::Fixed(self.settings.replication_factor),
        );
        for (k, v) in &spec.configs {
            topic = topic.set(k, v);
        }
        let opts = AdminOptions::new().operation_timeout(Some(self.settings.timeout));
        let results = futures_executor::block_on(self.admin.create_topics([&topic], &opts))
            .map_err(|e| {
                KafkaLogError::from_kafka("topic creation", e, &self.settings.transactional_id)
            })?;
        for r in results {
            match r {
                Ok(_) => tracing::info!(topic = name, partitions = spec.partitions, replication_factor = self.settings.replication_factor, "created the Kafka topic"),
                // Created meanwhile by another connector or process: checked below.
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => {
                    return Err(KafkaLogError::Unsupported {
                        what: "topic creation",
                        detail: format!("creating {name:?} ({} partitions, replication factor {}, {:?}) was refused: {code}; create it yourself with those settings, or fix [log] partitions / replication_factor", spec.partitions, self.settings.replication_factor, spec.configs),
                    })
                }
            }
        }
        // The metadata of a new topic reaches every broker a little later.
        let deadline = Instant::now() + self.settings.timeout;
        loop {
            if let Some(n) = self.partitions_of(name)? {
                return check(name, n, spec);
            }
            if Instant::now() >= deadline {
                return Err(KafkaLogError::Unsupported {
                    what: "topic creation",
                    detail: format!(
                        "{name:?} was created but its metadata did not show it within {:?}",
                        self.settings.timeout
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The partition count of `name`, `None` if the cluster does not know it.
    fn partitions_of(&self, name: &str) -> Result<Option<u32>, KafkaLogError> {
        let md = self
            .admin
            .inner()
            .fetch_metadata(Some(name), self.settings.timeout)
            .map_err(|e| {
                KafkaLogError::from_kafka("metadata request", e, &self.settings.transactional_id)
            })?;
        let Some(t) = md.topics().iter().find(|t| t.name() == name) else {
            return Ok(None);
        };
        match t.error() {
            None if !t.partitions().is_empty() => Ok(Some(t.partitions().len() as u32)),
            None => Ok(None),
            Some(e) => match RDKafkaErrorCode::from(e) {
                RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic => {
                    Ok(None)
                }
                RDKafkaErrorCode::LeaderNotAvailable => Ok(None),
                code => Err(KafkaLogError::from_kafka(
                    "metadata request",
                    rdkafka::error::KafkaError::MetadataFetch(code),
                    &self.settings.transactional_id,
                )),
            },
        }
    }
}

fn check(name: &str, actual: u32, spec: &TopicSpec) -> Result<u32, KafkaLogError> {
    if actual != spec.partitions {
        return Err(KafkaLogError::PartitionMismatch {
            topic: name.to_string(),
            actual,
            configured: spec.partitions,
        });
    }
    Ok(actual)
}

impl Admin {
    /// Which of `topics` exist and hold records (a high watermark above its low one in
    /// some partition). Blocking.
    pub fn topics_with_records(&self, topics: &[String]) -> Result<Vec<String>, KafkaLogError> {
        let mut held = Vec::new();
        for name in topics {
            let Some(n) = self.partitions_of(name)? else {
                continue;
            };
            for p in 0..n {
                let (low, high) = self
                    .admin
                    .inner()
                    .fetch_watermarks(name, p as i32, self.settings.timeout)
                    .map_err(|e| {
                        KafkaLogError::from_kafka(
                            "watermarks request",
                            e,
                            &self.settings.transactional_id,
                        )
                    })?;
                if high > low {
                    held.push(name.clone());
                    break;
                }
            }
        }
        Ok(held)
    }
}
