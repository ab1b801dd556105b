//! What the real `hf download` (huggingface_hub 0.36.2 on Python 3.12, installed in vLLM's image)
//! prints when it fails: it does not catch exceptions, so Python prints the traceback on stderr
//! and exits 1. The frames below are the real ones (file, line, function, source line and
//! Python 3.12's `^^^` markers), as the real client printed them against a stand-in for the Hub
//! (crates/vllm-sim/tools/capture-hf-logs.py); crates/operator/tests/fixtures/hf-logs has the
//! logs. The Hub's refusals become huggingface_hub's messages (`hf_raise_for_status`).

use crate::hub::Refusal;

macro_rules! hf_path {
    ($p:literal) => {
        concat!(
            "/usr/local/lib/python3.12/dist-packages/huggingface_hub/",
            $p
        )
    };
}

const STDLIB: &str = "/usr/lib/python3.12/concurrent/futures/";
const TQDM: &str = "/usr/local/lib/python3.12/dist-packages/tqdm/contrib/concurrent.py";
const REQUESTS: &str = "/usr/local/lib/python3.12/dist-packages/requests/models.py";
const FILE_DOWNLOAD: &str = hf_path!("file_download.py");
const VALIDATORS: &str = hf_path!("utils/_validators.py");
const HTTP: &str = hf_path!("utils/_http.py");
const SNAPSHOT: &str = hf_path!("_snapshot_download.py");
pub const WARNING_AT: &str = concat!(
    "/usr/local/lib/python3.12/dist-packages/huggingface_hub/",
    "file_download.py:805"
);

#[derive(Clone)]
pub struct Frame {
    file: String,
    line: u32,
    func: &'static str,
    code: String,
    /// The part of `code` Python 3.12 underlines (`None`: the whole line, not underlined).
    expr: Option<String>,
}

fn frame(file: &str, line: u32, func: &'static str, code: &str, expr: Option<&str>) -> Frame {
    Frame {
        file: file.to_string(),
        line,
        func,
        code: code.to_string(),
        expr: expr.map(String::from),
    }
}

impl Frame {
    fn render(&self) -> String {
        let mut s = format!(
            "  File \"{}\", line {}, in {}\n    {}\n",
            self.file, self.line, self.func, self.code
        );
        if let Some(expr) = &self.expr
            && let Some(at) = self.code.rfind(expr.as_str())
        {
            s.push_str(&format!(
                "    {}{}\n",
                " ".repeat(self.code[..at].chars().count()),
                "^".repeat(expr.chars().count())
            ));
        }
        s
    }
}

/// A Python exception as the interpreter prints it when it ends the program.
pub struct PyErr {
    /// The `__cause__` (requests' HTTPError), printed first.
    cause: Option<(Vec<Frame>, String)>,
    frames: Vec<Frame>,
    exc: String,
    message: String,
}

impl PyErr {
    pub fn render(&self) -> String {
        let mut s = String::new();
        if let Some((frames, line)) = &self.cause {
            s.push_str("Traceback (most recent call last):\n");
            for f in frames {
                s.push_str(&f.render());
            }
            s.push_str(&format!(
                "{line}\n\nThe above exception was the direct cause of the following exception:\n\n"
            ));
        }
        s.push_str("Traceback (most recent call last):\n");
        for f in &self.frames {
            s.push_str(&f.render());
        }
        s.push_str(&format!("{}: {}\n", self.exc, self.message));
        s
    }
}

/// How the CLI called into the library: `snapshot_download` (no or several file names) or
/// `hf_hub_download` (one).
#[derive(Clone, Copy, PartialEq)]
pub enum Call {
    Snapshot,
    Single,
}

/// Where files go: `--local-dir`, or the cache.
#[derive(Clone, Copy, PartialEq)]
pub enum Dest {
    LocalDir,
    Cache,
}

fn validators() -> Frame {
    frame(
        VALIDATORS,
        114,
        "_inner_fn",
        "return fn(*args, **kwargs)",
        Some("fn(*args, **kwargs)"),
    )
}

