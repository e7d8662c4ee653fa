//! What every command runs in: the log subscriber and the Tokio runtime. Shared by the
//! `likewise` commands and `likewise bench`.

/// Set up logging once (level from the config, `RUST_LOG` wins).
pub fn init_logging(level: &str) {
    init_logging_with(level, None);
}

/// Set up logging once, with `traces` (the trace export's layer, `crate::telemetry`) beside
/// the log lines. The log filter applies to log lines only, so a `warn` level still exports
/// every span, and the spans of the trace export never appear in log lines.
pub fn init_logging_with(
    level: &str,
    traces: Option<Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync>>,
) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    // fjall and lsm-tree log every flush at info: keep them at warn unless asked.
    let filter = filter
        .add_directive("fjall=warn".parse().unwrap_or_default())
        .add_directive("lsm_tree=warn".parse().unwrap_or_default())
        .add_directive(format!("{}=off", likewise_core::trace::TARGET).parse().unwrap_or_default());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let lines = tracing_subscriber::fmt::layer()
        .with_target(false)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let _ = tracing_subscriber::registry().with(traces).with(lines).try_init();
}

/// A multi-threaded runtime for a command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

/// A serving command's logging and, when `telemetry.otlp_endpoint` is set, its trace export
/// on `rt`. Call [`Traces::shutdown`] on a clean stop, so queued spans are sent.
pub fn init_observability(
    cfg: &crate::config::Config,
    rt: &tokio::runtime::Handle,
) -> anyhow::Result<Traces> {
    #[cfg(feature = "otlp")]
    {
        let started = crate::telemetry::Telemetry::start(&cfg.telemetry, rt)?;
        let (telemetry, layer) = started.map_or((None, None), |(t, l)| (Some(t), Some(l)));
        init_logging_with(&cfg.log.level, layer);
        if let Some(url) = cfg.telemetry.traces_url()? {
            tracing::info!(url = %likewise_core::redact::redact(&url.to_string()), sample_ratio = cfg.telemetry.sample_ratio, "exporting traces");
        }
        Ok(Traces(telemetry))
    }
    #[cfg(not(feature = "otlp"))]
    {
        let _ = rt;
        init_logging(&cfg.log.level);
        Ok(Traces(None))
    }
}

/// The trace export of a serving command (nothing when traces are off).
#[cfg(feature = "otlp")]
pub struct Traces(Option<crate::telemetry::Telemetry>);
/// The trace export of a serving command (nothing: this build has none).
#[cfg(not(feature = "otlp"))]
pub struct Traces(Option<std::convert::Infallible>);

impl Traces {
    /// Send the spans still queued, then stop exporting.
    pub async fn shutdown(self) {
        #[cfg(feature = "otlp")]
        if let Some(t) = self.0 {
            t.shutdown().await;
        }
    }
}
