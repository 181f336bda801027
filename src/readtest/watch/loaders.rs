//! Known loaders: how each is recognised from the process, how it reads by
//! default, and the setting that changes how it reads (docs/loaders.md is
//! the same table, with the versions and sources it was read from).

use super::report::{Bottleneck, LoaderSeen, ReadWay, Setting};

/// A reader this table knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known {
    /// llama.cpp's tools (llama-server, llama-cli, llama-bench, ...).
    LlamaCpp,
    /// LM Studio (its engine is llama.cpp).
    LmStudio,
    /// fastsafetensors (Python; vLLM `--load-format fastsafetensors`).
    Fastsafetensors,
    /// InstantTensor (parallel O_DIRECT; `--load-format instanttensor`).
    InstantTensor,
    /// RAPIDS KvikIO (a thread pool of POSIX reads, or cuFile).
    Kvikio,
    /// Run:ai Model Streamer (`--load-format runai_streamer`).
    RunaiStreamer,
    /// Hugging Face safetensors' `safe_open` (vLLM and SGLang's default).
    Safetensors,
}

impl Known {
    /// The name used in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Known::LlamaCpp => "llama.cpp",
            Known::LmStudio => "LM Studio",
            Known::Fastsafetensors => "fastsafetensors",
            Known::InstantTensor => "InstantTensor",
            Known::Kvikio => "KvikIO",
            Known::RunaiStreamer => "Run:ai Model Streamer",
            Known::Safetensors => "safetensors",
        }
    }

    /// How it reads by default (docs/loaders.md, "how it reads").
    fn default_way(self) -> &'static str {
        match self {
            Known::LlamaCpp => {
                "O_DIRECT by default on Linux since PR #18166 (`--load-mode dio`), mmap with `--mmap`/`--load-mode mmap`, one buffered read with `--no-mmap`/`--load-mode none`"
            }
            Known::LmStudio => "its llama.cpp engine; mmap unless the model's `direct_io` is on",
            Known::Fastsafetensors => {
                "cuFile (GPUDirect Storage) when usable, else its own threaded host reader (`nogds`)"
            }
            Known::InstantTensor => {
                "parallel O_DIRECT reads with several requests in flight (`concurrency`, `io_depth`), pipelined to the GPU"
            }
            Known::Kvikio => {
                "a pool of KVIKIO_NTHREADS threads (default 1) of POSIX preads of KVIKIO_TASK_SIZE (4 MiB), or cuFile"
            }
            Known::RunaiStreamer => {
                "RUNAI_STREAMER_CONCURRENCY reader threads streaming the tensors into a CPU buffer"
            }
            Known::Safetensors => {
                "a memory mapping of each shard, its pages faulted in by the thread that copies the tensors"
            }
        }
    }
}

/// The serving engine around a reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Engine {
    /// vLLM (`vllm serve`, `VLLM::EngineCore` workers).
    Vllm,
    /// SGLang (`sglang.launch_server`, `sglang::scheduler` workers).
    Sglang,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vLLM",
            Engine::Sglang => "SGLang",
        }
    }
}

/// The environment variables that change how a known reader reads.
pub(crate) const ENV_NAMES: &[&str] = &[
    "KVIKIO_NTHREADS",
    "KVIKIO_NUM_THREADS",
    "KVIKIO_COMPAT_MODE",
    "KVIKIO_TASK_SIZE",
    "RUNAI_STREAMER_CONCURRENCY",
    "RUNAI_STREAMER_CHUNK_BYTESIZE",
    "RUNAI_STREAMER_MEMORY_LIMIT",
];

/// What the process shows of itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct Signals<'a> {
    /// `comm` (a worker's process title on Linux: `VLLM::EngineCor`).
    pub(crate) comm: &'a str,
    /// Its command line.
    pub(crate) command_line: &'a str,
    /// Its parents' command lines, nearest first (vLLM's and SGLang's
    /// workers replace their own with a title; the server keeps the flags).
    pub(crate) parents: &'a [String],
    /// Paths it maps (shared libraries).
    pub(crate) mapped: &'a [String],
    /// Its threads' names.
    pub(crate) thread_names: &'a [String],
    /// The [`ENV_NAMES`] it started with.
    pub(crate) env: &'a [(String, String)],
}

