//! Runs `subcommands/*.md`: the user documentation of each subcommand is a
//! transcript whose ```console blocks are executed and compared.
//!
//! Syntax (as trycmd's): `$ ` starts a command (`> ` continues it, leading
//! `KEY=VALUE` words set the environment), `? N` gives the expected exit
//! status (default 0), the following lines are the expected stdout and stderr
//! together; `...` on its own line skips lines, `[..]` skips within a line,
//! `[CWD]` is the transcript's working directory. As in trycmd, a directory
//! `subcommands/<name>.in/` next to `<name>.md` is copied into that working
//! directory before the first step, so steps can name fixtures by relative
//! paths (`--sysroot reference`); `<name>.in` may be a symlink to a fixture
//! directory elsewhere in the repository. Symlinks inside it are copied as
//! symlinks (a captured sysfs tree is made of relative links), never
//! followed. trycmd itself is not used:
//! its temporary directory would be deleted while a sandbox is still mounted
//! in it after a failed step; here clean-up (sandbox down) comes first.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use btrfs_lab::report::text::COMMAND_STARTS;

use crate::common::{TestEnv, bin, require_root};

#[derive(Debug)]
struct Step {
    line: usize,
    env: Vec<(String, String)>,
    argv: Vec<String>,
    status: i32,
    expected: String,
    /// The 0-based lines of the file the expected output is on.
    expected_lines: std::ops::Range<usize>,
}

fn parse(text: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((_, line)) = lines.next() {
        if line.trim_end() != "```console" {
            continue;
        }
        let mut current: Option<Step> = None;
        for (n, line) in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            if let Some(cmd) = line.strip_prefix("$ ") {
                steps.extend(current.take());
                let words =
                    shlex::split(cmd).unwrap_or_else(|| panic!("line {}: bad quoting", n + 1));
                let split = words
                    .iter()
                    .position(|w| !w.contains('='))
                    .unwrap_or(words.len());
                current = Some(Step {
                    line: n + 1,
                    env: words[..split]
                        .iter()
                        .map(|w| {
                            let (k, v) = w.split_once('=').unwrap();
                            (k.to_owned(), v.to_owned())
                        })
                        .collect(),
                    argv: words[split..].to_vec(),
                    status: 0,
                    expected: String::new(),
                    expected_lines: n + 1..n + 1,
                });
            } else if let Some(step) = current.as_mut() {
                if let Some(more) = line.strip_prefix("> ").filter(|_| step.expected.is_empty()) {
                    step.argv.extend(shlex::split(more).unwrap());
                } else if let Some(code) =
                    line.strip_prefix("? ").filter(|_| step.expected.is_empty())
                {
                    step.status = code.trim().parse().expect("? takes an exit status");
                } else {
                    if step.expected.is_empty() {
                        step.expected_lines = n..n;
                    }
                    step.expected.push_str(line);
                    step.expected.push('\n');
                    step.expected_lines.end = n + 1;
                }
            } else {
                panic!("line {}: expected `$ ` to start a command", n + 1);
            }
        }
        steps.extend(current.take());
    }
    for s in &mut steps {
        s.expected = trim_trailing_newlines(&s.expected);
    }
    steps
}

/// Blank lines between a step's output and the next command are layout.
fn trim_trailing_newlines(s: &str) -> String {
    let t = s.trim_end_matches('\n');
    if t.is_empty() {
        String::new()
    } else {
        format!("{t}\n")
    }
}

/// Runs one step with stdout and stderr interleaved in one file, as a
/// terminal would show them.
fn execute(step: &Step, cwd: &Path, env: &TestEnv) -> (i32, String) {
    let program = if step.argv[0] == "btrfs-lab" {
        bin()
    } else {
        PathBuf::from(&step.argv[0])
    };
    let out_path = env.path().join("step-output");
    let out = fs::File::create(&out_path).unwrap();
    // As root the environment variables are ignored: pass the global options.
    let locations = if step.argv[0] == "btrfs-lab" {
        env.location_args()
    } else {
        Vec::new()
    };
    let mut child = Command::new(program)
        .args(locations)
        .args(&step.argv[1..])
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env("COLUMNS", COLUMNS.to_string())
        .env(crate::common::PROGS_DIR_ENV, env.progs_dir())
        .envs(step.env.iter().cloned())
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", step.argv));
    let deadline = Instant::now() + Duration::from_secs(600);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "line {}: {:?} ran for more than 10 minutes",
                step.line, step.argv
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (
        status.code().unwrap_or(-1),
        fs::read_to_string(&out_path).unwrap(),
    )
}

