//! `hf`: a SIMULATOR of huggingface_hub's `hf download` CLI (huggingface_hub 0.36.2, the version
//! vLLM 0.18's image ships), for a test cluster that cannot reach the Hub. It copies from a local
//! fixture tree (`$VLLM_SIM_HUB_DIR`, default `/srv/hub`; see hub.rs) and prints what the real
//! client prints: INFO lines and tqdm's "Fetching N files" bar on stderr, the downloaded path on
//! stdout, and on failure the Python traceback and exit code 1 (argparse errors: 2). The token
//! (`--token`, `HF_TOKEN`) is never printed. See crates/vllm-sim/README.md.

mod download;
mod hub;
mod py;
mod sha1;
mod tqdm;

use std::process::ExitCode;

pub mod out {
    use std::io::Write;

    pub fn err(s: &str) {
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(s.as_bytes());
        let _ = e.flush();
    }

    pub fn out(s: &str) {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(s.as_bytes());
        let _ = o.flush();
    }
}

/// huggingface_hub's version, as `hf version` prints it.
const HF_VERSION: &str = "0.36.2";

const TOP_USAGE: &str = "usage: hf <command> [<args>]\n";
const COMMANDS: &[&str] = &[
    "auth",
    "cache",
    "download",
    "jobs",
    "repo",
    "repo-files",
    "upload",
    "upload-large-folder",
    "env",
    "version",
    "lfs-enable-largefiles",
    "lfs-multipart-upload",
];

const TOP_HELP: &str = "usage: hf <command> [<args>]

positional arguments:
  {auth,cache,download,jobs,repo,repo-files,upload,upload-large-folder,env,version,lfs-enable-largefiles,lfs-multipart-upload}
                        hf command helpers
    auth                Manage authentication (login, logout, etc.).
    cache               Manage local cache directory.
    download            Download files from the Hub
    jobs                Run and manage Jobs on the Hub.
    repo                Manage repos on the Hub.
    repo-files          Manage files in a repo on the Hub.
    upload              Upload a file or a folder to the Hub. Recommended for
                        single-commit uploads.
    upload-large-folder
                        Upload a large folder to the Hub. Recommended for
                        resumable uploads.
    env                 Print information about the environment.
    version             Print information about the hf version.

options:
  -h, --help            show this help message and exit
";

const DOWNLOAD_USAGE: &str =
    "usage: hf <command> [<args>] download [-h] [--repo-type {model,dataset,space}]
                                      [--revision REVISION]
                                      [--include [INCLUDE ...]]
                                      [--exclude [EXCLUDE ...]]
                                      [--cache-dir CACHE_DIR]
                                      [--local-dir LOCAL_DIR]
                                      [--force-download] [--token TOKEN]
                                      [--quiet] [--max-workers MAX_WORKERS]
                                      repo_id [filenames ...]
";

const DOWNLOAD_HELP: &str = "
positional arguments:
  repo_id               ID of the repo to download from (e.g. `username/repo-
                        name`).
  filenames             Files to download (e.g. `config.json`,
                        `data/metadata.jsonl`).

options:
  -h, --help            show this help message and exit
  --repo-type {model,dataset,space}
                        Type of repo to download from (defaults to 'model').
  --revision REVISION   An optional Git revision id which can be a branch
                        name, a tag, or a commit hash.
  --include [INCLUDE ...]
                        Glob patterns to match files to download.
  --exclude [EXCLUDE ...]
                        Glob patterns to exclude from files to download.
  --cache-dir CACHE_DIR
                        Path to the directory where to save the downloaded
                        files.
  --local-dir LOCAL_DIR
                        If set, the downloaded file will be placed under this
                        directory. Check out https://huggingface.co/docs/huggi
                        ngface_hub/guides/download#download-files-to-local-
                        folder for more details.
  --force-download      If True, the files will be downloaded even if they are
                        already cached.
  --token TOKEN         A User Access Token generated from
                        https://huggingface.co/settings/tokens
  --quiet               If True, progress bars are disabled and only the path
                        to the download files is printed.
  --max-workers MAX_WORKERS
                        Maximum number of workers to use for downloading
                        files. Default is 8.

vllm-sim: this `hf` is a simulator (crates/vllm-sim). It copies from the fixture tree
$VLLM_SIM_HUB_DIR (default /srv/hub) instead of the Hub; see crates/vllm-sim/README.md.
";

/// An argparse error: the parser's usage, then `<prog>: error: <message>`, exit 2.
struct ArgError {
    usage: &'static str,
    prog: &'static str,
    message: String,
}