fn cli(call: Call) -> Vec<Frame> {
    let mut v = vec![
        frame(
            "/usr/local/bin/hf",
            10,
            "<module>",
            "sys.exit(main())",
            Some("main()"),
        ),
        frame(hf_path!("cli/hf.py"), 59, "main", "service.run()", None),
        frame(
            hf_path!("cli/download.py"),
            136,
            "run",
            "print(self._download())  # Print path to downloaded files",
            Some("self._download()"),
        ),
    ];
    v.push(match call {
        Call::Snapshot => frame(
            hf_path!("cli/download.py"),
            169,
            "_download",
            "return snapshot_download(",
            Some("snapshot_download("),
        ),
        Call::Single => frame(
            hf_path!("cli/download.py"),
            149,
            "_download",
            "return hf_hub_download(",
            Some("hf_hub_download("),
        ),
    });
    v
}

/// From `snapshot_download`'s worker threads to `hf_hub_download`'s inner function.
fn thread_map() -> Vec<Frame> {
    vec![
        frame(SNAPSHOT, 332, "snapshot_download", "thread_map(", None),
        frame(
            TQDM,
            191,
            "thread_map",
            "return _executor_map(ThreadPoolExecutor, fn, *iterables, **tqdm_kwargs)",
            Some("_executor_map(ThreadPoolExecutor, fn, *iterables, **tqdm_kwargs)"),
        ),
        frame(
            TQDM,
            163,
            "_executor_map",
            "return list(ex.map(",
            Some("list(ex.map("),
        ),
        frame(
            &format!("{STDLIB}_base.py"),
            619,
            "result_iterator",
            "yield _result_or_cancel(fs.pop())",
            Some("_result_or_cancel(fs.pop())"),
        ),
        frame(
            &format!("{STDLIB}_base.py"),
            317,
            "_result_or_cancel",
            "return fut.result(timeout)",
            Some("fut.result(timeout)"),
        ),
        frame(
            &format!("{STDLIB}_base.py"),
            456,
            "result",
            "return self.__get_result()",
            Some("self.__get_result()"),
        ),
        frame(
            &format!("{STDLIB}_base.py"),
            401,
            "__get_result",
            "raise self._exception",
            None,
        ),
        frame(
            &format!("{STDLIB}thread.py"),
            58,
            "run",
            "result = self.fn(*self.args, **self.kwargs)",
            Some("self.fn(*self.args, **self.kwargs)"),
        ),
        frame(
            SNAPSHOT,
            306,
            "_inner_hf_hub_download",
            "return hf_hub_download(",
            Some("hf_hub_download("),
        ),
        validators(),
    ]
}

/// `hf_hub_download` → the local-dir or cache variant.
fn to_dest(dest: Dest) -> (Frame, &'static str) {
    match dest {
        Dest::LocalDir => (
            frame(
                FILE_DOWNLOAD,
                994,
                "hf_hub_download",
                "return _hf_hub_download_to_local_dir(",
                Some("_hf_hub_download_to_local_dir("),
            ),
            "_hf_hub_download_to_local_dir",
        ),
        Dest::Cache => (
            frame(
                FILE_DOWNLOAD,
                1014,
                "hf_hub_download",
                "return _hf_hub_download_to_cache_dir(",
                Some("_hf_hub_download_to_cache_dir("),
            ),
            "_hf_hub_download_to_cache_dir",
        ),
    }
}

fn head_call() -> Vec<Frame> {
    vec![
        frame(
            FILE_DOWNLOAD,
            1550,
            "_get_metadata_or_catch_error",
            "metadata = get_hf_file_metadata(",
            Some("get_hf_file_metadata("),
        ),
        validators(),
        frame(
            FILE_DOWNLOAD,
            1467,
            "get_hf_file_metadata",
            "r = _request_wrapper(",
            Some("_request_wrapper("),
        ),
        frame(
            FILE_DOWNLOAD,
            283,
            "_request_wrapper",
            "response = _request_wrapper(",
            Some("_request_wrapper("),
        ),
        frame(
            FILE_DOWNLOAD,
            307,
            "_request_wrapper",
            "hf_raise_for_status(response)",
            None,
        ),
    ]
}

fn error_class(kind: &Refusal) -> &'static str {
    match kind {
        Refusal::RepoNotFound => "RepositoryNotFoundError",
        Refusal::RevisionNotFound => "RevisionNotFoundError",
        Refusal::EntryNotFound => "EntryNotFoundError",
        Refusal::Gated => "GatedRepoError",
    }
}

