//! `hf download`'s work, as huggingface_hub 0.36.2's `snapshot_download` / `hf_hub_download` do it,
//! with the fixture tree in place of the Hub (see hub.rs). Files are copied one at a time (the
//! real client runs 8 downloads at once; its log then interleaves the same lines).
//!
//! To a `--local-dir`: each file is written to
//! `<dir>/.cache/huggingface/download/<short hash>.<etag>.incomplete`, then renamed to
//! `<dir>/<path>`, and `<dir>/.cache/huggingface/download/<path>.metadata` records the commit, the
//! ETag and the time; a file whose metadata names the commit being downloaded is left as it is
//! (a second run copies nothing). Without `--local-dir`, the cache layout:
//! `<cache>/models--<org>--<name>/{blobs/<etag>,snapshots/<commit>/<path> -> ../../blobs/<etag>,refs/<rev>}`.

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::hub::{Hub, Refusal, Repo, RepoFile, Revision, is_commit_hash};
use crate::py::{self, Call, Dest, HttpError, PyErr};
use crate::{out, sha1, tqdm};

#[derive(Debug)]
pub struct Opts {
    pub repo_id: String,
    pub filenames: Vec<String>,
    pub repo_type: String,
    pub revision: Option<String>,
    pub include: Option<Vec<String>>,
    pub exclude: Option<Vec<String>>,
    pub cache_dir: Option<String>,
    pub local_dir: Option<String>,
    pub force_download: bool,
    pub token: Option<String>,
    pub quiet: bool,
}

pub struct Ctx {
    pub hub: Hub,
    pub endpoint: String,
    pub token: Option<String>,
    /// Time per copied file (`VLLM_SIM_HUB_DELAY_MS`).
    pub delay: Duration,
    /// Simulated free bytes on the destination (`VLLM_SIM_HUB_FREE_BYTES`).
    pub free: Option<u64>,
    /// INFO logs (verbosity info unless `--quiet`).
    pub info: bool,
    pub bars: bool,
    /// Python warnings (ignored with `--quiet`).
    pub warnings: bool,
    shown: HashSet<String>,
    ids: u64,
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn home() -> PathBuf {
    PathBuf::from(env_nonempty("HOME").unwrap_or_else(|| "/".into()))
}

/// `HF_HOME`: `$XDG_CACHE_HOME/huggingface` or `~/.cache/huggingface`.
fn hf_home() -> PathBuf {
    env_nonempty("HF_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            env_nonempty("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| home().join(".cache"))
                .join("huggingface")
        })
}