fn run_transcript(path: &Path) -> Result<(), String> {
    let text = fs::read_to_string(path).unwrap();
    let steps = parse(&text);
    assert!(
        !steps.is_empty(),
        "{} has no ```console blocks",
        path.display()
    );
    let env = TestEnv::new();
    let cwd = env.path().join("work");
    fs::create_dir(&cwd).unwrap();
    let fixture = path.with_extension("in");
    if fixture.exists() {
        copy_tree(&fs::canonicalize(&fixture).unwrap(), &cwd);
    }
    let mut redactions = snapbox::Redactions::new();
    redactions.insert("[CWD]", cwd.clone()).unwrap();
    let assert = snapbox::Assert::new().redact_with(redactions);
    let scale = device_scale();
    // Lines over the width, all of them, said after the last step.
    let mut wide = Vec::new();
    // The widest line checked, and its step (BTRFS_LAB_TRANSCRIPT_WIDEST).
    let mut widest = (0, String::new());
    let bless_asked = std::env::var_os("BTRFS_LAB_BLESS_TRANSCRIPTS").is_some();
    let mut blessed = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        let scaled;
        let step = match scale {
            Some(percent) => {
                scaled = scale_step(step, file_name(path), percent);
                &scaled
            }
            None => step,
        };
        let (code, output) = execute(step, &cwd, &env);
        let name = format!("{}:{} `{}`", path.display(), step.line, step.argv.join(" "));
        if code != step.status {
            return Err(format!(
                "{name}: exit status {code}, expected {}\n{output}",
                step.status
            ));
        }
        if let Some(w) = checked_lines(step, &output)
            .map(|l| l.chars().count())
            .max()
            .filter(|&w| w > widest.0)
        {
            widest = (w, step.argv.join(" "));
        }
        if let Some(line) = too_wide(step, &output) {
            wide.push(format!(
                "{name}: a line is over {COLUMNS} columns ({} columns):\n{line}",
                line.chars().count()
            ));
        }
        let actual = trim_trailing_newlines(&output);
        if let Err(e) = assert.try_eq(
            Some(&name),
            actual.clone().into(),
            step.expected.clone().into(),
        ) {
            let cwd_text = cwd.to_string_lossy();
            let Some(reflow) = reflowed(&step.expected.replace("[CWD]", &cwd_text), &actual) else {
                wide.push(format!("{name}: output differs\n{e}"));
                if !blessed.is_empty() {
                    bless(path, &steps, &blessed);
                }
                return Err(wide.join("\n"));
            };
            if bless_asked && scale.is_none() {
                blessed.push((index, reflow.replace(&*cwd_text, "[CWD]")));
            }
        }
    }
    if !blessed.is_empty() {
        bless(path, &steps, &blessed);
    }
    // BTRFS_LAB_TRANSCRIPT_WIDEST=FILE: each transcript's widest line
    // appended there (`NAME COLUMNS STEP`), for the width report.
    if let Some(file) = std::env::var_os("BTRFS_LAB_TRANSCRIPT_WIDEST") {
        use std::io::Write;
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)
            .unwrap();
        writeln!(f, "{} {} {}", file_name(path), widest.0, widest.1).unwrap();
    }
    // `env` drops here: any sandbox a failed step left is removed first.
    if wide.is_empty() {
        Ok(())
    } else {
        Err(wide.join("\n"))
    }
}

/// The terminal width the transcripts run at: text output must fit it.
const COLUMNS: usize = 80;

/// The first line of a step's output over [`COLUMNS`], if any. Output that
/// is not text for a person is not checked: JSON, completion scripts, man
/// pages (roff), metrics (files, `doctor --format prometheus`), and other
/// programs' output. A line that is
/// one word (a long path) cannot be wrapped and is not checked either, nor
/// is a command shown to be copied (a line of its own that starts with the
/// program): breaking it would make a pasted line run as two commands.
fn too_wide<'a>(step: &Step, output: &'a str) -> Option<&'a str> {
    checked_lines(step, output).find(|l| l.chars().count() > COLUMNS)
}

/// The lines of a step's output that must fit [`COLUMNS`] (see
/// [`too_wide`]).
fn checked_lines<'a>(step: &Step, output: &'a str) -> impl Iterator<Item = &'a str> {
    let machine = step.argv[0] != "btrfs-lab"
        || step.argv.iter().any(|a| a == "--json" || a == "--textfile")
        || step
            .argv
            .windows(2)
            .any(|w| w == ["--format", "prometheus"])
        || step
            .argv
            .iter()
            .skip(1)
            .find(|a| !a.starts_with('-'))
            .is_some_and(|sub| sub == "completions" || sub == "man");
    output.lines().filter(move |l| {
        let t = l.trim_start();
        !machine
            && t.contains(char::is_whitespace)
            && !COMMAND_STARTS.iter().any(|c| t.starts_with(c))
    })
}

/// One piece of an expected output in [`same_but_wrapped`].
#[derive(Debug, Clone, Copy, PartialEq)]
enum Piece {
    Char(char),
    /// A single space or a line break (with any indent), where text
    /// filled to the width may break a line or join one: `Break(0)` and
    /// `Break(1)` match either; `Break(n)` for n > 1 (blank lines) matches
    /// exactly n line breaks.
    Break(usize),
    /// `[..]`: anything, as short as possible.
    Any,
    /// A `...` line: any lines, as few as possible.
    AnyLines,
}

fn pieces(expected: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let lines: Vec<&str> = expected.trim_end_matches('\n').split('\n').collect();
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            match pieces.last_mut() {
                Some(Piece::Break(n)) => *n += 1,
                _ => pieces.push(Piece::Break(1)),
            }
        }
        if line.trim() == "..." {
            pieces.push(Piece::AnyLines);
            continue;
        }
        let mut rest = *line;
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix("[..]") {
                pieces.push(Piece::Any);
                rest = r;
            } else if rest.starts_with(' ') {
                let run = rest.len() - rest.trim_start_matches(' ').len();
                let after_break = matches!(pieces.last(), Some(Piece::Break(_)));
                if run == 1 || rest.len() == run || after_break {
                    // One space, trailing spaces, or a line's indent.
                    if !after_break {
                        pieces.push(Piece::Break(0));
                    }
                } else {
                    pieces.extend(std::iter::repeat_n(Piece::Char(' '), run));
                }
                rest = &rest[run..];
            } else {
                let c = rest.chars().next().unwrap();
                pieces.push(Piece::Char(c));
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    pieces
}

/// Whether `actual` is `expected` (with its `[..]` and `...` wildcards)
/// up to where lines were broken: words, their order and runs of spaces
/// inside a line (table columns) must be the same, but a single space and a
/// line break (with its indent) stand for each other. Text filled to 80
/// columns breaks at other words when a figure is longer on another
/// machine; the width itself is checked by [`too_wide`].
fn same_but_wrapped(expected: &str, actual: &str) -> bool {
    reflowed(expected, actual).is_some()
}