/// A refusal from the Hub, as `hf_raise_for_status` words it.
#[derive(Clone)]
pub struct HttpError {
    pub kind: Refusal,
    pub status: u16,
    pub url: String,
    /// `str(error)`: what the traceback's last line and huggingface_hub's warnings show.
    pub message: String,
}

fn reason(status: u16) -> &'static str {
    match status {
        401 => "Unauthorized",
        403 => "Forbidden",
        _ => "Not Found",
    }
}

impl HttpError {
    pub fn new(
        kind: Refusal,
        has_token: bool,
        url: &str,
        repo_id: &str,
        revision: &str,
        request_id: &str,
    ) -> HttpError {
        let status = match (&kind, has_token) {
            (Refusal::RepoNotFound, false) | (Refusal::Gated, false) => 401,
            (Refusal::Gated, true) => 403,
            _ => 404,
        };
        let head = format!("{status} Client Error. (Request ID: {request_id})\n\n");
        let body = match kind {
            Refusal::RevisionNotFound => {
                format!("Revision Not Found for url: {url}.\nInvalid rev id: {revision}")
            }
            Refusal::EntryNotFound => format!("Entry Not Found for url: {url}."),
            Refusal::Gated if has_token => format!(
                "Cannot access gated repo for url {url}.\nAccess to model {repo_id} is restricted and you are \
                 not in the authorized list. Visit https://huggingface.co/{repo_id} to ask for access."
            ),
            Refusal::Gated => format!(
                "Cannot access gated repo for url {url}.\nAccess to model {repo_id} is restricted. You must have \
                 access to it and be authenticated to access it. Please log in."
            ),
            Refusal::RepoNotFound => {
                let mut m = format!(
                    "Repository Not Found for url: {url}.\nPlease make sure you specified the correct `repo_id` and \
                     `repo_type`.\nIf you are trying to access a private or gated repo, make sure you are \
                     authenticated. For more details, see https://huggingface.co/docs/huggingface_hub/authentication"
                );
                if !has_token {
                    m.push_str("\nInvalid username or password.");
                }
                m
            }
        };
        HttpError {
            kind,
            status,
            url: url.to_string(),
            message: format!("{head}{body}"),
        }
    }

    fn cause(&self) -> (Vec<Frame>, String) {
        (
            vec![
                frame(
                    HTTP,
                    403,
                    "hf_raise_for_status",
                    "response.raise_for_status()",
                    None,
                ),
                frame(
                    REQUESTS,
                    1167,
                    "raise_for_status",
                    "raise HTTPError(http_error_msg, response=self)",
                    None,
                ),
            ],
            format!(
                "requests.exceptions.HTTPError: {} Client Error: {} for url: {}",
                self.status,
                reason(self.status),
                self.url
            ),
        )
    }

    fn raise_frame(&self) -> Frame {
        let line = match self.kind {
            Refusal::RevisionNotFound => 410,
            Refusal::EntryNotFound => 414,
            Refusal::Gated => 420,
            Refusal::RepoNotFound => 453,
        };
        frame(
            HTTP,
            line,
            "hf_raise_for_status",
            &format!(
                "raise _format({}, message, response) from e",
                error_class(&self.kind)
            ),
            None,
        )
    }

    fn into_err(self, frames: Vec<Frame>) -> PyErr {
        PyErr {
            cause: Some(self.cause()),
            frames,
            exc: format!("huggingface_hub.errors.{}", error_class(&self.kind)),
            message: self.message,
        }
    }

    /// Refused at `repo_info` (api/models/<repo>/revision/<rev>) in `snapshot_download`. A missing
    /// repo is caught there and raised again later; a missing revision is raised at once.
    pub fn at_repo_info(self, repo_type: &str) -> PyErr {
        let mut frames = cli(Call::Snapshot);
        frames.push(validators());
        if self.kind != Refusal::RevisionNotFound {
            frames.push(frame(
                SNAPSHOT,
                245,
                "snapshot_download",
                "raise api_call_error",
                None,
            ));
        }
        frames.push(frame(
            SNAPSHOT,
            165,
            "snapshot_download",
            "repo_info = api.repo_info(repo_id=repo_id, repo_type=repo_type, revision=revision)",
            Some("api.repo_info(repo_id=repo_id, repo_type=repo_type, revision=revision)"),
        ));
        frames.push(validators());
        frames.push(frame(
            hf_path!("hf_api.py"),
            2867,
            "repo_info",
            "return method(",
            Some("method("),
        ));
        frames.push(validators());
        let (line, func) = match repo_type {
            "dataset" => (2731, "dataset_info"),
            "space" => (2801, "space_info"),
            _ => (2661, "model_info"),
        };
        frames.push(frame(
            hf_path!("hf_api.py"),
            line,
            func,
            "hf_raise_for_status(r)",
            None,
        ));
        frames.push(self.raise_frame());
        self.into_err(frames)
    }

