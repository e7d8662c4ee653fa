//! Distributed tracing without a tracing backend in the domain: the W3C trace context an
//! event carries from the request that wrote it to the consumers that read it, and the one
//! hook through which the binary (when `telemetry.otlp_endpoint` is set) reads the current
//! request's context and parents a span on an event's.
//!
//! Nothing is installed by default: [`enabled`] is one atomic load, [`current`] answers
//! `None`, [`span`] answers a disabled span, and events are written without a context, so
//! untraced deployments pay nothing and store not one byte more.

use std::sync::OnceLock;

/// The target of every span this crate's hook exports: the log subscriber leaves it out of
/// log lines, the trace exporter takes only it.
pub const TARGET: &str = "likewise_trace";

/// Most links a batch span keeps to the traces of the events it holds besides its parent's.
pub const MAX_LINKS: usize = 32;

/// A W3C trace context (`traceparent`): the trace, the span the event was written under, and
/// its flags. Only sampled contexts are carried in events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// The trace ID (never all zeros).
    pub trace_id: [u8; 16],
    /// The parent span ID (never all zeros).
    pub span_id: [u8; 8],
    /// Trace flags; bit 0: sampled.
    pub flags: u8,
}

impl TraceContext {
    /// Length of the encoded form: trace ID, span ID, flags.
    pub const LEN: usize = 16 + 8 + 1;

    /// A context from its parts; `None` when either ID is all zeros (invalid in W3C).
    pub fn new(trace_id: [u8; 16], span_id: [u8; 8], flags: u8) -> Option<Self> {
        (trace_id != [0; 16] && span_id != [0; 8]).then_some(TraceContext { trace_id, span_id, flags })
    }

    /// Whether the trace is sampled (flag bit 0).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The encoded form: trace ID, span ID, flags.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..16].copy_from_slice(&self.trace_id);
        b[16..24].copy_from_slice(&self.span_id);
        b[24] = self.flags;
        b
    }

    /// Decode [`TraceContext::encode`]'s form.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let b: &[u8; Self::LEN] = b.try_into().ok()?;
        let mut t = [0u8; 16];
        let mut s = [0u8; 8];
        t.copy_from_slice(&b[..16]);
        s.copy_from_slice(&b[16..24]);
        Self::new(t, s, b[24])
    }

    /// Parse a `traceparent` header (W3C Trace Context): `00-<32 hex>-<16 hex>-<2 hex>`, in
    /// lowercase. A later version (not `ff`) is read by its first four fields, as the
    /// standard asks, and may carry more after a `-`; anything else is `None` (the request
    /// then starts a trace of its own).
    pub fn from_traceparent(h: &str) -> Option<Self> {
        let h = h.trim();
        let (v, t, s, f) = (h.get(..2)?, h.get(3..35)?, h.get(36..52)?, h.get(53..55)?);
        let dashes = [2, 35, 52].iter().all(|&i| h.as_bytes()[i] == b'-');
        let rest = &h[55..];
        let rest_ok = match v {
            "00" => rest.is_empty(),
            "ff" => false,
            _ => rest.is_empty() || rest.starts_with('-'),
        };
        if !dashes || !rest_ok || !v.bytes().all(is_lower_hex) {
            return None;
        }
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        hex_into(t, &mut trace_id)?;
        hex_into(s, &mut span_id)?;
        let mut flags = [0u8; 1];
        hex_into(f, &mut flags)?;
        Self::new(trace_id, span_id, flags[0])
    }

    /// The trace ID as 32 lowercase hex digits (as OTLP tools show it).
    pub fn trace_hex(&self) -> String {
        self.trace_id.iter().map(|b| format!("{b:02x}")).collect()
    }
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// Lowercase hex digits into `out` (W3C trace context forbids uppercase).
fn hex_into(s: &str, out: &mut [u8]) -> Option<()> {
    let digits = s.as_bytes();
    if digits.len() != 2 * out.len() || !digits.iter().all(|&b| is_lower_hex(b)) {
        return None;
    }
    for (i, o) in out.iter_mut().enumerate() {
        let hi = (digits.get(2 * i)?.to_ascii_lowercase() as char).to_digit(16)?;
        let lo = (digits.get(2 * i + 1)?.to_ascii_lowercase() as char).to_digit(16)?;
        *o = (hi * 16 + lo) as u8;
    }
    Some(())
}

/// What the binary's trace exporter provides.
pub trait Tracer: Send + Sync + 'static {
    /// The context of the current span, when it is sampled.
    fn current(&self) -> Option<TraceContext>;
    /// Make `parent` the parent of `span` (not yet entered) and link it to `links`.
    fn adopt(&self, span: &tracing::Span, parent: TraceContext, links: &[TraceContext]);
    /// Whether a new trace (a request without a caller's context) is sampled.
    fn sample_root(&self) -> bool;
}