/// `expected` with its line breaks where `actual` has them (wildcards
/// kept), when the two are [`same_but_wrapped`]: what
/// `BTRFS_LAB_BLESS_TRANSCRIPTS=1` writes back into the transcript.
fn reflowed(expected: &str, actual: &str) -> Option<String> {
    let pieces = pieces(expected);
    let actual: Vec<char> = actual.trim_end_matches('\n').chars().collect();
    let mut failed = std::collections::HashSet::new();
    let mut path = Vec::new();
    if !matches(&pieces, &actual, 0, 0, &mut failed, &mut path) {
        return None;
    }
    path.reverse();
    let mut out = String::new();
    for (i, (piece, (a, n))) in pieces.iter().zip(path).enumerate() {
        match piece {
            // A `...` line has no indent.
            Piece::Break(_) if pieces.get(i + 1) == Some(&Piece::AnyLines) => {
                let span: String = actual[a..a + n].iter().collect();
                out.push_str(&"\n".repeat(span.matches('\n').count().max(1)));
            }
            Piece::Char(c) => out.push(*c),
            Piece::Any => out.push_str("[..]"),
            Piece::AnyLines => out.push_str("..."),
            Piece::Break(_) => {
                let span: String = actual[a..a + n].iter().collect();
                match span.rfind('\n') {
                    Some(i) => {
                        out.push_str(&"\n".repeat(span.matches('\n').count()));
                        out.push_str(&span[i + 1..]);
                    }
                    None if n > 0 => out.push(' '),
                    None => {}
                }
            }
        }
    }
    Some(out)
}

/// The length of the break at `a` in `actual` that `Break(lines)` matches:
/// a single space or a run of spaces holding one line break for 0 or 1, a
/// run holding exactly `lines` line breaks for more.
fn break_at(actual: &[char], a: usize, lines: usize) -> Option<usize> {
    let run = actual[a..]
        .iter()
        .take_while(|c| **c == ' ' || **c == '\n')
        .count();
    let newlines = actual[a..a + run].iter().filter(|c| **c == '\n').count();
    match (lines, newlines) {
        (0 | 1, 0) if run == 1 => Some(1),
        (0 | 1, 1) => Some(run),
        (n, m) if n > 1 && n == m => Some(run),
        _ => None,
    }
}

/// Matches `pieces[p..]` against `actual[a..]`; on success `path` holds,
/// last piece first, where in `actual` each piece matched (start, length).
fn matches(
    pieces: &[Piece],
    actual: &[char],
    p: usize,
    a: usize,
    failed: &mut std::collections::HashSet<(usize, usize)>,
    path: &mut Vec<(usize, usize)>,
) -> bool {
    if p == pieces.len() {
        return a == actual.len();
    }
    if failed.contains(&(p, a)) {
        return false;
    }
    let mut then = |n: usize, path: &mut Vec<(usize, usize)>| {
        let ok = matches(pieces, actual, p + 1, a + n, failed, path);
        if ok {
            path.push((a, n));
        }
        ok
    };
    let ok = match pieces[p] {
        Piece::Char(c) => a < actual.len() && actual[a] == c && then(1, path),
        Piece::Break(lines) => match break_at(actual, a, lines) {
            Some(n) => then(n, path),
            // A line's end and the end of the output.
            None => a == actual.len() && then(0, path),
        },
        Piece::Any | Piece::AnyLines => (0..=actual.len() - a).any(|n| then(n, path)),
    };
    if !ok {
        failed.insert((p, a));
    }
    ok
}

/// Rewrites the expected outputs of `steps` in the transcript at `path`
/// with `new` ones (step index, text).
fn bless(path: &Path, steps: &[Step], new: &[(usize, String)]) {
    let text = fs::read_to_string(path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for (i, expected) in new.iter().rev() {
        let step = &steps[*i];
        // The blank lines that end the block stay.
        let blank = lines[step.expected_lines.clone()]
            .iter()
            .rev()
            .take_while(|l| l.is_empty())
            .count();
        let new_lines = expected
            .lines()
            .map(str::to_owned)
            .chain(std::iter::repeat_n(String::new(), blank));
        lines.splice(step.expected_lines.clone(), new_lines);
    }
    let mut out = lines.join("\n");
    out.push('\n');
    fs::write(path, out).unwrap();
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap()
}

/// `BTRFS_LAB_TEST_DEVICE_SCALE=PERCENT` runs the transcripts on scratch
/// devices of another size, as a machine with another kernel, mkfs or disk
/// would give other chunk sizes, reserves and free space: every
/// `sandbox up` that is expected to succeed gets `--device-size` scaled by
/// PERCENT (its default, 2G, when it has none), and so does `truncate -s`
/// of an image in the transcript's directory (a loop device's backing
/// file); sizes that [`DECIDED`] says come from the devices are scaled in
/// the expected output. Everything else must come out the same, which
/// proves that nothing the devices' size decides is pinned unmasked.
/// `.ci/run` runs the transcripts once more this way.
const DEVICE_SCALE_ENV: &str = "BTRFS_LAB_TEST_DEVICE_SCALE";

/// `sandbox up`'s default `--device-size`.
const SANDBOX_DEFAULT_DEVICE_SIZE: u64 = 2 << 30;

fn device_scale() -> Option<u64> {
    let v = std::env::var(DEVICE_SCALE_ENV)
        .ok()
        .filter(|v| !v.is_empty())?;
    match v.trim_end_matches('%').parse::<u64>() {
        Ok(p) if (50..=400).contains(&p) => Some(p),
        _ => panic!("{DEVICE_SCALE_ENV}={v}: give a percentage from 50 to 400, e.g. 125"),
    }
}

/// `bytes` scaled by `percent`, exactly: every size a transcript gives its
/// devices must scale to whole 4 KiB blocks.
fn scaled_bytes(bytes: u64, percent: u64) -> u64 {
    let scaled = u128::from(bytes) * u128::from(percent);
    assert!(
        scaled % 100 == 0 && (scaled / 100) % 4096 == 0,
        "{DEVICE_SCALE_ENV}={percent}: {bytes} bytes do not scale to whole 4 KiB blocks"
    );
    u64::try_from(scaled / 100).unwrap()
}

/// `token` (`1.00GiB`, `1073741824`) scaled by `percent`, printed as
/// btrfs-lab prints it.
fn scaled_token(token: &str, percent: u64) -> String {
    use btrfs_lab::report::units::{UnitBase, UnitMode, pretty_size, unit_bytes};
    if let Ok(n) = token.parse::<u64>() {
        return scaled_bytes(n, percent).to_string();
    }
    let split = token
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(token.len());
    let (number, unit) = token.split_at(split);
    let unit = unit_bytes(unit.trim()).unwrap_or_else(|| panic!("no unit in {token}"));
    let bytes = (number.parse::<f64>().unwrap() * unit as f64).round() as u64;
    pretty_size(
        scaled_bytes(bytes, percent),
        UnitMode::Human(UnitBase::Binary),
    )
}

/// The step as it runs with the devices scaled by `percent` (see
/// [`DEVICE_SCALE_ENV`]).
fn scale_step(step: &Step, file: &str, percent: u64) -> Step {
    let mut argv = step.argv.clone();
    let scale_arg = |v: &str| {
        let bytes = btrfs_lab::parse::size::parse_size(v)
            .unwrap_or_else(|e| panic!("line {}: size {v}: {}", step.line, e.message()));
        scaled_bytes(bytes, percent).to_string()
    };
    let is_sandbox_up = argv.first().is_some_and(|a| a == "btrfs-lab")
        && argv.windows(2).any(|w| w[0] == "sandbox" && w[1] == "up");
    if is_sandbox_up && step.status == 0 {
        match argv.iter().position(|a| a == "--device-size") {
            Some(i) => argv[i + 1] = scale_arg(&argv[i + 1]),
            None => argv.extend([
                "--device-size".to_owned(),
                scaled_bytes(SANDBOX_DEFAULT_DEVICE_SIZE, percent).to_string(),
            ]),
        }
    }
    if argv.first().is_some_and(|a| a == "truncate")
        && argv.last().is_some_and(|f| !f.contains('/'))
        && let Some(i) = argv.iter().position(|a| a == "-s")
    {
        argv[i + 1] = scale_arg(&argv[i + 1]);
    }
    let mut expected = String::new();
    let lines: Vec<&str> = step.expected.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let mut out = String::new();
        let mut at = 0;
        for t in size_tokens(line) {
            if let Some((_, _, Source::Device, _)) = decided_for(file, &lines, i, &t) {
                out.push_str(&line[at..t.start]);
                out.push_str(&scaled_token(&t.text, percent));
                at = t.end;
            }
        }
        out.push_str(&line[at..]);
        expected.push_str(&out);
        expected.push('\n');
    }
    Step {
        line: step.line,
        env: step.env.clone(),
        argv,
        status: step.status,
        expected,
        expected_lines: step.expected_lines.clone(),
    }
}

