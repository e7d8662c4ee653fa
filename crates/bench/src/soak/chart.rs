//! The chart of a run: RSS and what the memory rule judges, reads, writes and mean latency
//! over time, as one SVG of four panels.

use super::sampler::{Sample, series, unaccounted, unexplained};
use super::shared::{COMMENT, COMMENT_LIKE, COMMENTS, FEED, LIKE, READ_CLASSES};
use anyhow::Context;
use std::fmt::Write as _;
use std::path::Path;

/// Draw the chart and write it to `path`, creating its directory.
pub(super) fn write(path: &Path, samples: &[Sample], title: &str, subtitle: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let svg = render_svg(samples, title, subtitle);
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

fn nice_step(range: f64, target: f64) -> f64 {
    let raw = (range / target).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

struct Series {
    label: String,
    color: &'static str,
    points: Vec<(f64, f64)>,
}

/// Where a panel's plot area is, and its scales.
struct Frame {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
    x_max: f64,
    y_max: f64,
    ystep: f64,
}

impl Frame {
    /// The plot area at `top`, scaled to hold every point of `series` up to `x_max`.
    fn new(top: f64, series: &[Series], x_max: f64) -> Frame {
        let y_max_raw = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max).max(1.0);
        let ystep = nice_step(y_max_raw * 1.1, 5.0);
        let y_max = (y_max_raw * 1.1 / ystep).ceil() * ystep;
        Frame { left: 70.0, top, width: 840.0, height: 170.0, x_max: x_max.max(1.0), y_max, ystep }
    }

    fn xs(&self, t: f64) -> f64 {
        self.left + t / self.x_max * self.width
    }

    fn ys(&self, v: f64) -> f64 {
        self.top + self.height - v / self.y_max * self.height
    }
}

/// One panel of the chart: axes, grid, shaded windows, polylines and a legend.
fn panel(
    out: &mut String,
    top: f64,
    title: &str,
    unit: &str,
    series: &[Series],
    x_max: f64,
    shade: &[(f64, f64, &str)],
) {
    let f = Frame::new(top, series, x_max);
    let _ = writeln!(out, r##"<text x="{}" y="{:.1}" class="h">{title}</text>"##, f.left, top - 8.0);
    for &(a, b, label) in shade {
        let _ = writeln!(
            out,
            r##"<rect x="{:.1}" y="{top:.1}" width="{:.1}" height="{}" fill="#dde8f5"/><text x="{:.1}" y="{:.1}" class="s">{label}</text>"##,
            f.xs(a),
            (f.xs(b) - f.xs(a)).max(0.0),
            f.height,
            f.xs(a) + 3.0,
            top + 12.0
        );
    }
    axes(out, &f, unit);
    for (k, s) in series.iter().enumerate() {
        line(out, &f, k, s);
    }
}

/// The grid, the ticks of both axes, the frame and the unit.
fn axes(out: &mut String, f: &Frame, unit: &str) {
    let (left, top, width, height) = (f.left, f.top, f.width, f.height);
    let mut v = 0.0;
    while v <= f.y_max + 1e-9 {
        let y = f.ys(v);
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e3e3e3"/><text x="{:.1}" y="{:.1}" class="a" text-anchor="end">{}</text>"##,
            left + width,
            left - 6.0,
            y + 4.0,
            fmt_num(v)
        );
        v += f.ystep;
    }
    let xstep = nice_step(f.x_max, 10.0);
    let mut t = 0.0;
    while t <= f.x_max + 1e-9 {
        let x = f.xs(t);
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#999"/><text x="{x:.1}" y="{:.1}" class="a" text-anchor="middle">{}</text>"##,
            top + height,
            top + height + 4.0,
            top + height + 16.0,
            fmt_num(t)
        );
        t += xstep;
    }
    let _ = writeln!(
        out,
        r##"<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#999"/><text x="{:.1}" y="{:.1}" class="a" text-anchor="end">{unit}</text>"##,
        left + width,
        top + height + 30.0
    );
}

/// Series `k`'s polyline and its legend entry.
fn line(out: &mut String, f: &Frame, k: usize, s: &Series) {
    let pts: Vec<String> = s.points.iter().map(|&(t, v)| format!("{:.1},{:.1}", f.xs(t), f.ys(v))).collect();
    let _ = writeln!(
        out,
        r##"<polyline fill="none" stroke="{}" stroke-width="1.6" points="{}"/>"##,
        s.color,
        pts.join(" ")
    );
    let lx = f.left + 10.0 + 190.0 * k as f64;
    let ly = f.top + f.height + 30.0;
    let _ = writeln!(
        out,
        r##"<line x1="{lx:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="3"/><text x="{:.1}" y="{ly:.1}" class="a">{}</text>"##,
        ly - 4.0,
        lx + 18.0,
        ly - 4.0,
        s.color,
        lx + 24.0,
        s.label
    );
}