    /// Refused at the HEAD of a file (`get_hf_file_metadata`). Missing revisions and files are
    /// raised at once; a gated or missing repo is caught, then raised again.
    pub fn at_file(self, call: Call, dest: Dest) -> PyErr {
        let mut frames = cli(call);
        frames.push(validators());
        if call == Call::Snapshot {
            frames.extend(thread_map());
        }
        let (to, func) = to_dest(dest);
        frames.push(to);
        let direct = matches!(
            self.kind,
            Refusal::RevisionNotFound | Refusal::EntryNotFound
        );
        if direct {
            frames.push(frame(
                FILE_DOWNLOAD,
                if dest == Dest::LocalDir { 1236 } else { 1077 },
                func,
                "(url_to_download, etag, commit_hash, expected_size, xet_file_data, head_call_error) = \
                 _get_metadata_or_catch_error(",
                Some("_get_metadata_or_catch_error("),
            ));
        } else {
            frames.push(frame(
                FILE_DOWNLOAD,
                if dest == Dest::LocalDir { 1257 } else { 1121 },
                func,
                "_raise_on_head_call_error(head_call_error, force_download, local_files_only)",
                None,
            ));
            frames.push(frame(
                FILE_DOWNLOAD,
                1662,
                "_raise_on_head_call_error",
                "raise head_call_error",
                None,
            ));
        }
        frames.extend(head_call());
        frames.push(self.raise_frame());
        self.into_err(frames)
    }
}

/// An `OSError` while writing the downloaded bytes (`[Errno 28] No space left on device`).
/// Python's buffered file raises it at `write` when the data is larger than its 8 KiB buffer,
/// else when the file is closed at the end of the `with` block.
pub fn os_error(call: Call, dest: Dest, errno: i32, strerror: &str, large: bool) -> PyErr {
    let mut frames = cli(call);
    frames.push(validators());
    if call == Call::Snapshot {
        frames.extend(thread_map());
    }
    let (to, func) = to_dest(dest);
    frames.push(to);
    frames.push(frame(
        FILE_DOWNLOAD,
        if dest == Dest::LocalDir { 1304 } else { 1175 },
        func,
        "_download_to_tmp_and_move(",
        None,
    ));
    if large {
        frames.push(frame(
            FILE_DOWNLOAD,
            1742,
            "_download_to_tmp_and_move",
            "http_get(",
            None,
        ));
        frames.push(frame(
            FILE_DOWNLOAD,
            503,
            "http_get",
            "temp_file.write(chunk)",
            None,
        ));
    } else {
        frames.push(frame(
            FILE_DOWNLOAD,
            1713,
            "_download_to_tmp_and_move",
            "with incomplete_path.open(\"ab\") as f:",
            None,
        ));
    }
    PyErr {
        cause: None,
        frames,
        exc: "OSError".into(),
        message: format!("[Errno {errno}] {strerror}"),
    }
}