/// Copies the contents of `from` into `to`, symlinks as symlinks.
fn copy_tree(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let meta = fs::symlink_metadata(&src).unwrap();
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if meta.is_dir() {
            fs::create_dir(&dst).unwrap();
            copy_tree(&src, &dst);
        } else {
            fs::copy(&src, &dst).unwrap();
        }
    }
}

fn transcripts() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("subcommands");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.sort();
    files
}

/// Transcripts run one at a time, as they did when they were one test:
/// several of them make, grow and remove sandboxes with fixed device
/// counts, and a teardown can find its loop device briefly held by another
/// transcript's `btrfs device scan`.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn check_transcript(file: &str) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("subcommands")
        .join(file);
    if let Err(failure) = run_transcript(&path) {
        panic!("{failure}");
    }
}

/// One test per transcript, so that a run names the one that failed and a
/// run without root still runs those that need none. `root` transcripts
/// make sandboxes (loop devices, mounts); `user` ones read fixtures only.
macro_rules! transcript_tests {
    ($($kind:ident $name:ident => $file:literal,)*) => {
        $(transcript_tests!(@one $kind $name $file);)*
        /// Every transcript in subcommands/ has its test above.
        const LISTED: &[&str] = &[$($file),*];
    };
    (@one root $name:ident $file:literal) => {
        #[test]
        #[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
        fn $name() {
            if !require_root(concat!("subcommands/", $file)) {
                return;
            }
            check_transcript($file);
        }
    };
    (@one user $name:ident $file:literal) => {
        #[test]
        fn $name() {
            check_transcript($file);
        }
    };
}

transcript_tests! {
    user apps => "apps.md",
    root balance => "balance.md",
    root bench => "bench.md",
    root capacity => "capacity.md",
    user completions => "completions.md",
    root convert => "convert.md",
    root demo => "demo.md",
    root device => "device.md",
    root df => "df.md",
    root doctor => "doctor.md",
    user explain => "explain.md",
    user links => "links.md",
    user man => "man.md",
    root nocow => "nocow.md",
    root probe_dio => "probe-dio.md",
    root read_test => "read-test.md",
    root reclaim => "reclaim.md",
    root rescue => "rescue.md",
    root sandbox => "sandbox.md",
    root scrub => "scrub.md",
    root show => "show.md",
    root usage => "usage.md",
}

#[test]
fn every_transcript_has_a_test() {
    let listed: Vec<PathBuf> = LISTED
        .iter()
        .map(|f| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("subcommands")
                .join(f)
        })
        .collect();
    assert_eq!(
        listed,
        transcripts(),
        "transcript_tests! must list every subcommands/*.md"
    );
}

#[test]
fn every_subcommand_has_a_transcript() {
    let help = Command::new(bin()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let names: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // Command lines are indented by two; wrapped help text by more.
        .filter(|l| !l[2..].starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .collect();
    assert!(names.contains(&"probe-dio"), "{help}");
    for name in names {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("subcommands/{name}.md"));
        assert!(p.exists(), "missing transcript {}", p.display());
        assert!(!parse(&fs::read_to_string(&p).unwrap()).is_empty());
    }
}

#[test]
fn fixture_directories_are_copied_with_their_symlinks() {
    let t = tempfile::tempdir().unwrap();
    let from = t.path().join("from");
    fs::create_dir_all(from.join("sys/devices/d")).unwrap();
    fs::write(from.join("sys/devices/d/attr"), "1\n").unwrap();
    fs::create_dir_all(from.join("sys/class")).unwrap();
    std::os::unix::fs::symlink("../devices/d", from.join("sys/class/d")).unwrap();
    let to = t.path().join("to");
    fs::create_dir(&to).unwrap();
    copy_tree(&from, &to);
    assert_eq!(
        fs::read_link(to.join("sys/class/d")).unwrap(),
        PathBuf::from("../devices/d")
    );
    assert_eq!(
        fs::read_to_string(to.join("sys/class/d/attr")).unwrap(),
        "1\n"
    );
}

#[test]
fn parser_reads_trycmd_syntax() {
    let steps = parse(
        "text\n```console\n$ FOO=1 btrfs-lab a 'b c'\n> --d\n? 3\nout [..]\n...\n$ btrfs-lab x\n```\n```text\n$ no\n```\n",
    );
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].env, vec![("FOO".to_owned(), "1".to_owned())]);
    assert_eq!(steps[0].argv, vec!["btrfs-lab", "a", "b c", "--d"]);
    assert_eq!(steps[0].status, 3);
    assert_eq!(steps[0].expected, "out [..]\n...\n");
    let spaced = parse("```console\n$ a\nx\n\n\n$ b\n```\n");
    assert_eq!(spaced[0].expected, "x\n");
    assert_eq!(steps[1].status, 0);
}

