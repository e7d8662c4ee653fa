//! What every command runs in: the log subscriber and the Tokio runtime. Shared by the
//! `likewise` commands and `likewise bench`.

/// Set up logging once (level from the config, `RUST_LOG` wins).
pub fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    // fjall and lsm-tree log every flush at info: keep them at warn unless asked.
    let filter = filter
        .add_directive("fjall=warn".parse().unwrap_or_default())
        .add_directive("lsm_tree=warn".parse().unwrap_or_default());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}

/// A multi-threaded runtime for a command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}
