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

use crate::common::{TestEnv, bin, require_root};

#[derive(Debug)]
struct Step {
    line: usize,
    env: Vec<(String, String)>,
    argv: Vec<String>,
    status: i32,
    expected: String,
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
                });
            } else if let Some(step) = current.as_mut() {
                if let Some(more) = line.strip_prefix("> ").filter(|_| step.expected.is_empty()) {
                    step.argv.extend(shlex::split(more).unwrap());
                } else if let Some(code) =
                    line.strip_prefix("? ").filter(|_| step.expected.is_empty())
                {
                    step.status = code.trim().parse().expect("? takes an exit status");
                } else {
                    step.expected.push_str(line);
                    step.expected.push('\n');
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
    for step in &steps {
        let (code, output) = execute(step, &cwd, &env);
        let name = format!("{}:{} `{}`", path.display(), step.line, step.argv.join(" "));
        if code != step.status {
            return Err(format!(
                "{name}: exit status {code}, expected {}\n{output}",
                step.status
            ));
        }
        assert
            .try_eq(
                Some(&name),
                trim_trailing_newlines(&output).into(),
                step.expected.clone().into(),
            )
            .map_err(|e| format!("{name}: output differs\n{e}"))?;
    }
    // `env` drops here: any sandbox a failed step left is removed first.
    Ok(())
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
    root bench => "bench.md",
    user completions => "completions.md",
    root convert => "convert.md",
    root demo => "demo.md",
    root device => "device.md",
    root df => "df.md",
    root doctor => "doctor.md",
    user links => "links.md",
    user man => "man.md",
    root nocow => "nocow.md",
    root probe_dio => "probe-dio.md",
    root read_test => "read-test.md",
    root sandbox => "sandbox.md",
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