/// What was recognised.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Recognised {
    /// The reader.
    pub(crate) known: Option<Known>,
    /// The engine around it.
    pub(crate) engine: Option<Engine>,
    /// `--load-format` of vLLM/SGLang, `--load-mode` of llama.cpp (or the
    /// older flags it replaced, as the mode they choose).
    pub(crate) format: Option<String>,
    /// The signals it was recognised by.
    pub(crate) evidence: Vec<String>,
    /// The settings read from its environment.
    pub(crate) env: Vec<(String, String)>,
}

/// The value of `--flag X` or `--flag=X` in a command line.
fn flag_value<'a>(command_line: &'a str, flag: &str) -> Option<&'a str> {
    let mut words = command_line.split_ascii_whitespace();
    while let Some(w) = words.next() {
        if w == flag {
            return words.next();
        }
        if let Some(v) = w.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            return Some(v);
        }
    }
    None
}

fn has_word(command_line: &str, word: &str) -> bool {
    command_line.split_ascii_whitespace().any(|w| w == word)
}

/// llama.cpp's load mode from its flags (PR #20834's `--load-mode`, or the
/// flags it deprecates).
fn llama_load_mode(command_line: &str) -> Option<String> {
    if let Some(m) = flag_value(command_line, "--load-mode") {
        return Some(m.to_owned());
    }
    let any = |ws: &[&str]| ws.iter().any(|w| has_word(command_line, w));
    if any(&["-dio", "--direct-io"]) {
        Some("dio".into())
    } else if any(&["--mlock"]) {
        Some("mlock".into())
    } else if any(&["--no-mmap"]) {
        Some("none".into())
    } else if any(&["--mmap"]) {
        Some("mmap".into())
    } else {
        None
    }
}

/// The engine, from a command line or a process title.
fn engine_of(comm: &str, command_line: &str) -> Option<Engine> {
    let lower = command_line.to_ascii_lowercase();
    let words: Vec<&str> = lower.split_ascii_whitespace().collect();
    let program = |w: &&str| w.rsplit('/').next().unwrap_or(w).to_owned();
    let first_two: Vec<String> = words.iter().take(3).map(program).collect();
    if comm.starts_with("VLLM::")
        || lower.starts_with("vllm::")
        || lower.contains("vllm.entrypoints")
        || first_two.iter().any(|w| w == "vllm")
    {
        return Some(Engine::Vllm);
    }
    if comm.starts_with("sglang::")
        || lower.starts_with("sglang::")
        || lower.contains("sglang.launch_server")
        || first_two.iter().any(|w| w == "sglang")
    {
        return Some(Engine::Sglang);
    }
    None
}