/// Where a size that a transcript pins comes from (see [`DECIDED`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// A size of the scratch devices the transcript makes (`sandbox up
    /// --device-size`, `truncate -s`) or one computed from them by
    /// btrfs-lab (a raw total): it scales with
    /// `BTRFS_LAB_TEST_DEVICE_SCALE`.
    Device,
    /// A size the transcript passes (a `--file-size`, a file it writes) or
    /// one btrfs-lab computes from it, or a constant of btrfs-lab (a
    /// minimum, a default): the same on every machine.
    Fixed,
}

/// Every size-looking token (`12.00MiB`, `2000 MB`, a byte count of 1024 or
/// more, any number after a JSON key with `bytes` in it) in the expected
/// output of a transcript step that runs on a real filesystem must be
/// `[..]`-masked or listed here: numbers mkfs, the kernel or the machine
/// decide (chunk sizes, the global reserve, free space) differ on a fresh
/// machine. Steps that read only fixture files (`--parse`, `--sysroot`) are
/// deterministic and exempt. Each entry: transcript; the token as printed,
/// or a piece of the line around it when the same token is decided by
/// btrfs-lab in one place and not in another; where it comes from; why
/// btrfs-lab decides it.
type Decided = (&'static str, &'static str, Source, &'static str);
use Source::{Device, Fixed};
const DECIDED: &[Decided] = &[
    // reclaim.md
    (
        "reclaim.md",
        "goal: 1000.00GiB unallocated over all devices",
        Fixed,
        "the transcript's --goal 1000G",
    ),
    // rescue.md
    (
        "rescue.md",
        "bytes: 0.00B in files = 0.00B intact + 0.00B readable in damaged files + 0.00B lost + 0.00B unknown",
        Fixed,
        "the transcript's sandbox holds no file",
    ),
    // bench.md
    (
        "bench.md",
        "test file 64.00MiB",
        Fixed,
        "--file-size 64M, the transcript's",
    ),
    (
        "bench.md",
        "bs=1048576",
        Fixed,
        "SEQ1M's block size, in the job file btrfs-lab writes",
    ),
    (
        "bench.md",
        "bs=4096",
        Fixed,
        "RND4K's block size, in the job file btrfs-lab writes",
    ),
    (
        "bench.md",
        "size=67108864",
        Fixed,
        "--file-size 64M for the one job of a T1 test",
    ),
    (
        "bench.md",
        "size=33554432",
        Fixed,
        "--file-size 64M split between the 2 jobs of a T2 test",
    ),
    (
        "bench.md",
        "offset_increment=33554432",
        Fixed,
        "each of the 2 jobs has its own half of the file",
    ),
    (
        "bench.md",
        "300.00MiB",
        Fixed,
        "--sustained 300M, the transcript's",
    ),
    (
        "bench.md",
        "2000 MB/s",
        Fixed,
        "the fixed rates btrfs-lab estimates the duration at",
    ),
    (
        "bench.md",
        "500 MB/s",
        Fixed,
        "the fixed rates btrfs-lab estimates the duration at",
    ),
    (
        "bench.md",
        "100 MB/s",
        Fixed,
        "the fixed rates btrfs-lab estimates the duration at",
    ),
    (
        "bench.md",
        "4.00GiB written",
        Fixed,
        "--sustained 4G, the transcript's",
    ),
    (
        "bench.md",
        "--sustained 1.00MiB",
        Fixed,
        "--sustained 1M, the transcript's",
    ),
    (
        "bench.md",
        "use 256.00MiB or more",
        Fixed,
        "bench's minimum for --sustained",
    ),
    (
        "bench.md",
        "1.00GiB",
        Fixed,
        "the device size of --compare-profiles' sandboxes (btrfs-lab's)",
    ),
    (
        "bench.md",
        "2.00GiB test file",
        Fixed,
        "--file-size 2G, the transcript's",
    ),
    // convert.md
    (
        "convert.md",
        "6.00GiB raw",
        Device,
        "3 devices of --device-size 2G",
    ),
    // demo.md
    (
        "demo.md",
        "2.00GiB loop device",
        Fixed,
        "demo's own sandbox size (btrfs-lab's)",
    ),
    // device.md
    (
        "device.md",
        "2.00GiB",
        Device,
        "--device-size 2G and the 2G images (spare.img, old.img, new.img) the transcript makes",
    ),
    (
        "device.md",
        "4.00GiB raw",
        Device,
        "the sum of the devices: 2G + 2G",
    ),
    // df.md
    (
        "df.md",
        "\"total_error_bytes\": 0",
        Fixed,
        "values read from the kernel are exact",
    ),
    (
        "df.md",
        "\"used_error_bytes\": 0",
        Fixed,
        "values read from the kernel are exact",
    ),
    // nocow.md: the files the transcript writes (dd, truncate) and sums of them
    (
        "nocow.md",
        "6.00MiB",
        Fixed,
        "base.ibd: the 6 MiB the transcript writes (dd count=6)",
    ),
    ("nocow.md", "64.00MiB", Fixed, "disk.img: truncate -s 64M"),
    (
        "nocow.md",
        "2.00MiB",
        Fixed,
        "disk.img's allocation: the 2 MiB the transcript writes into it",
    ),
    (
        "nocow.md",
        "0.00B",
        Fixed,
        "empty.log: the empty file the transcript makes; no NOCOW bytes yet",
    ),
    (
        "nocow.md",
        "70.00MiB",
        Fixed,
        "64 MiB + 6 MiB, the files' sizes",
    ),
    (
        "nocow.md",
        "72.00MiB",
        Fixed,
        "room for the copies made at once: base.ibd's 6 MiB and disk.img's 2 MiB allocated, plus the 64 MiB margin",
    ),
    (
        "nocow.md",
        "\"size_bytes\": 67108864",
        Fixed,
        "disk.img: truncate -s 64M",
    ),
    (
        "nocow.md",
        "\"nocow_bytes\": 67108864",
        Fixed,
        "disk.img: truncate -s 64M",
    ),
    (
        "nocow.md",
        "\"allocated_bytes\": 2097152",
        Fixed,
        "the 2 MiB the transcript writes into disk.img",
    ),
    // probe-dio.md
    (
        "probe-dio.md",
        "32.00MiB",
        Fixed,
        "--file-size 32M, the transcript's",
    ),
    (
        "probe-dio.md",
        "192.00MiB written",
        Fixed,
        "3 rounds (the default) of a 32M test and a 32M control file",
    ),
    (
        "probe-dio.md",
        "96.00MiB written",
        Fixed,
        "3 rounds (the default) of a 32M test file, no control on ext4",
    ),
    (
        "probe-dio.md",
        "1.00MiB writes",
        Fixed,
        "probe-dio's default --block-size (1M)",
    ),
    (
        "probe-dio.md",
        "--file-size 1.00MiB",
        Fixed,
        "the transcript's bad --file-size",
    ),
    (
        "probe-dio.md",
        "--block-size 4.00MiB",
        Fixed,
        "the transcript's --block-size",
    ),
    // read-test.md
    (
        "read-test.md",
        "24.00MiB",
        Fixed,
        "model.bin: the 24 MiB file the transcript writes",
    ),
    (
        "read-test.md",
        "\"size_bytes\": 25165824",
        Fixed,
        "model.bin: 24 MiB",
    ),
    (
        "read-test.md",
        "blocks of 4.00KiB",
        Fixed,
        "read-test's checksum sample block",
    ),
    (
        "read-test.md",
        "\"block_bytes\": 4096",
        Fixed,
        "read-test's checksum sample block",
    ),
    (
        "read-test.md",
        "\"blocks\": 6144",
        Fixed,
        "24 MiB in 4 KiB blocks",
    ),
    (
        "read-test.md",
        "4096-byte alignment",
        Fixed,
        "read-test's default when the filesystem does not say",
    ),
    (
        "read-test.md",
        "8.00MiB chunks",
        Fixed,
        "read-test's default --chunk",
    ),
    (
        "read-test.md",
        "32.00MiB in flight",
        Fixed,
        "the default 4 threads × 8 MiB chunks",
    ),
    (
        "read-test.md",
        "\"chunk_bytes\": 2097152",
        Fixed,
        "--chunk 2M, the transcript's",
    ),
    (
        "read-test.md",
        "\"in_flight_bytes\": 8388608",
        Fixed,
        "the default 4 threads × --chunk 2M",
    ),
    (
        "read-test.md",
        "\"buffer_bytes\": 8388608",
        Fixed,
        "--buffer 8M, the transcript's",
    ),
    (
        "read-test.md",
        "\"bytes\": 8388608",
        Fixed,
        "the destination buffer, --buffer 8M",
    ),
    (
        "read-test.md",
        "model.bin (8.00MiB, tmpfs)",
        Fixed,
        "the 8 MiB file the transcript writes on tmpfs",
    ),
    (
        "read-test.md",
        "destination  8.00MiB (holds the whole file)",
        Fixed,
        "the destination read-test sizes to the whole 8 MiB file",
    ),
    (
        "read-test.md",
        "--buffer 16.00MiB",
        Fixed,
        "the transcript's too small --buffer",
    ),
    (
        "read-test.md",
        "(32.00MiB)",
        Fixed,
        "the default 4 threads × 8 MiB chunks",
    ),
    (
        "read-test.md",
        "--buffer 32.00MiB or more",
        Fixed,
        "the default 4 threads × 8 MiB chunks",
    ),
    // sandbox.md
    ("sandbox.md", "512.00MiB", Device, "--device-size 512M"),
    (
        "sandbox.md",
        "--device-size 10.00MiB",
        Fixed,
        "the transcript's too small --device-size",
    ),
    (
        "sandbox.md",
        "at least 256.00MiB",
        Fixed,
        "sandbox's minimum for btrfs",
    ),
    ("sandbox.md", "1 × 256.00MiB", Device, "--device-size 256M"),
    // show.md
    ("show.md", "size 1.00GiB", Device, "--device-size 1G"),
    (
        "show.md",
        "\"size_bytes\": 1073741824",
        Device,
        "--device-size 1G",
    ),
    (
        "show.md",
        "\"size\": 1073741824",
        Device,
        "--device-size 1G",
    ),
    // usage.md
    // (in context: the bees paste's 2.00GiB and 1.00GiB are its own)
    (
        "usage.md",
        "   2.00GiB",
        Device,
        "2 devices of --device-size 1G",
    ),
    (
        "usage.md",
        "2.00GiB 0.00B",
        Device,
        "2 devices of --device-size 1G",
    ),
    ("usage.md", "1.00GiB     -", Device, "--device-size 1G"),
    (
        "usage.md",
        "\"device_size\": 2147483648",
        Device,
        "2 devices of --device-size 1G",
    ),
    (
        "usage.md",
        "\"size_bytes\": 1073741824",
        Device,
        "--device-size 1G",
    ),
    (
        "usage.md",
        "\"device_size_bytes\": 1073741824",
        Device,
        "--device-size 1G",
    ),
    (
        "usage.md",
        "\"device_size\": 1073741824",
        Device,
        "--device-size 1G",
    ),
    (
        "usage.md",
        "0.00B",
        Fixed,
        "device missing and slack: none, the sandbox uses whole devices",
    ),
    (
        "usage.md",
        "\"slack_bytes\": 0",
        Fixed,
        "the sandbox's filesystem uses whole devices",
    ),
];

/// The [`DECIDED`] entry that explains `token` in `line` of `file`: one
/// whose text occurs in the line around the token.
/// The [`DECIDED`] entry of `file` whose text holds `token` of line `i`
/// of `lines`. Text filled to the width may break an entry's text over two
/// lines: it is looked for in the line joined with the lines before and
/// after it (each line's indent a single space).
fn decided_for(
    file: &str,
    lines: &[&str],
    i: usize,
    token: &SizeToken,
) -> Option<&'static Decided> {
    let line = lines[i];
    let body = line.trim_start();
    let before = i.checked_sub(1).map_or("", |p| lines[p].trim());
    let after = lines.get(i + 1).map_or("", |n| n.trim());
    let context = format!("{before} {body} {after}");
    // Where the line's first byte would be in `context` (its indent dropped).
    let shift = (before.len() + 1) as isize - (line.len() - body.len()) as isize;
    let (start, end) = (token.start as isize + shift, token.end as isize + shift);
    DECIDED.iter().find(|(f, text, _, _)| {
        *f == file
            && context
                .match_indices(*text)
                .any(|(at, m)| at as isize <= start && end <= (at + m.len()) as isize)
    })
}