enum Parsed {
    Help(&'static str),
    Download(Box<download::Opts>),
}

/// The options of `hf download`: (name, takes a value, `nargs="*"`).
const OPTIONS: &[(&str, bool, bool)] = &[
    ("--help", false, false),
    ("--repo-type", true, false),
    ("--revision", true, false),
    ("--include", true, true),
    ("--exclude", true, true),
    ("--cache-dir", true, false),
    ("--local-dir", true, false),
    ("--force-download", false, false),
    ("--token", true, false),
    ("--quiet", false, false),
    ("--max-workers", true, false),
];

fn looks_like_option(s: &str) -> bool {
    s.starts_with('-') && s.len() > 1 && s.parse::<f64>().is_err()
}

fn parse_download(args: &[String]) -> Result<Parsed, ArgError> {
    let err = |message: String| ArgError {
        usage: DOWNLOAD_USAGE,
        prog: "hf <command> [<args>] download",
        message,
    };
    let mut o = download::Opts {
        repo_id: String::new(),
        filenames: Vec::new(),
        repo_type: "model".into(),
        revision: None,
        include: None,
        exclude: None,
        cache_dir: None,
        local_dir: None,
        force_download: false,
        token: None,
        quiet: false,
    };
    let mut positionals = Vec::new();
    let mut unknown = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            positionals.extend(args[i..].iter().cloned());
            break;
        }
        if !looks_like_option(a) {
            positionals.push(a.clone());
            continue;
        }
        if a == "-h" {
            return Ok(Parsed::Help("download"));
        }
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        // argparse accepts any unambiguous prefix of a long option.
        let matches: Vec<&(&str, bool, bool)> = OPTIONS
            .iter()
            .filter(|(o, _, _)| *o == name || (name.len() > 2 && o.starts_with(name.as_str())))
            .collect();
        let exact = OPTIONS.iter().find(|(o, _, _)| *o == name);
        let spec = match (exact, matches.len()) {
            (Some(s), _) => s,
            (None, 1) => matches[0],
            (None, 0) => {
                unknown.push(a.clone());
                continue;
            }
            (None, _) => {
                let names: Vec<&str> = matches.iter().map(|(o, _, _)| *o).collect();
                return Err(err(format!(
                    "ambiguous option: {name} could match {}",
                    names.join(", ")
                )));
            }
        };
        let (opt, takes, star) = *spec;
        let mut values = Vec::new();
        if takes {
            if let Some(v) = inline {
                values.push(v);
            } else if star {
                while i < args.len() && !looks_like_option(&args[i]) {
                    values.push(args[i].clone());
                    i += 1;
                }
            } else if i < args.len() && !looks_like_option(&args[i]) {
                values.push(args[i].clone());
                i += 1;
            } else {
                return Err(err(format!("argument {opt}: expected one argument")));
            }
        } else if let Some(v) = inline {
            return Err(err(format!(
                "argument {opt}: ignored explicit argument '{v}'"
            )));
        }
        let one = values.first().cloned().unwrap_or_default();
        match opt {
            "--help" => return Ok(Parsed::Help("download")),
            "--repo-type" => {
                if !["model", "dataset", "space"].contains(&one.as_str()) {
                    return Err(err(format!(
                        "argument --repo-type: invalid choice: '{one}' (choose from model, dataset, space)"
                    )));
                }
                o.repo_type = one;
            }
            "--revision" => o.revision = Some(one),
            "--include" => o.include = Some(values),
            "--exclude" => o.exclude = Some(values),
            "--cache-dir" => o.cache_dir = Some(one),
            "--local-dir" => o.local_dir = Some(one),
            "--force-download" => o.force_download = true,
            "--token" => o.token = Some(one),
            "--quiet" => o.quiet = true,
            "--max-workers" if one.trim().parse::<i64>().is_err() => {
                return Err(err(format!(
                    "argument --max-workers: invalid int value: '{one}'"
                )));
            }
            _ => {}
        }
    }
    if positionals.is_empty() {
        return Err(err(
            "the following arguments are required: repo_id, filenames".into(),
        ));
    }
    o.repo_id = positionals.remove(0);
    o.filenames = positionals;
    if !unknown.is_empty() {
        return Err(ArgError {
            usage: TOP_USAGE,
            prog: "hf",
            message: format!("unrecognized arguments: {}", unknown.join(" ")),
        });
    }
    Ok(Parsed::Download(Box::new(o)))
}