/// Which known reader (and engine) this is, and by which signals.
pub(crate) fn identify(s: &Signals<'_>) -> Recognised {
    let mut r = Recognised {
        env: s.env.to_vec(),
        ..Recognised::default()
    };
    let lib = |needle: &str| s.mapped.iter().find(|p| p.contains(needle));
    let lower = s.command_line.to_ascii_lowercase();
    // The engine: this process, or the server that started it.
    let lines = std::iter::once(s.command_line).chain(s.parents.iter().map(String::as_str));
    for (i, line) in lines.enumerate() {
        let comm = if i == 0 { s.comm } else { "" };
        let Some(e) = engine_of(comm, line) else {
            continue;
        };
        if r.engine.is_none() {
            r.engine = Some(e);
            r.evidence.push(if i == 0 {
                format!("{} process", e.name())
            } else {
                format!("started by a {} server ({i} parent(s) up)", e.name())
            });
        }
        // A worker's title has no flags: the server's line has them.
        if let Some(f) = flag_value(line, "--load-format") {
            r.format = Some(f.to_owned());
            r.evidence.push(if i == 0 {
                format!("--load-format {f}")
            } else {
                format!("--load-format {f} (its server's command line)")
            });
            break;
        }
    }
    if lower.contains("lm studio")
        || lower.contains("lm-studio")
        || lower.contains(".lmstudio")
        || s.comm == "lms"
    {
        r.known = Some(Known::LmStudio);
        r.evidence.push("LM Studio in its command line".into());
        return r;
    }
    // Libraries are the surest sign of the reader that runs.
    let by_lib = [
        ("fastsafetensors", Known::Fastsafetensors),
        ("instanttensor", Known::InstantTensor),
        ("libkvikio", Known::Kvikio),
        ("runai_model_streamer", Known::RunaiStreamer),
        ("libstreamer.so", Known::RunaiStreamer),
        ("_safetensors_rust", Known::Safetensors),
    ];
    for (needle, k) in by_lib {
        if let Some(p) = lib(needle) {
            r.known = Some(k);
            r.evidence.push(format!("maps {p}"));
            break;
        }
    }
    if r.known.is_none()
        && let Some(f) = r.format.as_deref()
    {
        r.known = match f {
            "fastsafetensors" => Some(Known::Fastsafetensors),
            "instanttensor" => Some(Known::InstantTensor),
            "runai_streamer" | "runai_streamer_sharded" => Some(Known::RunaiStreamer),
            "safetensors" | "auto" => Some(Known::Safetensors),
            _ => None,
        };
    }
    if r.known.is_none() {
        let program = s
            .command_line
            .split_ascii_whitespace()
            .next()
            .and_then(|w| w.rsplit('/').next())
            .unwrap_or(s.comm);
        if program.starts_with("llama-") || s.comm.starts_with("llama-") {
            r.known = Some(Known::LlamaCpp);
            r.evidence.push(format!("program {program}"));
        } else if let Some(p) = lib("libllama.so") {
            r.known = Some(Known::LlamaCpp);
            r.evidence.push(format!("maps {p}"));
        }
        if r.known == Some(Known::LlamaCpp) {
            r.format = llama_load_mode(s.command_line);
            if let Some(m) = &r.format {
                r.evidence.push(format!("load mode {m}"));
            }
        }
    }
    if r.known.is_none()
        && s.env.iter().any(|(k, _)| k.starts_with("KVIKIO_"))
        && s.thread_names.len() > 1
    {
        // KvikIO's settings without its library mapped by name (a static
        // build): the environment is the only sign.
        r.known = Some(Known::Kvikio);
    }
    for (k, v) in &r.env {
        r.evidence.push(format!("environment {k}={v}"));
    }
    r
}

/// The process maps NVIDIA's cuFile library (GPUDirect Storage).
pub(crate) fn uses_cufile(mapped: &[String]) -> bool {
    mapped.iter().any(|p| p.contains("libcufile"))
}

/// The report's account of the recognised loader.
pub(crate) fn seen(r: &Recognised) -> Option<LoaderSeen> {
    let k = r.known?;
    Some(LoaderSeen {
        program: k.name().to_owned(),
        engine: r.engine.map(|e| e.name().to_owned()),
        format: r.format.clone(),
        recognised_by: r.evidence.clone(),
        environment: r.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        default_way: k.default_way().to_owned(),
    })
}

const LLAMA_SOURCE: &str = "llama.cpp PR #18166 (--direct-io), PR #20834 (--load-mode), tools/main/README (--no-mmap, --mlock)";
const LMSTUDIO_SOURCE: &str = "lmstudio-bug-tracker issue #1678 (direct_io load setting)";
const FST_SOURCE: &str = "fastsafetensors README (nogds); NVIDIA GDS docs (compatibility mode)";
const IT_SOURCE: &str = "sglang PR #40453 (concurrency, io_depth, chunk_size); vLLM docs, models/extensions/instanttensor";
const KVIKIO_SOURCE: &str =
    "KvikIO docs, runtime settings (KVIKIO_NTHREADS default 1, KVIKIO_COMPAT_MODE)";
const RUNAI_SOURCE: &str = "runai-model-streamer docs (RUNAI_STREAMER_CONCURRENCY); vLLM docs, models/extensions/runai_model_streamer";
const ST_SOURCE: &str =
    "vLLM PR #10647, issue #36091 (parallel loaders vs safe_open); fairseq2 PR #1199";

