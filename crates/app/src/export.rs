//! The export destination named by `[export]`: Kafka when `kafka_brokers` is set (feature
//! `kafka`), nothing otherwise.

use crate::config::ExportConfig;
use likewise_workers::export::{Export, ExportOptions};

/// The configured export, or None when no destination is configured.
pub fn from_config(cfg: &ExportConfig) -> anyhow::Result<Option<Export>> {
    let Some(brokers) = cfg.kafka_brokers.as_deref().filter(|b| !b.trim().is_empty()) else {
        return Ok(None);
    };
    let opts = ExportOptions { batch: cfg.batch.clamp(1, 100_000), ..ExportOptions::default() };
    kafka(cfg, brokers).map(|sink| Some(Export { sink, opts }))
}

#[cfg(feature = "kafka")]
fn kafka(
    cfg: &ExportConfig,
    brokers: &str,
) -> anyhow::Result<std::sync::Arc<dyn likewise_workers::export::Sink>> {
    use likewise_workers::export::kafka::{KafkaOptions, KafkaSink};
    if cfg.kafka_topic.trim().is_empty() {
        anyhow::bail!("export.kafka_topic is empty");
    }
    let sink = KafkaSink::new(&KafkaOptions {
        brokers: brokers.to_string(),
        topic: cfg.kafka_topic.clone(),
        message_timeout: std::time::Duration::from_millis(cfg.kafka_message_timeout_ms.max(1_000)),
        extra: cfg.kafka_options.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
    })
    .map_err(|e| anyhow::anyhow!("export.kafka_brokers = {brokers:?}: {e}"))?;
    Ok(std::sync::Arc::new(sink))
}

#[cfg(not(feature = "kafka"))]
fn kafka(_: &ExportConfig, _: &str) -> anyhow::Result<std::sync::Arc<dyn likewise_workers::export::Sink>> {
    anyhow::bail!(
        "export.kafka_brokers is set, but this likewise was built without the `kafka` feature; \
         build it with `--features kafka` (on by default) or remove the setting"
    )
}