fn parse(args: &[String]) -> Result<Option<Parsed>, ArgError> {
    let Some(first) = args.first() else {
        return Ok(None);
    };
    match first.as_str() {
        "-h" | "--help" => Ok(Some(Parsed::Help("hf"))),
        "download" => parse_download(&args[1..]).map(Some),
        "version" => Ok(Some(Parsed::Help("version"))),
        s if looks_like_option(s) => Err(ArgError {
            usage: TOP_USAGE,
            prog: "hf",
            message: format!("unrecognized arguments: {}", args.join(" ")),
        }),
        s if COMMANDS.contains(&s) => Ok(Some(Parsed::Help("unsimulated"))),
        s => Err(ArgError {
            usage: TOP_USAGE,
            prog: "hf",
            message: format!(
                "argument {{{}}}: invalid choice: '{s}' (choose from {})",
                COMMANDS.join(","),
                COMMANDS.join(", ")
            ),
        }),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match parse(&args) {
        Ok(p) => p,
        Err(e) => {
            out::err(&format!("{}{}: error: {}\n", e.usage, e.prog, e.message));
            return ExitCode::from(2);
        }
    };
    let opts = match parsed {
        None => {
            // argparse's help when no command is given, and `exit(1)`.
            out::out(TOP_HELP);
            return ExitCode::from(1);
        }
        Some(Parsed::Help("hf")) => {
            out::out(TOP_HELP);
            return ExitCode::SUCCESS;
        }
        Some(Parsed::Help("download")) => {
            out::out(&format!("{DOWNLOAD_USAGE}{DOWNLOAD_HELP}"));
            return ExitCode::SUCCESS;
        }
        Some(Parsed::Help("version")) => {
            out::out(&format!("huggingface_hub version: {HF_VERSION}\n"));
            return ExitCode::SUCCESS;
        }
        Some(Parsed::Help(_)) => {
            out::err(&format!(
                "vllm-sim hf: `{}` is not simulated; this simulator has `download` and `version` only.\n",
                args[0]
            ));
            return ExitCode::from(2);
        }
        Some(Parsed::Download(o)) => o,
    };
    let token = download::resolve_token(opts.token.as_deref());
    let mut ctx = download::Ctx::new(hub::Hub::from_env(), token, opts.quiet);
    match ctx.run(&opts) {
        Ok(path) => {
            out::out(&format!("{path}\n"));
            ExitCode::SUCCESS
        }
        Err(e) => {
            out::err(&e.render());
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<download::Opts, String> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match parse_download(&v) {
            Ok(Parsed::Download(o)) => Ok(*o),
            Ok(_) => Err("help".into()),
            Err(e) => Err(e.message),
        }
    }

    #[test]
    fn download_args() {
        let o = p(&[
            "Qwen/Qwen2.5-0.5B-Instruct",
            "--revision",
            "v2",
            "--local-dir=/data/m",
            "--quiet",
        ])
        .unwrap();
        assert_eq!(o.repo_id, "Qwen/Qwen2.5-0.5B-Instruct");
        assert_eq!(o.revision.as_deref(), Some("v2"));
        assert_eq!(o.local_dir.as_deref(), Some("/data/m"));
        assert!(o.quiet && o.filenames.is_empty());
        let o = p(&["r/x", "a.json", "b.json", "--rev", "main", "--local", "d"]).unwrap();
        assert_eq!(o.filenames, ["a.json", "b.json"]);
        assert_eq!(o.revision.as_deref(), Some("main"));
        assert_eq!(o.local_dir.as_deref(), Some("d"));
        let o = p(&["r/x", "--include", "*.json", "*.txt", "--quiet"]).unwrap();
        assert_eq!(o.include.unwrap(), ["*.json", "*.txt"]);
        assert_eq!(
            p(&[]).unwrap_err(),
            "the following arguments are required: repo_id, filenames"
        );
        assert_eq!(
            p(&["r/x", "--revision"]).unwrap_err(),
            "argument --revision: expected one argument"
        );
        assert_eq!(
            p(&["r/x", "--re", "x"]).unwrap_err(),
            "ambiguous option: --re could match --repo-type, --revision"
        );
        assert_eq!(
            p(&["r/x", "--repo-type", "x"]).unwrap_err(),
            "argument --repo-type: invalid choice: 'x' (choose from model, dataset, space)"
        );
        assert_eq!(
            p(&["r/x", "--bogus"]).unwrap_err(),
            "unrecognized arguments: --bogus"
        );
        assert!(matches!(p(&["--help"]), Err(h) if h == "help"));
    }
}