/// The token huggingface_hub sends: `--token`, else `HF_TOKEN`, `HUGGING_FACE_HUB_TOKEN`, the
/// token file (`HF_TOKEN_PATH`, default `$HF_HOME/token`).
pub fn resolve_token(explicit: Option<&str>) -> Option<String> {
    let clean = |t: String| {
        let t = t.replace(['\r', '\n'], "").trim().to_string();
        (!t.is_empty()).then_some(t)
    };
    if let Some(t) = explicit.map(String::from).and_then(clean) {
        return Some(t);
    }
    if let Some(t) = env_nonempty("HF_TOKEN")
        .or_else(|| env_nonempty("HUGGING_FACE_HUB_TOKEN"))
        .and_then(clean)
    {
        return Some(t);
    }
    let path = env_nonempty("HF_TOKEN_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| hf_home().join("token"));
    fs::read_to_string(path).ok().and_then(clean)
}

/// `urllib.parse.quote(s, safe=...)`.
pub fn quote(s: &str, safe: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"_.-~".contains(&b) || safe.as_bytes().contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `str(pathlib.Path(s))`: no empty or `.` parts, no trailing slash.
pub fn py_path(s: &str) -> String {
    let abs = s.starts_with('/');
    let parts: Vec<&str> = s
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    let joined = parts.join("/");
    match (abs, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// `os.path.realpath`.
fn realpath(p: &Path) -> String {
    if let Ok(r) = fs::canonicalize(p) {
        return r.to_string_lossy().into_owned();
    }
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(p)
    };
    let mut out: Vec<String> = Vec::new();
    for c in abs.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(n) => out.push(n.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    format!("/{}", out.join("/"))
}

/// `fnmatch.fnmatch` on a POSIX system: `*`, `?`, `[seq]`, `[!seq]`; `*` also matches `/`.
pub fn fnmatch(name: &str, pattern: &str) -> bool {
    fn go(n: &[char], p: &[char]) -> bool {
        match p.first() {
            None => n.is_empty(),
            Some('*') => (0..=n.len()).any(|i| go(&n[i..], &p[1..])),
            Some('?') => !n.is_empty() && go(&n[1..], &p[1..]),
            Some('[') => {
                let Some(end) = p.iter().skip(2).position(|c| *c == ']').map(|i| i + 2) else {
                    return n.first() == Some(&'[') && go(&n[1..], &p[1..]);
                };
                let Some(c) = n.first() else { return false };
                let (neg, set) = match p[1] {
                    '!' => (true, &p[2..end]),
                    _ => (false, &p[1..end]),
                };
                let mut hit = false;
                let mut i = 0;
                while i < set.len() {
                    if i + 2 < set.len() && set[i + 1] == '-' {
                        hit |= set[i] <= *c && *c <= set[i + 2];
                        i += 3;
                    } else {
                        hit |= set[i] == *c;
                        i += 1;
                    }
                }
                hit != neg && go(&n[1..], &p[end + 1..])
            }
            Some(x) => n.first() == Some(x) && go(&n[1..], &p[1..]),
        }
    }
    let n: Vec<char> = name.chars().collect();
    let p: Vec<char> = pattern.chars().collect();
    go(&n, &p)
}

/// `filter_repo_objects`: a pattern ending in `/` matches the folder's files.
fn filter(
    files: Vec<RepoFile>,
    allow: Option<&[String]>,
    ignore: Option<&[String]>,
) -> Vec<RepoFile> {
    let fix = |p: &String| {
        if p.ends_with('/') {
            format!("{p}*")
        } else {
            p.clone()
        }
    };
    let allow: Option<Vec<String>> = allow.map(|a| a.iter().map(fix).collect());
    let ignore: Vec<String> = ignore.unwrap_or_default().iter().map(fix).collect();
    files
        .into_iter()
        .filter(|f| {
            allow
                .as_ref()
                .is_none_or(|a| a.iter().any(|p| fnmatch(&f.path, p)))
        })
        .filter(|f| !ignore.iter().any(|p| fnmatch(&f.path, p)))
        .collect()
}

/// `shutil.disk_usage(path).free`.
fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a properly sized, writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

struct Written {
    errno: i32,
    strerror: String,
}

impl Ctx {
    pub fn new(hub: Hub, token: Option<String>, quiet: bool) -> Ctx {
        let delay_ms = std::env::var("VLLM_SIM_HUB_DELAY_MS")
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
            .unwrap_or(0.0);
        let bars_off = matches!(
            std::env::var("HF_HUB_DISABLE_PROGRESS_BARS")
                .unwrap_or_default()
                .to_ascii_lowercase()
                .as_str(),
            "1" | "true" | "yes" | "on"
        );
        Ctx {
            hub,
            endpoint: env_nonempty("HF_ENDPOINT")
                .map(|e| e.trim_end_matches('/').to_string())
                .unwrap_or_else(|| "https://huggingface.co".into()),
            token,
            delay: Duration::from_secs_f64(delay_ms / 1000.0),
            free: std::env::var("VLLM_SIM_HUB_FREE_BYTES")
                .ok()
                .and_then(|v| v.trim().parse().ok()),
            info: !quiet,
            bars: !quiet && !bars_off,
            warnings: !quiet,
            shown: HashSet::new(),
            ids: 0,
        }
    }

    fn log_info(&self, msg: &str) {
        if self.info {
            out::err(&format!("{msg}\n"));
        }
    }

    fn log_warning(&self, msg: &str) {
        out::err(&format!("{msg}\n"));
    }

    /// `warnings.warn(msg)` from `at` (`file:line`), shown once per text, as Python's default filter.
    fn warn(&mut self, at: &str, msg: &str, source: &str) {
        if self.warnings && self.shown.insert(format!("{at}{msg}")) {
            out::err(&format!("{at}: UserWarning: {msg}\n  {source}\n"));
        }
    }

    /// The Hub's `X-Request-Id` (an AWS trace id).
    fn request_id(&mut self) -> String {
        self.ids += 1;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let seed = format!("{}:{}:{}", now.as_nanos(), std::process::id(), self.ids);
        let h = sha1::hex(&sha1::digest(seed.as_bytes()));
        format!(
            "Root=1-{:08x}-{};{}-{}-{}-{}-{}",
            now.as_secs() as u32,
            &h[..24],
            &h[24..32],
            &h[32..36],
            &h[36..40],
            &h[..4],
            &h[4..16]
        )
    }

    fn url_prefix(repo_type: &str) -> &'static str {
        match repo_type {
            "dataset" => "datasets/",
            "space" => "spaces/",
            _ => "",
        }
    }

    fn resolve_url(
        &self,
        repo_type: &str,
        repo_id: &str,
        revision: &str,
        filename: &str,
    ) -> String {
        format!(
            "{}/{}{repo_id}/resolve/{}/{}",
            self.endpoint,
            Self::url_prefix(repo_type),
            quote(revision, ""),
            quote(filename, "/")
        )
    }

    fn refuse(&mut self, kind: Refusal, url: &str, repo_id: &str, revision: &str) -> HttpError {
        let rid = self.request_id();
        HttpError::new(kind, self.token.is_some(), url, repo_id, revision, &rid)
    }

    /// `repo_info` (api/<type>s/<repo>/revision/<rev>): public for gated repos too.
    fn repo_info(&mut self, o: &Opts, revision: &str) -> Result<(Repo, Revision), HttpError> {
        let url = format!(
            "{}/api/{}s/{}/revision/{}",
            self.endpoint,
            o.repo_type,
            o.repo_id,
            quote(revision, "")
        );
        let Some(repo) = self.hub.repo(&o.repo_type, &o.repo_id) else {
            return Err(self.refuse(Refusal::RepoNotFound, &url, &o.repo_id, revision));
        };
        match repo.revision(revision) {
            Ok(rev) => Ok((repo, rev)),
            Err(kind) => Err(self.refuse(kind, &url, &o.repo_id, revision)),
        }
    }

    /// The HEAD of `resolve/<revision>/<filename>`: the file and the commit it resolves to.
    fn head(
        &mut self,
        o: &Opts,
        revision: &str,
        filename: &str,
    ) -> Result<(RepoFile, String), HttpError> {
        let url = self.resolve_url(&o.repo_type, &o.repo_id, revision, filename);
        let Some(repo) = self.hub.repo(&o.repo_type, &o.repo_id) else {
            return Err(self.refuse(Refusal::RepoNotFound, &url, &o.repo_id, revision));
        };
        let rev = match repo.revision(revision) {
            Ok(r) => r,
            Err(kind) => return Err(self.refuse(kind, &url, &o.repo_id, revision)),
        };
        if let Err(kind) = repo.check_access(self.token.as_deref()) {
            return Err(self.refuse(kind, &url, &o.repo_id, revision));
        }
        let commit = rev.commit.clone();
        match rev.files.into_iter().find(|f| f.path == filename) {
            Some(f) => Ok((f, commit)),
            None => Err(self.refuse(Refusal::EntryNotFound, &url, &o.repo_id, revision)),
        }
    }

    /// `_check_disk_space`: warns when the first existing directory of `target` has too little room.
    fn check_disk_space(&mut self, expected: u64, target: &Path) {
        let mut p = Some(target);
        while let Some(path) = p {
            if let Some(real) = free_bytes(path) {
                let free = self.free.unwrap_or(real);
                if free < expected {
                    let msg = format!(
                        "Not enough free disk space to download the file. The expected file size is: {:.2} MB. \
                         The target location {} only has {:.2} MB free disk space.",
                        expected as f64 / 1e6,
                        target.display(),
                        free as f64 / 1e6
                    );
                    self.warn(py::WARNING_AT, &msg, "warnings.warn(");
                }
                return;
            }
            p = path.parent();
        }
    }

    /// `http_get` into the `.incomplete` file, from `resume` on.
    fn copy(&mut self, file: &RepoFile, incomplete: &Path, resume: u64) -> Result<(), Written> {
        if resume >= file.size {
            return Ok(());
        }
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        let io = |e: std::io::Error| Written {
            errno: e.raw_os_error().unwrap_or(5),
            strerror: strerror(&e),
        };
        let data = fs::read(&file.source).map_err(io)?;
        let rest = &data[(resume as usize).min(data.len())..];
        let mut f = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(incomplete)
            .map_err(io)?;
        let (now, full) = match self.free {
            Some(budget) if (rest.len() as u64) > budget => (&rest[..budget as usize], true),
            _ => (rest, false),
        };
        f.write_all(now).map_err(io)?;
        if let Some(budget) = self.free.as_mut() {
            *budget -= now.len() as u64;
        }
        if full {
            return Err(Written {
                errno: 28,
                strerror: "No space left on device".into(),
            });
        }
        f.sync_all().map_err(io)
    }

    /// `_download_to_tmp_and_move`.
    fn download_to_tmp_and_move(
        &mut self,
        file: &RepoFile,
        incomplete: &Path,
        destination: &Path,
        force: bool,
        call: Call,
        dest: Dest,
    ) -> Result<(), PyErr> {
        if destination.exists() && !force {
            return Ok(());
        }
        if incomplete.exists() && force {
            self.log_info(&format!(
                "Removing incomplete file '{}' (force_download=True)",
                incomplete.display()
            ));
            let _ = fs::remove_file(incomplete);
        }
        let oserr = |w: Written, large: bool| py::os_error(call, dest, w.errno, &w.strerror, large);
        let resume = match fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(incomplete)
        {
            Ok(f) => f.metadata().map(|m| m.len()).unwrap_or(0),
            Err(e) => {
                return Err(oserr(
                    Written {
                        errno: e.raw_os_error().unwrap_or(5),
                        strerror: format!("{}: '{}'", strerror(&e), incomplete.display()),
                    },
                    false,
                ));
            }
        };
        let mut msg = format!("Downloading '{}' to '{}'", file.path, incomplete.display());
        if resume > 0 {
            msg.push_str(&format!(" (resume from {resume}/{})", file.size));
        }
        self.log_info(&msg);
        if let Some(dir) = incomplete.parent() {
            self.check_disk_space(file.size, dir);
        }
        if let Some(dir) = destination.parent() {
            self.check_disk_space(file.size, dir);
        }
        let large = file.size.saturating_sub(resume) > 8192;
        self.copy(file, incomplete, resume)
            .map_err(|w| oserr(w, large))?;
        self.log_info(&format!(
            "Download complete. Moving file to {}",
            destination.display()
        ));
        fs::rename(incomplete, destination).map_err(|e| {
            oserr(
                Written {
                    errno: e.raw_os_error().unwrap_or(5),
                    strerror: strerror(&e),
                },
                false,
            )
        })
    }
}

struct Metadata {
    commit: String,
    etag: String,
}

fn ensure_hf_dir(local_dir: &Path) -> PathBuf {
    let dir = local_dir.join(".cache").join("huggingface");
    let _ = fs::create_dir_all(&dir);
    let gitignore = dir.join(".gitignore");
    if !gitignore.exists() {
        let _ = fs::write(&gitignore, "*");
    }
    dir
}

fn write_metadata(path: &Path, commit: &str, etag: &str) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let _ = fs::write(path, format!("{commit}\n{etag}\n{now}\n"));
}

impl Ctx {
    fn read_metadata(&self, meta: &Path, file: &Path, filename: &str) -> Option<Metadata> {
        let text = fs::read_to_string(meta).ok()?;
        let mut lines = text.lines();
        let (commit, etag, ts) = (lines.next()?, lines.next()?, lines.next()?);
        let Ok(ts) = ts.trim().parse::<f64>() else {
            self.log_warning(&format!(
                "Invalid metadata file {}: could not convert string to float: '{}'. Removing it from disk and \
                 continue.",
                meta.display(),
                ts.trim()
            ));
            let _ = fs::remove_file(meta);
            return None;
        };
        let mtime = fs::metadata(file)
            .ok()?
            .modified()
            .ok()?
            .duration_since(UNIX_EPOCH)
            .ok()?
            .as_secs_f64();
        if mtime - 1.0 <= ts {
            Some(Metadata {
                commit: commit.trim().into(),
                etag: etag.trim().into(),
            })
        } else {
            self.log_info(&format!(
                "Ignored metadata for '{filename}' (outdated). Will re-compute hash."
            ));
            None
        }
    }

    /// `_hf_hub_download_to_local_dir`.
    fn download_to_local_dir(
        &mut self,
        o: &Opts,
        local_dir: &Path,
        revision: &str,
        filename: &str,
        call: Call,
    ) -> Result<PathBuf, PyErr> {
        let file_path = local_dir.join(filename);
        let download = ensure_hf_dir(local_dir).join("download");
        let meta = download.join(format!("{filename}.metadata"));
        let lock = download.join(format!("{filename}.lock"));
        for dir in [file_path.parent(), meta.parent()].into_iter().flatten() {
            if let Err(e) = fs::create_dir_all(dir) {
                return Err(py::os_error(
                    call,
                    Dest::LocalDir,
                    e.raw_os_error().unwrap_or(5),
                    &format!("{}: '{}'", strerror(&e), dir.display()),
                    false,
                ));
            }
        }
        let _ = fs::OpenOptions::new().create(true).append(true).open(&lock);
        let metadata = self.read_metadata(&meta, &file_path, filename);
        let force = o.force_download;
        if !force
            && is_commit_hash(revision)
            && file_path.is_file()
            && metadata.as_ref().is_some_and(|m| m.commit == revision)
        {
            return Ok(file_path);
        }
        let (file, commit) = match self.head(o, revision, filename) {
            Ok(x) => x,
            Err(e) if matches!(e.kind, Refusal::RevisionNotFound | Refusal::EntryNotFound) => {
                return Err(e.at_file(call, Dest::LocalDir));
            }
            Err(e) => {
                if !force && file_path.is_file() {
                    self.log_warning(&format!(
                        "Couldn't access the Hub to check for update but local file already exists. Defaulting to \
                         existing file. (error: {})",
                        e.message
                    ));
                    return Ok(file_path);
                }
                return Err(e.at_file(call, Dest::LocalDir));
            }
        };
        if !force && file_path.is_file() && metadata.as_ref().is_some_and(|m| m.etag == file.etag) {
            write_metadata(&meta, &commit, &file.etag);
            return Ok(file_path);
        }
        let _ = fs::remove_file(&file_path);
        let short = sha1::base64_urlsafe(&sha1::digest(
            format!(
                "{}.metadata",
                Path::new(filename)
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
            )
            .as_bytes(),
        ));
        let incomplete = meta
            .parent()
            .unwrap_or(&download)
            .join(format!("{short}.{}.incomplete", file.etag));
        self.download_to_tmp_and_move(&file, &incomplete, &file_path, force, call, Dest::LocalDir)?;
        write_metadata(&meta, &commit, &file.etag);
        Ok(file_path)
    }

    /// `_hf_hub_download_to_cache_dir`.
    fn download_to_cache(
        &mut self,
        o: &Opts,
        storage: &Path,
        revision: &str,
        filename: &str,
        call: Call,
    ) -> Result<PathBuf, PyErr> {
        let force = o.force_download;
        if is_commit_hash(revision) {
            let pointer = storage.join("snapshots").join(revision).join(filename);
            if pointer.exists() && !force {
                return Ok(pointer);
            }
        }
        let (file, commit) = match self.head(o, revision, filename) {
            Ok(x) => x,
            Err(e) if matches!(e.kind, Refusal::RevisionNotFound | Refusal::EntryNotFound) => {
                return Err(e.at_file(call, Dest::Cache));
            }
            Err(e) => {
                let commit = if is_commit_hash(revision) {
                    Some(revision.to_string())
                } else {
                    fs::read_to_string(storage.join("refs").join(revision)).ok()
                };
                if let Some(c) = commit {
                    let pointer = storage.join("snapshots").join(c.trim()).join(filename);
                    if pointer.exists() && !force {
                        return Ok(pointer);
                    }
                }
                return Err(e.at_file(call, Dest::Cache));
            }
        };
        let blob = storage.join("blobs").join(&file.etag);
        let pointer = storage.join("snapshots").join(&commit).join(filename);
        for dir in [blob.parent(), pointer.parent()].into_iter().flatten() {
            let _ = fs::create_dir_all(dir);
        }
        if revision != commit {
            let refs = storage.join("refs").join(revision);
            if let Some(d) = refs.parent() {
                let _ = fs::create_dir_all(d);
            }
            let _ = fs::write(refs, &commit);
        }
        if !force {
            if pointer.exists() {
                return Ok(pointer);
            }
            if blob.exists() {
                link(&blob, &pointer);
                return Ok(pointer);
            }
        }
        let incomplete = PathBuf::from(format!("{}.incomplete", blob.display()));
        self.download_to_tmp_and_move(&file, &incomplete, &blob, force, call, Dest::Cache)?;
        if !pointer.exists() {
            link(&blob, &pointer);
        }
        Ok(pointer)
    }

    fn one(
        &mut self,
        o: &Opts,
        storage: &Path,
        revision: &str,
        filename: &str,
        call: Call,
    ) -> Result<PathBuf, PyErr> {
        match &o.local_dir {
            Some(ld) => {
                self.download_to_local_dir(o, Path::new(&py_path(ld)), revision, filename, call)
            }
            None => self.download_to_cache(o, storage, revision, filename, call),
        }
    }

    /// `hf download`: the path printed on success, or the exception that ends it.
    pub fn run(&mut self, o: &Opts) -> Result<String, PyErr> {
        let call = if o.filenames.len() == 1 {
            Call::Single
        } else {
            Call::Snapshot
        };
        if let Some(e) = py::validate_repo_id(&o.repo_id, call) {
            return Err(e);
        }
        let download_py = "/usr/local/lib/python3.12/dist-packages/huggingface_hub/cli/download.py";
        if !o.filenames.is_empty() {
            if o.include.as_ref().is_some_and(|v| !v.is_empty()) {
                self.warn(
                    &format!("{download_py}:143"),
                    "Ignoring `--include` since filenames have being explicitly set.",
                    "warnings.warn(\"Ignoring `--include` since filenames have being explicitly set.\")",
                );
            }
            if o.exclude.as_ref().is_some_and(|v| !v.is_empty()) {
                self.warn(
                    &format!("{download_py}:145"),
                    "Ignoring `--exclude` since filenames have being explicitly set.",
                    "warnings.warn(\"Ignoring `--exclude` since filenames have being explicitly set.\")",
                );
            }
        }
        let revision = o.revision.clone().unwrap_or_else(|| "main".into());
        let cache = o
            .cache_dir
            .clone()
            .map(PathBuf::from)
            .or_else(|| env_nonempty("HF_HUB_CACHE").map(PathBuf::from))
            .or_else(|| env_nonempty("HUGGINGFACE_HUB_CACHE").map(PathBuf::from))
            .unwrap_or_else(|| hf_home().join("hub"));
        let (org_name, _) = (o.repo_id.replace('/', "--"), ());
        let storage = cache.join(format!("{}s--{org_name}", o.repo_type));
        if call == Call::Single {
            let p = self.one(o, &storage, &revision, &o.filenames[0], call)?;
            return Ok(p.to_string_lossy().into_owned());
        }
        let (_, rev) = match self.repo_info(o, &revision) {
            Ok(x) => x,
            Err(e) if e.kind == Refusal::RevisionNotFound => {
                return Err(e.at_repo_info(&o.repo_type));
            }
            Err(e) => {
                let commit = if is_commit_hash(&revision) {
                    Some(revision.clone())
                } else {
                    fs::read_to_string(storage.join("refs").join(&revision)).ok()
                };
                if let (Some(c), None) = (commit, &o.local_dir) {
                    let snap = storage.join("snapshots").join(c.trim());
                    if snap.exists() {
                        return Ok(snap.to_string_lossy().into_owned());
                    }
                }
                if let Some(ld) = &o.local_dir {
                    let p = PathBuf::from(py_path(ld));
                    if p.is_dir() && fs::read_dir(&p).is_ok_and(|mut d| d.next().is_some()) {
                        self.log_warning(&format!(
                            "Returning existing local_dir `{}` as remote repo cannot be accessed in \
                             `snapshot_download` ({}).",
                            p.display(),
                            e.message
                        ));
                        return Ok(realpath(&p));
                    }
                }
                return Err(e.at_repo_info(&o.repo_type));
            }
        };
        let (allow, ignore) = if o.filenames.is_empty() {
            (o.include.as_deref(), o.exclude.as_deref())
        } else {
            (Some(o.filenames.as_slice()), None)
        };
        let files = filter(rev.files, allow, ignore);
        if o.local_dir.is_none() && revision != rev.commit {
            let refs = storage.join("refs").join(&revision);
            if let Some(d) = refs.parent() {
                let _ = fs::create_dir_all(d);
            }
            if let Err(e) = fs::write(&refs, &rev.commit) {
                self.log_warning(&format!(
                    "Ignored error while writing commit hash to {}: {}.",
                    refs.display(),
                    e
                ));
            }
        }
        let mut bar = tqdm::Bar::new(
            &format!("Fetching {} files", files.len()),
            files.len() as u64,
            self.bars,
        );
        for f in &files {
            let r = self.one(o, &storage, &rev.commit, &f.path, call);
            bar.update();
            if let Err(e) = r {
                bar.close();
                return Err(e);
            }
        }
        bar.close();
        Ok(match &o.local_dir {
            Some(ld) => realpath(Path::new(&py_path(ld))),
            None => storage
                .join("snapshots")
                .join(&rev.commit)
                .to_string_lossy()
                .into_owned(),
        })
    }
}

/// `_create_symlink`: a relative link from the snapshot to the blob.
fn link(blob: &Path, pointer: &Path) {
    let depth = pointer
        .strip_prefix(
            blob.parent()
                .and_then(Path::parent)
                .unwrap_or(Path::new("/")),
        )
        .map(|p| p.components().count().saturating_sub(1))
        .unwrap_or(2);
    let mut rel = PathBuf::new();
    for _ in 0..depth {
        rel.push("..");
    }
    rel.push("blobs");
    rel.push(blob.file_name().unwrap_or_default());
    let _ = fs::remove_file(pointer);
    if std::os::unix::fs::symlink(&rel, pointer).is_err() {
        let _ = fs::copy(blob, pointer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(quote("refs/pr/1", ""), "refs%2Fpr%2F1");
        assert_eq!(quote("a b/c.json", "/"), "a%20b/c.json");
        assert_eq!(py_path("/data//model/./"), "/data/model");
        assert_eq!(py_path("./m"), "m");
        assert!(fnmatch("config.json", "*.json"));
        assert!(fnmatch("sub/x.json", "*.json"));
        assert!(fnmatch("sub/x.json", "sub/*"));
        assert!(!fnmatch("REVISION", "*.json"));
        assert!(fnmatch("a1", "a[0-9]"));
        assert!(!fnmatch("ab", "a[!b]"));
        assert!(fnmatch("x?", "x[?]"));
    }
}