fn fmt_num(v: f64) -> String {
    if v >= 10_000.0 && v % 1000.0 == 0.0 {
        format!("{}k", v / 1000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Per-second rates between consecutive samples, for the given classes.
fn rates(samples: &[Sample], classes: std::ops::Range<usize>) -> Vec<(f64, f64)> {
    samples
        .windows(2)
        .map(|w| {
            let dt = (w[1].t - w[0].t).max(1e-9);
            let n: u64 = classes.clone().map(|c| w[1].ok[c] - w[0].ok[c]).sum();
            (w[1].t, n as f64 / dt)
        })
        .collect()
}

/// Mean latency (ms) per second of the given class, between consecutive samples.
fn mean_latency(samples: &[Sample], class: usize) -> Vec<(f64, f64)> {
    samples
        .windows(2)
        .filter_map(|w| {
            let n = w[1].answered[class] - w[0].answered[class];
            (n > 0).then(|| {
                (w[1].t, (w[1].latency_us[class] - w[0].latency_us[class]) as f64 / n as f64 / 1000.0)
            })
        })
        .collect()
}

fn render_svg(samples: &[Sample], title: &str, subtitle: &str) -> String {
    let x_max = samples.last().map(|s| s.t).unwrap_or(1.0);
    let rss = series(samples, |s| s.rss_mib);
    let unaccounted = series(samples, unaccounted);
    let heap = series(samples, |s| s.heap_mib);
    let unexplained = series(samples, unexplained);
    let at = |q: usize| x_max * q as f64 / 10.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="960" height="1070" viewBox="0 0 960 1070" font-family="sans-serif">
<style>.h{{font-size:14px;font-weight:bold}} .a{{font-size:11px;fill:#444}} .s{{font-size:10px;fill:#5577aa}} .t{{font-size:16px;font-weight:bold}} .u{{font-size:12px;fill:#333}}</style>
<rect width="960" height="1070" fill="#fff"/>
<text x="70" y="26" class="t">{title}</text>
<text x="70" y="46" class="u">{subtitle}</text>"##
    );
    panel(
        &mut out,
        90.0,
        "Resident memory (RSS)",
        "MiB over seconds",
        &[
            Series { label: "RSS MiB".into(), color: "#c0392b", points: rss },
            Series { label: "RSS - bounded parts".into(), color: "#16a085", points: unaccounted },
            Series { label: "live heap".into(), color: "#8e44ad", points: heap },
            Series {
                label: "live heap - bounded parts (judged)".into(),
                color: "#d35400",
                points: unexplained,
            },
        ],
        x_max,
        &[(at(2), at(4), "baseline window"), (at(8), at(10), "final window")],
    );
    let reads = [
        Series { label: "all reads/s".into(), color: "#2c3e50", points: rates(samples, READ_CLASSES) },
        Series { label: "feed pages/s".into(), color: "#2980b9", points: rates(samples, FEED..FEED + 1) },
    ];
    panel(&mut out, 340.0, "Reads", "requests/s over seconds", &reads, x_max, &[]);
    let writes = [
        Series {
            label: "post likes/unlikes/s".into(),
            color: "#c0392b",
            points: rates(samples, LIKE..LIKE + 1),
        },
        Series { label: "comments/s".into(), color: "#27ae60", points: rates(samples, COMMENT..COMMENT + 1) },
        Series {
            label: "comment likes/s".into(),
            color: "#8e44ad",
            points: rates(samples, COMMENT_LIKE..COMMENT_LIKE + 1),
        },
    ];
    panel(&mut out, 590.0, "Writes", "requests/s over seconds", &writes, x_max, &[]);
    let latency = [
        Series { label: "feed page".into(), color: "#2980b9", points: mean_latency(samples, FEED) },
        Series { label: "comment page".into(), color: "#16a085", points: mean_latency(samples, COMMENTS) },
        Series { label: "post like/unlike".into(), color: "#c0392b", points: mean_latency(samples, LIKE) },
        Series { label: "comment".into(), color: "#27ae60", points: mean_latency(samples, COMMENT) },
    ];
    panel(&mut out, 840.0, "Mean latency per second", "ms over seconds", &latency, x_max, &[]);
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::shared::CLASSES;

    #[test]
    fn the_chart_is_an_svg_with_one_polyline_per_series() {
        let samples: Vec<Sample> = (0..30)
            .map(|i| Sample {
                t: i as f64,
                rss_mib: Some(100.0 + i as f64),
                bounded_mib: Some(40.0),
                heap_mib: Some(60.0 + i as f64 / 2.0),
                ok: [i * 10; CLASSES],
                answered: [i * 10; CLASSES],
                latency_us: [i * 20_000; CLASSES],
                errors: 0,
                limited: 0,
                cpu_s: None,
                load1: None,
            })
            .collect();
        let svg = render_svg(&samples, "t", "s");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 13);
    }
}