/// A size-looking token at `start..end` of a line.
#[derive(Debug, PartialEq)]
struct SizeToken {
    start: usize,
    end: usize,
    text: String,
}

const SIZE_UNITS: &[&str] = &[
    "KiB", "MiB", "GiB", "TiB", "PiB", "kB", "KB", "MB", "GB", "TB", "B",
];

/// The size-looking tokens of one line of expected output: a number with a
/// size unit (`1.00GiB`, `2000 MB`), an `N-byte`, a byte count after `=`
/// (`total=214695936`, `bs=4096`: 1024 or more, or any after `total=` and
/// `used=`), and the value of a JSON key that has `bytes` in it (any) or
/// whose value is 1024 or more. Counts (`3000 files`, `pid 4194304000`) are
/// not sizes.
fn size_tokens(line: &str) -> Vec<SizeToken> {
    let b = line.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let word_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b"_.-".contains(&b[i - 1]));
        if !b[i].is_ascii_digit() || word_before {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let mut decimal = false;
        if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
            decimal = true;
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
        }
        let number_end = i;
        let after = &line[number_end..];
        let spaced = after.strip_prefix(' ').unwrap_or(after);
        let unit = SIZE_UNITS.iter().find(|u| {
            spaced.starts_with(**u)
                && !spaced[u.len()..]
                    .bytes()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric())
        });
        let end = match unit {
            Some(u) => number_end + (after.len() - spaced.len()) + u.len(),
            None => number_end,
        };
        i = end;
        let value = line[start..number_end].parse::<u64>().ok();
        let is_size = if unit.is_some() {
            true
        } else if decimal
            || b.get(end)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'.')
        {
            false
        } else if after.starts_with("-byte") {
            true
        } else if let Some(key) = line[..start].strip_suffix('=') {
            let key = key.rsplit([' ', ',']).next().unwrap_or("");
            value.is_some_and(|n| n >= 1024) || key == "total" || key == "used"
        } else if let Some(key) = line[..start]
            .strip_suffix("\": ")
            .and_then(|k| k.rsplit('"').next())
        {
            key.contains("bytes") || value.is_some_and(|n| n >= 1024)
        } else {
            false
        };
        if is_size {
            found.push(SizeToken {
                start,
                end,
                text: line[start..end].to_owned(),
            });
        }
    }
    found
}

