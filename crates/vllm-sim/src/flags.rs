//! Every option of the played release's `vllm serve` parser (src/serve_flags_*.txt, written by
//! tools/serve-flags.py from vLLM's own parser), and argparse's way of finding the option a
//! command-line token names: exact spelling, else a unique `--` prefix (argparse's
//! abbreviations), else ambiguous or unrecognized.

/// How many values an option takes (argparse's `nargs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nargs {
    /// A flag (`store_true`, `BooleanOptionalAction`).
    Zero,
    One,
    /// `?`: a value if one follows.
    Optional,
    /// `+`: at least one value.
    OneOrMore,
    /// `*`: any number of values.
    Any,
}

#[derive(Debug, PartialEq)]
pub struct Opt {
    pub nargs: Nargs,
    /// Every spelling, the first one the option's name.
    pub spellings: Vec<&'static str>,
    /// The spellings argparse shows (`argument --a/--b: ...`); hidden ones are left out.
    pub shown: Vec<&'static str>,
}

impl Opt {
    pub fn name(&self) -> &'static str {
        self.spellings[0]
    }

    /// argparse's name of the action in messages: its shown spellings joined by `/`.
    pub fn display(&self) -> String {
        self.shown.join("/")
    }
}

pub struct Table {
    pub opts: Vec<Opt>,
    /// (spelling, index into opts) in the parser's registration order.
    order: Vec<(&'static str, usize)>,
}

/// What a token names.
#[derive(Debug, PartialEq)]
pub enum Lookup<'a> {
    /// The option and the spelling used (or completed from an abbreviation).
    Found(&'a Opt, &'static str),
    /// An abbreviation of several options: their spellings in the parser's order.
    Ambiguous(Vec<&'static str>),
    Unknown,
}

impl Table {
    /// Parses a serve_flags file; a malformed line is a bug of the checked-in file (a unit test
    /// parses every one).
    pub fn parse(text: &'static str) -> Table {
        let mut opts = Vec::new();
        let mut order = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let nargs = match words.next() {
                Some("0") => Nargs::Zero,
                Some("?") => Nargs::Optional,
                Some("+") => Nargs::OneOrMore,
                Some("*") => Nargs::Any,
                _ => Nargs::One,
            };
            let mut spellings = Vec::new();
            let mut shown = Vec::new();
            for w in words {
                match w.strip_prefix('~') {
                    Some(hidden) => spellings.push(hidden),
                    None => {
                        spellings.push(w);
                        shown.push(w);
                    }
                }
            }
            for s in &spellings {
                order.push((*s, opts.len()));
            }
            opts.push(Opt {
                nargs,
                spellings,
                shown,
            });
        }
        Table { opts, order }
    }

    /// Leaves an option out (0.17.1 has no `--shutdown-timeout`).
    pub fn without(mut self, name: &str) -> Table {
        if let Some(i) = self.opts.iter().position(|o| o.name() == name) {
            self.order.retain(|(_, j)| *j != i);
        }
        self
    }

    #[cfg(test)]
    pub fn get(&self, name: &str) -> Option<&Opt> {
        self.order
            .iter()
            .find(|(s, _)| *s == name)
            .map(|(_, i)| &self.opts[*i])
    }

    /// argparse's `_parse_optional`: the exact spelling, else (for `--` options) every spelling
    /// that starts with the token.
    pub fn lookup(&self, token: &str) -> Lookup<'_> {
        if let Some((s, i)) = self.order.iter().find(|(s, _)| *s == token) {
            return Lookup::Found(&self.opts[*i], s);
        }
        if !token.starts_with("--") || token.len() <= 2 {
            return Lookup::Unknown;
        }
        let matches: Vec<&(&'static str, usize)> = self
            .order
            .iter()
            .filter(|(s, _)| s.starts_with(token))
            .collect();
        match matches.as_slice() {
            [] => Lookup::Unknown,
            [(s, i)] => Lookup::Found(&self.opts[*i], s),
            many => Lookup::Ambiguous(many.iter().map(|(s, _)| *s).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::Release;

    #[test]
    fn the_checked_in_lists_parse() {
        for r in [Release::V0_34_0, Release::V0_18_0] {
            let t = Table::parse(r.serve_flags());
            assert!(t.opts.len() > 200, "{r:?}: {}", t.opts.len());
            for name in [
                "--model",
                "--served-model-name",
                "--port",
                "--max-num-seqs",
                "--headless",
                "--nnodes",
                "-n",
                "--node-rank",
                "-r",
                "--master-addr",
                "--master-port",
                "-pp",
                "--distributed-timeout-seconds",
                "--data-parallel-size",
                "--shutdown-timeout",
                "--no-enable-lora",
            ] {
                assert!(t.get(name).is_some(), "{r:?}: no {name}");
            }
            assert_eq!(t.get("--headless").unwrap().nargs, Nargs::Zero);
            assert_eq!(t.get("--lora-modules").unwrap().nargs, Nargs::OneOrMore);
        }
        let t034 = Table::parse(Release::V0_34_0.serve_flags());
        assert_eq!(
            t034.get("--no-enable-lora").unwrap().display(),
            "--enable-lora/--disable-lora"
        );
        let t018 = Table::parse(Release::V0_18_0.serve_flags());
        assert!(t018.get("--disable-lora").is_none());
        assert_eq!(
            t018.get("--enable-lora").unwrap().display(),
            "--enable-lora/--no-enable-lora"
        );
        assert!(
            Table::parse(Release::V0_18_0.serve_flags())
                .without("--shutdown-timeout")
                .get("--shutdown-timeout")
                .is_none()
        );
    }

    #[test]
    fn abbreviations_as_argparse() {
        let t = Table::parse(Release::V0_34_0.serve_flags());
        assert!(
            matches!(t.lookup("--max-num-seq"), Lookup::Found(o, "--max-num-seqs") if o.name() == "--max-num-seqs")
        );
        assert!(
            matches!(t.lookup("-tp"), Lookup::Found(o, _) if o.name() == "--tensor-parallel-size")
        );
        assert_eq!(t.lookup("--no-such-flag"), Lookup::Unknown);
        assert_eq!(t.lookup("-x"), Lookup::Unknown);
        // The real parser's answer (vLLM 0.34.0, `vllm serve m --headl`).
        assert_eq!(
            t.lookup("--headl"),
            Lookup::Ambiguous(vec!["--headless", "--headless-client-handshake-address"])
        );
        let Lookup::Ambiguous(max) = t.lookup("--max") else {
            panic!("--max is ambiguous")
        };
        assert_eq!(
            max.join(", "),
            "--max-log-len, --max-model-len, --max-logprobs, --max-parallel-loading-workers, --max-loras, \
             --max-lora-rank, --max-cpu-loras, --max-lora-cls-labels, --max-num-batched-tokens, \
             --max-num-scheduled-tokens, --max-num-seqs, --max-num-active-seqs, --max-num-inflight-kv-loads, \
             --max-num-queued-reqs, --max-num-queued-tokens, --max-cudagraph-capture-size"
        );
    }
}
