//! Known loaders and the setting that changes how they read
//! (docs/loaders.md is the same table, with its sources).

use super::report::{Bottleneck, ReadWay, Setting};

/// A program this table knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known {
    /// llama.cpp's tools (llama-server, llama-cli, llama-bench, ...).
    LlamaCpp,
    /// LM Studio (its engine is llama.cpp).
    LmStudio,
    /// fastsafetensors (Python; vLLM `--load-format fastsafetensors`).
    Fastsafetensors,
}

impl Known {
    /// The name used in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Known::LlamaCpp => "llama.cpp",
            Known::LmStudio => "LM Studio",
            Known::Fastsafetensors => "fastsafetensors",
        }
    }
}

/// Which known program this is, from its command name, its command line
/// and the paths it has mapped (shared libraries).
pub(crate) fn identify(comm: &str, command_line: &str, mapped: &[String]) -> Option<Known> {
    let lower = command_line.to_ascii_lowercase();
    let maps = |needle: &str| mapped.iter().any(|p| p.contains(needle));
    if lower.contains("lm studio")
        || lower.contains("lm-studio")
        || lower.contains(".lmstudio")
        || comm == "lms"
    {
        return Some(Known::LmStudio);
    }
    if maps("fastsafetensors") {
        return Some(Known::Fastsafetensors);
    }
    let program = command_line
        .split_ascii_whitespace()
        .next()
        .and_then(|w| w.rsplit('/').next())
        .unwrap_or(comm);
    if program.starts_with("llama-") || comm.starts_with("llama-") || maps("libllama.so") {
        return Some(Known::LlamaCpp);
    }
    None
}

/// The process maps NVIDIA's cuFile library (GPUDirect Storage).
pub(crate) fn uses_cufile(mapped: &[String]) -> bool {
    mapped.iter().any(|p| p.contains("libcufile"))
}

const LLAMA_SOURCE: &str = "llama.cpp PR #18166 (--direct-io), PR #20834 (--load-mode), tools/main/README (--no-mmap, --mlock)";
const LMSTUDIO_SOURCE: &str = "lmstudio-bug-tracker issue #1678 (direct_io load setting)";
const FST_SOURCE: &str = "fastsafetensors README (nogds); NVIDIA GDS docs (compatibility mode)";

/// The settings to change, most useful first, for how the file is read
/// (`way`) and what holds it back.
pub(crate) fn settings(
    known: Option<Known>,
    way: Option<ReadWay>,
    bottleneck: Bottleneck,
    reading_threads: u32,
) -> Vec<Setting> {
    let mut out = Vec::new();
    let slow_path = matches!(
        bottleneck,
        Bottleneck::Cpu | Bottleneck::TooFewReaders | Bottleneck::Storage | Bottleneck::Unclear
    );
    let cached = bottleneck == Bottleneck::PageCache;
    let set = |program: &str, change: &str, source: &str| Setting {
        program: program.to_owned(),
        change: change.to_owned(),
        source: source.to_owned(),
    };
    match (known, way) {
        (Some(Known::LlamaCpp), Some(ReadWay::Mmap | ReadWay::Buffered)) if slow_path => {
            out.push(set(
                "llama.cpp",
                "load with direct I/O: `--direct-io` (`-dio`), or `--load-mode dio` on builds that have --load-mode; `--no-mmap` alone reads through the page cache with one copy",
                LLAMA_SOURCE,
            ));
            out.push(set(
                "llama.cpp",
                "on a NUMA machine compare both: direct I/O was reported slower there (ik_llama.cpp PR #1301)",
                "ik_llama.cpp PR #1301",
            ));
        }
        (Some(Known::LlamaCpp), Some(_)) if cached => out.push(set(
            "llama.cpp",
            "the model is already in the page cache: the default mmap (`--load-mode mmap`) reloads it without storage; `--mlock` keeps it there",
            LLAMA_SOURCE,
        )),
        (Some(Known::LmStudio), Some(ReadWay::Mmap | ReadWay::Buffered)) if slow_path => {
            out.push(set(
                "LM Studio",
                "turn on direct I/O for the model (load setting `direct_io = true` where your version exposes it; its llama.cpp engine then reads with O_DIRECT)",
                LMSTUDIO_SOURCE,
            ))
        }
        (Some(Known::Fastsafetensors), Some(_)) if slow_path => out.push(set(
            "fastsafetensors",
            "on btrfs GPUDirect Storage runs in compatibility mode: load with `nogds=True` (its own threaded host reader) and give it more threads",
            FST_SOURCE,
        )),
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
            g,
            "read-test on this file (direct, direct-copy, buffered, mmap)",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_programs_by_name_and_libraries() {
        assert_eq!(
            identify("llama-server", "/opt/llama/llama-server -m /m/x.gguf", &[]),
            Some(Known::LlamaCpp)
        );
        assert_eq!(
            identify(
                "python3",
                "python3 serve.py",
                &["/usr/lib/python3/site-packages/fastsafetensors/cpp.so".into()]
            ),
            Some(Known::Fastsafetensors)
        );
        assert_eq!(
            identify("node", "/opt/LM Studio/lm-studio --type=utility", &[]),
            Some(Known::LmStudio)
        );
        assert_eq!(identify("cat", "cat /m/x.gguf", &[]), None);
        assert!(uses_cufile(
            &["/usr/local/cuda/lib64/libcufile.so.0".into()]
        ));
    }

    #[test]
    fn settings_follow_the_way_and_the_bottleneck() {
        let s = settings(
            Some(Known::LlamaCpp),
            Some(ReadWay::Mmap),
            Bottleneck::Cpu,
            1,
        );
        assert!(s[0].change.contains("--direct-io"), "{s:?}");
        assert_eq!(s.last().unwrap().program, "any");
        let warm = settings(
            Some(Known::LlamaCpp),
            Some(ReadWay::Mmap),
            Bottleneck::PageCache,
            1,
        );
        assert!(warm[0].change.contains("page cache"), "{warm:?}");
        assert!(warm.iter().all(|x| x.program != "any"));
        let direct = settings(None, Some(ReadWay::Direct), Bottleneck::TooFewReaders, 1);
        assert!(direct[0].change.contains("more threads"), "{direct:?}");
        assert!(settings(None, Some(ReadWay::Direct), Bottleneck::StorageCeiling, 8).is_empty());
        assert!(settings(None, None, Bottleneck::NotReading, 0).is_empty());
    }
}