/// `validate_repo_id` (huggingface_hub/utils/_validators.py): `None` if valid.
pub fn validate_repo_id(repo_id: &str, call: Call) -> Option<PyErr> {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let part_ok = |p: &str, max: usize| {
        !p.is_empty()
            && p.chars().count() <= max
            && p.chars().all(|c| word(c) || c == '-' || c == '.')
            && p.chars().next().is_some_and(word)
            && p.chars().last().is_some_and(word)
    };
    let (line, code, message) = if repo_id.matches('/').count() > 1 {
        (
            154,
            "raise HFValidationError(".to_string(),
            format!(
                "Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{repo_id}'. Use `repo_type` \
                 argument if needed."
            ),
        )
    } else if !match repo_id.split_once('/') {
        Some((ns, name)) => part_ok(ns, usize::MAX) && part_ok(name, 96),
        None => part_ok(repo_id, 96),
    } {
        (
            160,
            "raise HFValidationError(".to_string(),
            format!(
                "Repo id must use alphanumeric chars, '-', '_' or '.'. The name cannot start or end with '-' or '.' \
                 and the maximum length is 96: '{repo_id}'."
            ),
        )
    } else if repo_id.contains("--") || repo_id.contains("..") {
        (
            167,
            "raise HFValidationError(f\"Cannot have -- or .. in repo_id: '{repo_id}'.\")"
                .to_string(),
            format!("Cannot have -- or .. in repo_id: '{repo_id}'."),
        )
    } else if repo_id.ends_with(".git") {
        (
            170,
            "raise HFValidationError(f\"Repo_id cannot end by '.git': '{repo_id}'.\")".to_string(),
            format!("Repo_id cannot end by '.git': '{repo_id}'."),
        )
    } else {
        return None;
    };
    let mut frames = cli(call);
    frames.push(frame(
        VALIDATORS,
        106,
        "_inner_fn",
        "validate_repo_id(arg_value)",
        None,
    ));
    frames.push(frame(VALIDATORS, line, "validate_repo_id", &code, None));
    Some(PyErr {
        cause: None,
        frames,
        exc: "huggingface_hub.errors.HFValidationError".into(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_not_found_is_the_real_text() {
        let e = HttpError::new(
            Refusal::RepoNotFound,
            false,
            "https://huggingface.co/api/models/org/x/revision/main",
            "org/x",
            "main",
            "Root=1-0-0;0",
        );
        assert_eq!(e.status, 401);
        let text = e.at_repo_info("model").render();
        assert!(text.starts_with("Traceback (most recent call last):\n  File \"/usr/local/lib/python3.12/dist-packages/huggingface_hub/utils/_http.py\", line 403, in hf_raise_for_status\n"));
        assert!(text.contains("requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/api/models/org/x/revision/main\n\nThe above exception was the direct cause of the following exception:\n\n"));
        assert!(text.contains("  File \"/usr/local/bin/hf\", line 10, in <module>\n    sys.exit(main())\n             ^^^^^^\n"));
        assert!(text.ends_with("huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: Root=1-0-0;0)\n\nRepository Not Found for url: https://huggingface.co/api/models/org/x/revision/main.\nPlease make sure you specified the correct `repo_id` and `repo_type`.\nIf you are trying to access a private or gated repo, make sure you are authenticated. For more details, see https://huggingface.co/docs/huggingface_hub/authentication\nInvalid username or password.\n"));
    }

    #[test]
    fn disk_full_message() {
        let e = os_error(
            Call::Snapshot,
            Dest::LocalDir,
            28,
            "No space left on device",
            false,
        );
        let text = e.render();
        assert!(text.ends_with("line 1713, in _download_to_tmp_and_move\n    with incomplete_path.open(\"ab\") as f:\nOSError: [Errno 28] No space left on device\n"), "{text}");
        let big = os_error(
            Call::Snapshot,
            Dest::LocalDir,
            28,
            "No space left on device",
            true,
        )
        .render();
        assert!(big.ends_with("line 503, in http_get\n    temp_file.write(chunk)\nOSError: [Errno 28] No space left on device\n"));
    }

    #[test]
    fn repo_ids() {
        assert!(validate_repo_id("Qwen/Qwen2.5-0.5B-Instruct", Call::Snapshot).is_none());
        assert!(validate_repo_id("gpt2", Call::Snapshot).is_none());
        let e = validate_repo_id("a/b/c", Call::Snapshot).unwrap().render();
        assert!(e.ends_with("huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': 'a/b/c'. Use `repo_type` argument if needed.\n"));
        assert!(
            validate_repo_id("org/-x", Call::Snapshot)
                .unwrap()
                .render()
                .contains("Repo id must use alphanumeric chars")
        );
        assert!(
            validate_repo_id("org/a..b", Call::Snapshot)
                .unwrap()
                .render()
                .contains("Cannot have -- or .. in repo_id: 'org/a..b'.")
        );
    }
}
