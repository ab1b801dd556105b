//! The hf images of hack/images/build.sh (`localhost/hf:0.36`, `localhost/hf:2`) run as a
//! container runtime would run them, without one: the archive's layer unpacked once per digest,
//! then each command chroot'ed into it as the image's user, in a mount namespace of its own
//! (unshare) where the root is read-only, /tmp is a fresh tmpfs (the Job's emptyDir), /data is a
//! host directory (the Job's claim) and /dev is the host's. The network is the host's, so that
//! 127.0.0.1 reaches the stand-in Hub. Needs root (mounts, chroot), as hack/test.sh runs.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// How long one command may take: the machine's two cores are shared with a cluster's tests.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// An unpacked image: its root and what its configuration says to run with.
pub struct Image {
    pub root: PathBuf,
    /// The configuration's User, "uid:gid".
    pub user: String,
    /// The configuration's Env.
    pub env: Vec<(String, String)>,
}

fn archive(tag: &str) -> PathBuf {
    let dir = std::env::var_os("VLLM_IMAGE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/images"));
    dir.join(format!("hf-{tag}.tar"))
}

/// One member of the archive, read with tar(1).
fn member(archive: &Path, name: &str) -> Vec<u8> {
    let out = Command::new("tar")
        .arg("-xOf")
        .arg(archive)
        .arg(name)
        .output()
        .expect("run tar");
    assert!(
        out.status.success(),
        "tar -xOf {} {name}: {}",
        archive.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn json_member(archive: &Path, name: &str) -> Value {
    serde_json::from_slice(&member(archive, name))
        .unwrap_or_else(|e| panic!("{name} in {}: {e}", archive.display()))
}

fn blob(digest: &Value) -> String {
    format!(
        "blobs/sha256/{}",
        digest.as_str().unwrap().trim_start_matches("sha256:")
    )
}

/// Unpacks are serialised: the tests of this binary run in parallel and share them.
static UNPACK: Mutex<()> = Mutex::new(());

/// The image `localhost/hf:<tag>`, from target/images/hf-<tag>.tar. Fails, saying how to build it,
/// when it is not there: this test is what proves the image, so it never passes without one.
pub fn image(tag: &str) -> Image {
    assert!(
        unsafe { libc::geteuid() } == 0,
        "the real-hf tests chroot into the image and mount its file systems: run them as root \
         (hack/test.sh runs as root)"
    );
    let archive = archive(tag);
    assert!(
        archive.is_file(),
        "{} is not built: run `hack/images/build.sh hf-{tag}` (hack/test.sh builds it through \
         hack/cluster/cluster.sh load-images before cargo test)",
        archive.display()
    );
    let index = json_member(&archive, "index.json");
    let manifest_digest = &index["manifests"][0]["digest"];
    let manifest = json_member(&archive, &blob(manifest_digest));
    let config = json_member(&archive, &blob(&manifest["config"]["digest"]));
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "oci.py makes one layer: {manifest}");

    let hex = manifest_digest
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:");
    let images = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hf-images");
    let root = images.join(format!("{tag}-{}", &hex[..16]));
    let _guard = UNPACK.lock().unwrap_or_else(|e| e.into_inner());
    if !root.join(".unpacked").is_file() {
        // The tag's earlier builds: ~150 MiB each.
        for old in std::fs::read_dir(&images).into_iter().flatten().flatten() {
            if old
                .file_name()
                .to_string_lossy()
                .starts_with(&format!("{tag}-"))
            {
                let _ = std::fs::remove_dir_all(old.path());
            }
        }
        let tmp = images.join(format!("{tag}.unpacking"));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let layer = member(&archive, &blob(&layers[0]["digest"]));
        let mut tar = Command::new("tar")
            .arg("-xf")
            .arg("-")
            .arg("-C")
            .arg(&tmp)
            .stdin(Stdio::piped())
            .spawn()
            .expect("run tar");
        std::io::Write::write_all(&mut tar.stdin.take().unwrap(), &layer).unwrap();
        assert!(tar.wait().unwrap().success(), "unpacking the layer failed");
        // Mount points the runtime would make: /dev, and the Job's claim.
        for d in ["dev", "data"] {
            std::fs::create_dir_all(tmp.join(d)).unwrap();
        }
        std::fs::write(tmp.join(".unpacked"), hex).unwrap();
        let _ = std::fs::remove_dir_all(&root);
        std::fs::rename(&tmp, &root).unwrap();
    }
    let c = &config["config"];
    Image {
        root,
        user: c["User"].as_str().unwrap_or("0:0").to_string(),
        env: c["Env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e.as_str()?.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// The mounts, then the image's user in its root; stdout and stderr to one pipe, as a
/// container's log has them. PATH is the image's (chroot looks the command up in the new root):
/// the host's tools are found on a PATH of their own.
const JAIL: &str = r#"set -e
root=$1 data=$2 user=$3; shift 3
image_path=$PATH
PATH=/usr/sbin:/usr/bin:/sbin:/bin
chroot=$(command -v chroot)
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
mount --bind "$data" "$root/data"
PATH=$image_path exec "$chroot" --userspec="$user" "$root" "$@" 2>&1"#;

impl Image {
    /// `argv` in the image with only the image's Env and `env`, `data` at /data.
    pub fn command(&self, data: &Path, argv: &[&str], env: &[(String, String)]) -> Command {
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--fork", "--", "sh", "-c", JAIL, "sh"])
            .arg(&self.root)
            .arg(data)
            .arg(&self.user)
            .args(argv)
            .env_clear()
            .envs(self.env.iter().cloned())
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a test that gives up ends every process of the command.
            .process_group(0);
        cmd
    }

    /// The uid:gid the image runs as, for the owner of the directory mounted at /data.
    pub fn uid_gid(&self) -> (u32, u32) {
        let (u, g) = self
            .user
            .split_once(':')
            .unwrap_or((&self.user, &self.user));
        (u.parse().unwrap(), g.parse().unwrap())
    }
}

/// A spawned command, its process group ended (SIGTERM, as the kubelet does) when dropped.
pub struct Running {
    child: Child,
    /// Every line of its output so far.
    pub lines: Arc<Mutex<Vec<String>>>,
    line_rx: mpsc::Receiver<String>,
}

impl Running {
    pub fn spawn(mut cmd: Command) -> Running {
        let mut child = cmd.spawn().expect("run unshare");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, line_rx) = mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let (lines, tx) = (lines.clone(), tx.clone());
            // Drained all along, so that a chatty server never blocks on a full pipe.
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line.clone());
                    let _ = tx.send(line);
                }
            });
        }
        Running {
            child,
            lines,
            line_rx,
        }
    }

    /// The first line from now on for which `f` gives Some, within TIMEOUT.
    pub fn wait_line<T>(&self, what: &str, f: impl Fn(&str) -> Option<T>) -> T {
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.line_rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(v) = f(&line) {
                        return v;
                    }
                }
                Err(_) => panic!(
                    "no {what} within {TIMEOUT:?}; output:\n{}",
                    self.lines.lock().unwrap().join("\n")
                ),
            }
        }
    }

    pub fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            unsafe { libc::kill(-(self.child.id() as i32), libc::SIGTERM) };
            let _ = self.child.wait();
        }
    }
}

/// Runs `cmd` to its end: its exit code and its output (stdout and stderr as one log).
pub fn output(mut cmd: Command) -> (i32, String) {
    cmd.stderr(Stdio::inherit());
    let mut child = cmd.spawn().expect("run unshare");
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    // The pipe closes when every process of the command has exited.
    let Ok(buf) = rx.recv_timeout(TIMEOUT) else {
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let _ = child.wait();
        panic!("the command did not end within {TIMEOUT:?}");
    };
    let status = child.wait().unwrap();
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&buf).into_owned(),
    )
}