/// A step that reads only fixture files: its output is the same anywhere.
fn reads_fixtures_only(step: &Step) -> bool {
    step.argv
        .iter()
        .any(|a| a == "--parse" || a == "--sysroot" || a.starts_with("--sysroot="))
        // capacity SIZE...: computed from the sizes given, no filesystem.
        || (step.argv.iter().any(|a| a == "capacity") && !step.argv.iter().any(|a| a == "--from"))
        // explain FILE: only the paste is read.
        || step.argv.iter().any(|a| a == "explain")
}

/// The tokens of `file`'s expected output that are neither masked nor in
/// [`DECIDED`]: `file:line: token  | the line`.
fn unexplained_sizes(file: &str, text: &str) -> Vec<String> {
    let mut bad = Vec::new();
    for step in parse(text) {
        if reads_fixtures_only(&step) {
            continue;
        }
        let lines: Vec<&str> = step.expected.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            for t in size_tokens(line) {
                if decided_for(file, &lines, n, &t).is_none() {
                    bad.push(format!(
                        "{file}:{} (step at line {}): {}  | {line}",
                        step.line + 1 + n,
                        step.line,
                        t.text
                    ));
                }
            }
        }
    }
    bad
}

/// A transcript that runs on a real filesystem pins only sizes btrfs-lab
/// decides: everything else is `[..]`, or it fails on a machine with
/// another kernel, mkfs or disk (see [`DECIDED`]).
#[test]
fn transcripts_pin_only_sizes_btrfs_lab_decides() {
    let mut bad = Vec::new();
    for path in transcripts() {
        let file = path.file_name().unwrap().to_str().unwrap().to_owned();
        bad.extend(unexplained_sizes(
            &file,
            &fs::read_to_string(&path).unwrap(),
        ));
    }
    assert!(
        bad.is_empty(),
        "sizes in transcripts that mkfs, the kernel or the machine decide: mask them with [..] \
         or, when btrfs-lab decides them, list them in DECIDED with the reason:\n{}",
        bad.join("\n")
    );
    // Every entry is still used: a stale one would hide a future pin.
    for entry in DECIDED {
        let (file, tok, _, why) = entry;
        let text = fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("subcommands")
                .join(file),
        )
        .unwrap();
        let used = parse(&text)
            .iter()
            .filter(|s| !reads_fixtures_only(s))
            .any(|s| {
                let lines: Vec<&str> = s.expected.lines().collect();
                lines.iter().enumerate().any(|(i, l)| {
                    size_tokens(l).iter().any(|t| {
                        decided_for(file, &lines, i, t).is_some_and(|d| std::ptr::eq(d, entry))
                    })
                })
            });
        assert!(
            used,
            "DECIDED lists {tok} in {file} ({why}), which no longer pins it"
        );
    }
}