static TRACER: OnceLock<Box<dyn Tracer>> = OnceLock::new();

/// Install the process's tracer (once; later calls are ignored).
pub fn install(t: Box<dyn Tracer>) {
    let _ = TRACER.set(t);
}

/// Whether traces are exported at all.
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// The current span's context when traces are exported and it is sampled.
pub fn current() -> Option<TraceContext> {
    TRACER.get().and_then(|t| t.current())
}

/// A request's span (`make` builds it), continuing the caller's trace when `parent` is given
/// (a `traceparent` header); disabled when traces are not exported.
///
/// The sampling decision is taken here, before the span exists: a caller's context decides
/// for its trace (sampled or not), and a new trace is sampled at the configured ratio. An
/// unsampled request so builds no span at all: with a low ratio, tracing costs next to
/// nothing on the requests it does not record.
pub fn request_span(parent: Option<TraceContext>, make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    match TRACER.get() {
        Some(t) => request_span_with(&**t, parent, make),
        None => tracing::Span::none(),
    }
}

fn request_span_with(
    t: &dyn Tracer,
    parent: Option<TraceContext>,
    make: impl FnOnce() -> tracing::Span,
) -> tracing::Span {
    let sampled = match parent {
        Some(p) => p.sampled(),
        None => t.sample_root(),
    };
    if !sampled {
        return tracing::Span::none();
    }
    let span = make();
    if let Some(p) = parent {
        t.adopt(&span, p, &[]);
    }
    span
}

/// The span of one unit of work that serves the traced contexts in `contexts` (a group
/// commit round, a consumer's batch): a child of the first, linked to the next
/// [`MAX_LINKS`]. Disabled when nothing is traced or none of them is, so untraced work
/// creates no span. `make` builds the span (its name and fields).
pub fn span(
    contexts: impl IntoIterator<Item = TraceContext>,
    make: impl FnOnce() -> tracing::Span,
) -> tracing::Span {
    let Some(t) = TRACER.get() else { return tracing::Span::none() };
    let mut contexts = contexts.into_iter();
    let Some(parent) = contexts.next() else { return tracing::Span::none() };
    let mut links: Vec<TraceContext> = Vec::new();
    for c in contexts {
        if links.len() == MAX_LINKS {
            break;
        }
        if c.trace_id != parent.trace_id && !links.iter().any(|l| l.trace_id == c.trace_id) {
            links.push(c);
        }
    }
    let span = make();
    t.adopt(&span, parent, &links);
    span
}

/// The span of a consumer's `consumer` batch of `events` (see [`span`]): a child of the first
/// traced event's request, disabled when none is traced.
pub fn consumer_span(consumer: &'static str, events: &[crate::event::Event]) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    span(
        events.iter().filter_map(|e| e.trace),
        || tracing::info_span!(target: TARGET, "consumer.batch", otel.name = consumer, consumer, events = events.len() as i64),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_headers_parse_and_bad_ones_do_not() {
        let c = TraceContext::from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("valid");
        assert_eq!(c.trace_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(c.span_id, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        assert!(c.sampled());
        assert_eq!(TraceContext::decode(&c.encode()), Some(c));
        // A later version is read by its first four fields.
        for later in [
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds",
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceContext::from_traceparent(later), Some(c), "{later}");
        }
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "02-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0é",
        ] {
            assert_eq!(TraceContext::from_traceparent(bad), None, "{bad}");
        }
    }

    /// A tracer that samples new traces when told to, and counts the spans it adopts.
    struct Coin(bool, std::sync::atomic::AtomicUsize);

    impl Tracer for Coin {
        fn current(&self) -> Option<TraceContext> {
            None
        }
        fn adopt(&self, _: &tracing::Span, _: TraceContext, _: &[TraceContext]) {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        fn sample_root(&self) -> bool {
            self.0
        }
    }

    #[test]
    fn an_unsampled_request_makes_no_span() {
        let sampled = TraceContext::new([1; 16], [2; 8], 1);
        let unsampled = TraceContext::new([1; 16], [2; 8], 0);
        for (coin, parent, made) in
            [(false, None, false), (true, None, true), (false, sampled, true), (true, unsampled, false)]
        {
            let t = Coin(coin, Default::default());
            let mut built = false;
            let _ = request_span_with(&t, parent, || {
                built = true;
                tracing::Span::none()
            });
            assert_eq!(built, made, "coin {coin}, parent {parent:?}");
            let adopted = t.1.load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(adopted, usize::from(made && parent.is_some()), "coin {coin}, parent {parent:?}");
        }
    }

    #[test]
    fn nothing_is_traced_without_a_tracer() {
        assert!(!enabled());
        assert_eq!(current(), None);
        let c = TraceContext::new([1; 16], [2; 8], 1);
        assert!(span(c, || tracing::info_span!(target: TARGET, "x")).is_none());
    }
}