fn env_number(r: &Recognised, names: &[&str]) -> Option<u64> {
    r.env
        .iter()
        .find(|(k, _)| names.contains(&k.as_str()))
        .and_then(|(_, v)| v.trim().parse().ok())
}

/// The settings to change, most useful first, for how the file is read
/// (`way`) and what holds it back.
pub(crate) fn settings(
    loader: &Recognised,
    way: Option<ReadWay>,
    bottleneck: Bottleneck,
    reading_threads: u32,
    cufile: bool,
) -> Vec<Setting> {
    let mut out = Vec::new();
    let slow_path = matches!(
        bottleneck,
        Bottleneck::Cpu | Bottleneck::TooFewReaders | Bottleneck::Storage | Bottleneck::Unclear
    );
    let few_in_flight = matches!(
        bottleneck,
        Bottleneck::TooFewReaders | Bottleneck::Storage | Bottleneck::Unclear
    );
    let cached = bottleneck == Bottleneck::PageCache;
    let set = |program: &str, change: String, source: &str| Setting {
        program: program.to_owned(),
        change,
        source: source.to_owned(),
        expected_gain: None,
    };
    let engine_flag = |format: &str| match loader.engine {
        Some(e) => format!("`--load-format {format}` ({} flag)", e.name()),
        None => format!("a loader such as {format}"),
    };
    let mode = loader.format.as_deref();
    match (loader.known, way) {
        (Some(Known::LlamaCpp), Some(ReadWay::Mmap | ReadWay::Buffered)) if slow_path => {
            out.push(set(
                "llama.cpp",
                format!(
                    "load with direct I/O: `--load-mode dio` on builds that have --load-mode, `--direct-io` (`-dio`) on older ones{}; `--no-mmap` alone reads through the page cache with one copy",
                    mode.map_or_else(String::new, |m| format!(" (it runs with load mode {m})"))
                ),
                LLAMA_SOURCE,
            ));
            out.push(set(
                "llama.cpp",
                "on a NUMA machine compare both: direct I/O was reported slower there (ik_llama.cpp PR #1301)".into(),
                "ik_llama.cpp PR #1301",
            ));
        }
        (Some(Known::LlamaCpp), Some(_)) if cached => out.push(set(
            "llama.cpp",
            "the model is already in the page cache: the default mmap (`--load-mode mmap`) reloads it without storage; `--mlock` (`--load-mode mlock`) keeps it there".into(),
            LLAMA_SOURCE,
        )),
        (Some(Known::LmStudio), Some(ReadWay::Mmap | ReadWay::Buffered)) if slow_path => {
            out.push(set(
                "LM Studio",
                "turn on direct I/O for the model (load setting `direct_io = true` where your version exposes it; its llama.cpp engine then reads with O_DIRECT)".into(),
                LMSTUDIO_SOURCE,
            ))
        }
        (Some(Known::Fastsafetensors), Some(_)) if slow_path => out.push(set(
            "fastsafetensors",
            "on btrfs GPUDirect Storage runs in compatibility mode: load with `nogds=True` (its own threaded host reader) and give it more threads".into(),
            FST_SOURCE,
        )),
        (Some(Known::InstantTensor), Some(_)) if few_in_flight => out.push(set(
            "InstantTensor",
            "keep more requests in flight: raise `concurrency` and `io_depth` in `--model-loader-extra-config` (JSON), with `chunk_size` of a few MiB".into(),
            IT_SOURCE,
        )),
        (Some(Known::Kvikio), Some(_)) if slow_path => {
            let n = env_number(loader, &["KVIKIO_NTHREADS", "KVIKIO_NUM_THREADS"]).unwrap_or(1);
            if n < 8 && bottleneck != Bottleneck::Cpu {
                out.push(set(
                    "KvikIO",
                    format!(
                        "set `KVIKIO_NTHREADS` to 8 or more (it runs with {n}{}): each thread keeps one `KVIKIO_TASK_SIZE` read in flight",
                        if env_number(loader, &["KVIKIO_NTHREADS", "KVIKIO_NUM_THREADS"]).is_none() { ", the default" } else { "" }
                    ),
                    KVIKIO_SOURCE,
                ));
            }
            if cufile {
                out.push(set(
                    "KvikIO",
                    "`KVIKIO_COMPAT_MODE=ON`: on btrfs cuFile falls back to POSIX reads anyway; KvikIO's own thread pool does them without cuFile's probe".into(),
                    KVIKIO_SOURCE,
                ));
            }
        }
        (Some(Known::RunaiStreamer), Some(_)) if few_in_flight => {
            let n = env_number(loader, &["RUNAI_STREAMER_CONCURRENCY"]);
            out.push(set(
                "Run:ai Model Streamer",
                format!(
                    "raise `RUNAI_STREAMER_CONCURRENCY` ({}), or `concurrency` in `--model-loader-extra-config`",
                    n.map_or_else(|| "not set: its default".to_owned(), |n| format!("it runs with {n}"))
                ),
                RUNAI_SOURCE,
            ))
        }
        (Some(Known::Safetensors), Some(ReadWay::Mmap | ReadWay::Buffered)) if slow_path => {
            out.push(set(
                "safetensors",
                format!(
                    "safe_open maps each shard and one thread faults its pages in, a few readahead windows in flight: use {} (parallel reads, several requests in flight)",
                    engine_flag("instanttensor")
                ),
                ST_SOURCE,
            ))
        }
        _ => {}
    }
    let generic = match (way, bottleneck) {
        (
            Some(ReadWay::Mmap | ReadWay::Buffered),
            Bottleneck::Cpu | Bottleneck::TooFewReaders | Bottleneck::Unclear,
        ) => Some(
            "open the file with O_DIRECT and read it with 4 or more threads straight into the destination (what `read-test` calls direct)",
        ),
        (Some(ReadWay::Direct), Bottleneck::TooFewReaders | Bottleneck::Unclear)
            if reading_threads <= 2 =>
        {
            Some(
                "keep O_DIRECT, read with more threads (4 or more) or larger requests, so more bytes are in flight",
            )
        }
        (Some(ReadWay::Direct), Bottleneck::Cpu) => Some(
            "keep O_DIRECT and read straight into the destination: a copy after each read costs CPU per byte",
        ),
        _ => None,
    };
    if let Some(g) = generic {
        out.push(set(
            "any",
            g.to_owned(),
            "read-test on this file (direct, direct-copy, buffered, mmap)",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(comm: &str, command_line: &str, mapped: &[&str]) -> Recognised {
        let mapped: Vec<String> = mapped.iter().map(|s| (*s).to_owned()).collect();
        identify(&Signals {
            comm,
            command_line,
            mapped: &mapped,
            ..Signals::default()
        })
    }

    fn settings_of(r: &Recognised, way: ReadWay, b: Bottleneck, n: u32) -> Vec<Setting> {
        settings(r, Some(way), b, n, false)
    }

    // Command lines and library paths as the projects document them
    // (docs/loaders.md gives each source).
    #[test]
    fn known_programs_by_name_libraries_and_parents() {
        assert_eq!(
            id("llama-server", "/opt/llama/llama-server -m /m/x.gguf", &[]).known,
            Some(Known::LlamaCpp)
        );
        let dio = id(
            "llama-server",
            "llama-server -m /m/x.gguf --load-mode dio",
            &[],
        );
        assert_eq!(dio.format.as_deref(), Some("dio"));
        assert_eq!(
            id("llama-cli", "llama-cli -m x.gguf --no-mmap", &[])
                .format
                .as_deref(),
            Some("none")
        );
        assert_eq!(
            id(
                "python3",
                "python3 serve.py",
                &["/usr/lib/python3/site-packages/fastsafetensors/cpp.so"]
            )
            .known,
            Some(Known::Fastsafetensors)
        );
        assert_eq!(
            id("node", "/opt/LM Studio/lm-studio --type=utility", &[]).known,
            Some(Known::LmStudio)
        );
        assert_eq!(id("cat", "cat /m/x.gguf", &[]).known, None);
        assert!(uses_cufile(
            &["/usr/local/cuda/lib64/libcufile.so.0".into()]
        ));
        // vLLM's worker carries a title; the server's flags are a parent's.
        let parents = vec![
            "/usr/bin/python3 /usr/local/bin/vllm serve Qwen/Qwen3-8B --load-format runai_streamer"
                .to_owned(),
        ];
        let env = vec![("RUNAI_STREAMER_CONCURRENCY".to_owned(), "4".to_owned())];
        let w = identify(&Signals {
            comm: "VLLM::EngineCor",
            command_line: "VLLM::EngineCore",
            parents: &parents,
            env: &env,
            ..Signals::default()
        });
        assert_eq!(w.engine, Some(Engine::Vllm));
        assert_eq!(w.known, Some(Known::RunaiStreamer));
        assert_eq!(w.format.as_deref(), Some("runai_streamer"));
        let s = seen(&w).unwrap();
        assert_eq!(s.engine.as_deref(), Some("vLLM"));
        assert_eq!(s.environment, vec!["RUNAI_STREAMER_CONCURRENCY=4"]);
        // SGLang, its default format: safetensors' safe_open.
        let sg = id(
            "python3",
            "python3 -m sglang.launch_server --model-path /m --load-format=auto",
            &["/venv/lib/python3.12/site-packages/safetensors/_safetensors_rust.abi3.so"],
        );
        assert_eq!(
            (sg.engine, sg.known),
            (Some(Engine::Sglang), Some(Known::Safetensors))
        );
        assert_eq!(
            id(
                "python3",
                "python3 load.py",
                &["/venv/lib/python3.12/site-packages/instanttensor/_C.so"]
            )
            .known,
            Some(Known::InstantTensor)
        );
        assert_eq!(
            id("python3", "python3 x.py", &["/opt/conda/lib/libkvikio.so"]).known,
            Some(Known::Kvikio)
        );
    }

    #[test]
    fn settings_follow_the_way_the_bottleneck_and_the_environment() {
        let llama = id("llama-server", "llama-server -m x --mmap", &[]);
        let s = settings_of(&llama, ReadWay::Mmap, Bottleneck::Cpu, 1);
        assert!(s[0].change.contains("--load-mode dio"), "{s:?}");
        assert!(s[0].change.contains("load mode mmap"), "{s:?}");
        assert_eq!(s.last().unwrap().program, "any");
        let warm = settings_of(&llama, ReadWay::Mmap, Bottleneck::PageCache, 1);
        assert!(warm[0].change.contains("page cache"), "{warm:?}");
        assert!(warm.iter().all(|x| x.program != "any"));
        let none = Recognised::default();
        let direct = settings_of(&none, ReadWay::Direct, Bottleneck::TooFewReaders, 1);
        assert!(direct[0].change.contains("more threads"), "{direct:?}");
        assert!(settings_of(&none, ReadWay::Direct, Bottleneck::StorageCeiling, 8).is_empty());
        assert!(settings(&none, None, Bottleneck::NotReading, 0, false).is_empty());

        let mut kv = id("python3", "python3 x.py", &["/opt/lib/libkvikio.so"]);
        let s = settings(
            &kv,
            Some(ReadWay::Direct),
            Bottleneck::TooFewReaders,
            1,
            true,
        );
        assert!(s[0].change.contains("it runs with 1, the default"), "{s:?}");
        assert!(s[1].change.contains("KVIKIO_COMPAT_MODE=ON"), "{s:?}");
        kv.env = vec![("KVIKIO_NTHREADS".into(), "16".into())];
        let s = settings_of(&kv, ReadWay::Direct, Bottleneck::Storage, 16);
        assert!(
            s.iter().all(|x| !x.change.contains("KVIKIO_NTHREADS")),
            "{s:?}"
        );

        let st = id(
            "python3",
            "vllm serve m",
            &["/v/safetensors/_safetensors_rust.abi3.so"],
        );
        let s = settings_of(&st, ReadWay::Mmap, Bottleneck::TooFewReaders, 1);
        assert!(
            s[0].change
                .contains("`--load-format instanttensor` (vLLM flag)"),
            "{s:?}"
        );
    }
}