/// The check above finds what it must: chunk sizes and byte counts, a size
/// next to `[..]`, and it leaves masked values, rates' words and names alone.
#[test]
fn size_tokens_are_found() {
    let texts = |l: &str| {
        size_tokens(l)
            .into_iter()
            .map(|t| t.text)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        texts("Data, RAID0: total=204.75MiB, used=0.00B"),
        ["204.75MiB", "0.00B"]
    );
    assert_eq!(
        texts("Data, RAID0: total=214695936, used=[..]"),
        ["214695936"]
    );
    assert_eq!(texts("      \"used_bytes\": 0,"), ["0"]);
    assert_eq!(texts("      \"size_bytes\": 1073741824,"), ["1073741824"]);
    assert_eq!(texts("it takes 0m01s at 2000 MB/s"), ["2000 MB"]);
    assert_eq!(texts("   /dev/loop[..]\t 102.38MiB"), ["102.38MiB"]);
    assert!(texts("SEQ1M Q8T1 on loop240, fio-3.[..], 3000 files, \"devid\": 1").is_empty());
    assert!(texts("total=[..], used=[..]MiB").is_empty());
    // A live step's pin is found; the same line from a --parse step is not.
    let text = "```console\n$ btrfs-lab df x\nData: total=5.50MiB\n\
                $ btrfs-lab df --parse f\nData: total=5.50MiB\n```\n";
    let bad = unexplained_sizes("x.md", text);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with("x.md:3 (step at line 2): 5.50MiB"),
        "{bad:?}"
    );
}

/// The device-size knob scales what comes from the devices, and only that:
/// `sandbox up --device-size` (or its default), an image's `truncate -s`,
/// and the expected sizes [`DECIDED`] marks as the devices'.
#[test]
fn device_scale_rewrites_device_sizes_only() {
    let text = "```console\n\
        $ btrfs-lab sandbox up --name a --dir sbx --devices 2 --device-size 512M\n\
        sandbox demo is up: btrfs on 2 × 512.00MiB loop devices with direct I/O\n\
        $ btrfs-lab sandbox up --name b --dir b\n\
        ...\n\
        $ btrfs-lab sandbox up --device-size 10M\n\
        ? 2\n\
        btrfs-lab: error: --device-size 10.00MiB is too small for btrfs: use at least 256.00MiB\n\
        $ truncate -s 2G spare.img\n\
        $ truncate -s 64M sbx/mnt/db/disk.img\n\
        ```\n";
    let steps: Vec<Step> = parse(text)
        .iter()
        .map(|s| scale_step(s, "sandbox.md", 125))
        .collect();
    assert_eq!(steps[0].argv.last().unwrap(), &(640u64 << 20).to_string());
    assert_eq!(
        steps[0].expected,
        "sandbox demo is up: btrfs on 2 × 640.00MiB loop devices with direct I/O\n"
    );
    assert_eq!(
        steps[1].argv[7..],
        ["--device-size".to_owned(), (2560u64 << 20).to_string()]
    );
    // A refusal keeps its size, and so does the minimum it names.
    assert_eq!(steps[2].argv.last().unwrap(), "10M");
    assert!(
        steps[2]
            .expected
            .contains("10.00MiB is too small for btrfs: use at least 256.00MiB")
    );
    assert_eq!(steps[3].argv[2], (2560u64 << 20).to_string());
    // A file inside the filesystem is not a device.
    assert_eq!(steps[4].argv[2], "64M");
    assert_eq!(scaled_token("6.00GiB", 125), "7.50GiB");
    assert_eq!(scaled_token("1073741824", 125), "1342177280");
}

#[test]
fn a_transcript_compares_words_and_columns_not_where_lines_break() {
    let expected = "note: the quick brown fox\n  jumps over [..] dog\nNAME  SIZE\n...\nend";
    // Broken at another word: the same.
    assert!(same_but_wrapped(
        expected,
        "note: the quick brown\n  fox jumps over the lazy dog\nNAME  SIZE\nx\ny\nend\n"
    ));
    // A word changed, a column moved, a line lost: not the same.
    assert!(!same_but_wrapped(
        expected,
        "note: the quick brown cat\n  jumps over the lazy dog\nNAME  SIZE\nend"
    ));
    assert!(!same_but_wrapped(
        expected,
        "note: the quick brown fox\n  jumps over the lazy dog\nNAME SIZE\nend"
    ));
    assert!(!same_but_wrapped(
        expected,
        "note: the quick brown fox\n  jumps over the lazy dog\nNAME  SIZE"
    ));
    // A blank line is a blank line.
    assert!(same_but_wrapped("a b\n\nc", "a\nb\n\nc"));
    assert!(!same_but_wrapped("a b\n\nc", "a b\nc"));
    // Written back with the new breaks, the wildcards kept.
    assert_eq!(
        reflowed(
            expected,
            "note: the quick brown\n  fox jumps over the lazy dog\nNAME  SIZE\nx\nend"
        )
        .unwrap(),
        "note: the quick brown\n  fox jumps over [..] dog\nNAME  SIZE\n...\nend"
    );
}

#[test]
fn a_line_over_the_width_is_found_in_text_not_in_json() {
    let step = |argv: &[&str]| Step {
        line: 1,
        env: Vec::new(),
        argv: argv.iter().map(|a| a.to_string()).collect(),
        status: 0,
        expected: String::new(),
        expected_lines: 0..0,
    };
    let long = format!("{}\n", "word ".repeat(20));
    assert!(too_wide(&step(&["btrfs-lab", "doctor"]), &long).is_some());
    assert!(too_wide(&step(&["btrfs-lab", "doctor", "--json"]), &long).is_none());
    assert!(too_wide(&step(&["btrfs-lab", "completions", "bash"]), &long).is_none());
    let path = format!("{}\n", "/very/long".repeat(10));
    assert!(too_wide(&step(&["btrfs-lab", "doctor"]), &path).is_none());
    assert!(too_wide(&step(&["btrfs-lab", "doctor"]), "short line\n").is_none());
}
