//! `docs/capacity.md` says what `docs/capacity/measure.sh` measured: every figure the plan
//! takes from a measurement is marked `<!--m:STEP.FIGURE-->` right before it, and must equal
//! that figure in `docs/capacity/measured.json` (which `measure.sh` writes, with the build and
//! the date of each step) to the precision the doc prints. A marker may scale the figure for
//! display: `<!--m:like.wal_per_like_b/1000-->2.25 KB`, `<!--m:feed.x*20-->`. A rerun that
//! changes a figure fails here until the doc is brought up to date, and so does a doc edit
//! that changes a measured number by hand.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// One marked figure that disagrees with the file, or names nothing in it.
#[derive(Debug)]
struct Mismatch {
    line: usize,
    marker: String,
    why: String,
}

/// The number printed at the start of `s` (after `**`, `~` and spaces), with its count of
/// decimals: `1,820 us` is (1820, 0), `2.25 KB` is (2.25, 2).
fn printed_number(s: &str) -> Option<(f64, u32)> {
    let s = s.trim_start_matches(['*', '~', ' ']);
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == ',' || c == '.')).unwrap_or(s.len());
    let text = s[..end].trim_end_matches(['.', ',']);
    if text.is_empty() || !text.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let decimals = text.split_once('.').map_or(0, |(_, d)| d.len() as u32);
    text.replace(',', "").parse().ok().map(|v| (v, decimals))
}

/// Every marker of `doc` checked against `measured`; also how many markers there were.
fn check(doc: &str, measured: &serde_json::Value) -> (usize, Vec<Mismatch>) {
    let mut bad = Vec::new();
    let mut n = 0;
    for (i, line) in doc.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("<!--m:") {
            let after = &rest[at + 6..];
            let Some(close) = after.find("-->") else {
                bad.push(Mismatch { line: i + 1, marker: after.to_string(), why: "unclosed marker".into() });
                break;
            };
            let marker = &after[..close];
            let shown = &after[close + 3..];
            rest = shown;
            n += 1;
            let miss = |why: String| Mismatch { line: i + 1, marker: marker.to_string(), why };
            let (key, scale) = match marker.split_once(['/', '*']) {
                Some((k, f)) => {
                    let Ok(f) = f.parse::<f64>() else {
                        bad.push(miss(format!("bad scale {f:?}")));
                        continue;
                    };
                    (k, if marker.contains('/') { 1.0 / f } else { f })
                }
                None => (marker, 1.0),
            };
            let Some((step, figure)) = key.split_once('.') else {
                bad.push(miss("a marker is STEP.FIGURE".into()));
                continue;
            };
            let entry = &measured[step];
            let value = if figure == "build" || figure == "date" {
                &entry[figure]
            } else {
                &entry["figures"][figure]
            };
            match value {
                serde_json::Value::String(s) => {
                    if !shown.trim_start_matches(['*', '`', ' ']).starts_with(s.as_str()) {
                        bad.push(miss(format!("the file says {s:?}")));
                    }
                }
                serde_json::Value::Number(v) => {
                    let want = v.as_f64().expect("a number") * scale;
                    match printed_number(shown) {
                        None => bad.push(miss("no number follows the marker".into())),
                        Some((got, decimals)) => {
                            let tolerance = 0.5 * 10f64.powi(-(decimals as i32)) + want.abs() * 1e-9;
                            if (got - want).abs() > tolerance {
                                bad.push(miss(format!("the doc says {got}, the file {want:.4}")));
                            }
                        }
                    }
                }
                _ => bad.push(miss(format!("not in docs/capacity/measured.json ({step} / {figure})"))),
            }
        }
    }
    (n, bad)
}

fn measured() -> serde_json::Value {
    serde_json::from_str(&read("docs/capacity/measured.json")).expect("measured.json is JSON")
}

#[test]
fn every_measured_figure_in_the_capacity_plan_is_the_one_measure_sh_wrote() {
    let (n, bad) = check(&read("docs/capacity.md"), &measured());
    assert!(
        bad.is_empty(),
        "docs/capacity.md disagrees with docs/capacity/measured.json (rerun the step with \
         docs/capacity/measure.sh, then update the doc):\n{}",
        bad.iter()
            .map(|m| format!("  line {}: <!--m:{}--> {}", m.line, m.marker, m.why))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The plan's inputs are marked, not a token few.
    assert!(n >= 40, "only {n} figures of docs/capacity.md are marked as measured");
}

#[test]
fn every_step_of_the_file_names_its_build_and_date_and_is_cited() {
    let m = measured();
    let doc = read("docs/capacity.md");
    let steps = m.as_object().expect("an object of steps");
    for step in ["like", "consumers", "redis", "comment", "feed", "jetstream", "embedded"] {
        let e = steps.get(step).unwrap_or_else(|| panic!("measured.json has no step {step}"));
        let build = e["build"].as_str().expect("build");
        assert!(build.len() >= 7, "{step}: build {build:?}");
        let date = e["date"].as_str().expect("date");
        assert!(date.len() == 10 && date.starts_with("20"), "{step}: date {date:?}");
        assert!(doc.contains(&format!("<!--m:{step}.")), "docs/capacity.md cites nothing of step {step}");
    }
}

#[test]
fn a_changed_figure_or_an_unknown_one_is_caught() {
    let m: serde_json::Value = serde_json::json!({
        "like": {"build": "abc1234", "date": "2026-12-06", "figures": {"wal_per_like_b": 2253.0, "cpu_api_us": 148.4}}
    });
    let good = "WAL <!--m:like.wal_per_like_b/1000-->**2.25 KB**, API <!--m:like.cpu_api_us-->148 us, \
                build <!--m:like.build-->`abc1234`";
    let (n, bad) = check(good, &m);
    assert_eq!((n, bad.len()), (3, 0), "{bad:?}");
    for wrong in [
        good.replace("2.25 KB", "2.35 KB"),
        good.replace("148 us", "1,148 us"),
        good.replace("abc1234", "def5678"),
        good.replace("cpu_api_us", "cpu_apix_us"),
        good.replace("148 us", "us"),
    ] {
        let (_, bad) = check(&wrong, &m);
        assert_eq!(bad.len(), 1, "{wrong}");
    }
    assert_eq!(printed_number("**1,820 us**"), Some((1820.0, 0)));
    assert_eq!(printed_number("~2.6 ms"), Some((2.6, 1)));
    assert_eq!(printed_number("318 B."), Some((318.0, 0)));
}
