//! The Dockerfile, read as stages of instructions, and what its image build must do: a locked
//! release build in a builder of the crate's Rust, from a build context `.dockerignore` lets
//! through, into a slim runtime of the same Debian release that ships the binary, its runtime
//! packages and no build tools.

use std::collections::BTreeMap;

use crate::deploy_chart::files::{cargo_package, read_repo, repo};

/// Where the Dockerfile installs the binary.
pub const IMAGE_BINARY: &str = "/usr/bin/msfs";

/// The Dockerfile as instructions (continuation lines joined), split into stages.
pub struct Dockerfile {
    /// Global ARGs (before the first FROM) and each stage's ARGs.
    args: BTreeMap<String, String>,
    stages: Vec<Stage>,
}

struct Stage {
    from: String,
    name: String,
    instructions: Vec<(String, String)>,
}

impl Dockerfile {
    pub fn read() -> Dockerfile {
        let text = read_repo("Dockerfile");
        let mut joined = Vec::new();
        let mut current = String::new();
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with('#') || (current.is_empty() && trimmed.is_empty()) {
                continue;
            }
            match trimmed.strip_suffix('\\') {
                Some(part) => {
                    current.push_str(part);
                    current.push(' ');
                }
                None => {
                    current.push_str(trimmed);
                    joined.push(std::mem::take(&mut current));
                }
            }
        }
        let mut file = Dockerfile {
            args: BTreeMap::new(),
            stages: Vec::new(),
        };
        for instruction in joined {
            let (op, rest) = instruction.split_once(' ').unwrap_or((&instruction, ""));
            let (op, rest) = (op.to_ascii_uppercase(), rest.trim().to_string());
            if op == "FROM" {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let name = match words.as_slice() {
                    [_, as_, name] if as_.eq_ignore_ascii_case("as") => name.to_string(),
                    _ => String::new(),
                };
                file.stages.push(Stage {
                    from: words.first().unwrap_or(&"").to_string(),
                    name,
                    instructions: Vec::new(),
                });
                continue;
            }
            if op == "ARG"
                && let Some((k, v)) = rest.split_once('=')
            {
                file.args
                    .insert(k.trim().to_string(), v.trim().trim_matches('"').to_string());
            }
            if let Some(stage) = file.stages.last_mut() {
                stage.instructions.push((op, rest));
            }
        }
        file
    }

    /// The default of ARG `name`.
    pub fn arg(&self, name: &str) -> Option<String> {
        self.args.get(name).cloned()
    }

    /// `${NAME}` replaced by the ARG defaults.
    fn expand(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (k, v) in &self.args {
            out = out.replace(&format!("${{{k}}}"), v);
        }
        out
    }

    /// What is wrong with the image build, in words; fewer than two stages fail at once.
    pub fn problems(&self) -> Vec<String> {
        assert!(
            self.stages.len() >= 2,
            "Dockerfile needs a builder and a runtime stage, found {} stage(s)",
            self.stages.len()
        );
        let mut problems = self.builder_problems();
        problems.extend(self.context_problems());
        problems.extend(self.runtime_problems());
        problems
    }

    fn builder(&self) -> &Stage {
        &self.stages[0]
    }

    fn runtime(&self) -> &Stage {
        self.stages.last().expect("a stage")
    }

    /// Builder: the Rust image of the crate's rust-version, protoc and the build packages the
    /// test machines install, a locked release build, no copy of the whole context.
    fn builder_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let builder = self.builder();
        let builder_from = self.expand(&builder.from);
        let rust_version = cargo_package("rust-version");
        if !builder_from.starts_with(&format!("rust:{rust_version}")) {
            problems.push(format!(
                "the builder stage is FROM {builder_from}, not the rust:{rust_version} image of \
                 Cargo.toml's rust-version"
            ));
        }
        if builder.name.is_empty() {
            problems.push("the builder stage has no name (FROM ... AS builder)".into());
        }
        let builder_runs = builder.all("RUN").join("\n");
        if !builder_runs.contains("protobuf-compiler") {
            problems
                .push("the builder installs no protobuf-compiler: build.rs needs protoc".into());
        }
        // The build-time Debian packages the test machines install must be in the builder too.
        let script = read_repo("scripts/install-test-deps.sh");
        let apt_packages = script
            .lines()
            .find_map(|l| l.trim().strip_prefix("APT_PACKAGES=("))
            .map(|l| {
                l.trim_end_matches(')')
                    .split_whitespace()
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        assert!(
            !apt_packages.is_empty(),
            "scripts/install-test-deps.sh has no APT_PACKAGES=(...) line to compare the builder with"
        );
        for package in apt_packages {
            let build_time =
                package.ends_with("-dev") || ["protobuf-compiler", "pkg-config"].contains(&package);
            if build_time && !builder_runs.split_whitespace().any(|w| w == package) {
                problems.push(format!(
                    "scripts/install-test-deps.sh installs build package {package} but the \
                     Dockerfile's builder does not"
                ));
            }
        }
        let build = builder
            .all("RUN")
            .into_iter()
            .find(|r| r.contains("cargo build"))
            .unwrap_or("");
        for needed in ["--release", "--locked"] {
            if !build.contains(needed) {
                problems.push(format!(
                    "the builder's cargo build lacks {needed}: {build:?}"
                ));
            }
        }
        for copy in builder.all("COPY") {
            if copy.contains("--from") {
                continue;
            }
            if copy.split_whitespace().any(|w| w == "." || w == "./.") {
                problems.push(format!(
                    "the builder copies the whole context ({copy}); copy what the build needs"
                ));
            }
        }
        problems
    }

    /// The build context: everything the builder copies exists and passes .dockerignore, and
    /// target/ stays out.
    fn context_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let ignore = read_repo(".dockerignore");
        let allowed: Vec<&str> = ignore
            .lines()
            .filter_map(|l| l.trim().strip_prefix('!'))
            .map(|p| p.trim_end_matches('/'))
            .collect();
        let ignores_all = ignore.lines().any(|l| l.trim() == "*");
        for copy in self.builder().all("COPY") {
            let words: Vec<&str> = copy
                .split_whitespace()
                .filter(|w| !w.starts_with("--"))
                .collect();
            for source in &words[..words.len().saturating_sub(1)] {
                let source = source.trim_end_matches('/');
                if ignores_all && !allowed.contains(&source) {
                    problems.push(format!(
                        "the builder copies {source}, which .dockerignore leaves out of the \
                         context"
                    ));
                }
                if !repo().join(source).exists() {
                    problems.push(format!("the builder copies {source}, which does not exist"));
                }
            }
        }
        if !ignore
            .lines()
            .any(|l| l.trim() == "*" || l.trim().trim_end_matches('/') == "target")
        {
            problems.push(".dockerignore does not keep target/ out of the build context".into());
        }
        problems
    }

    /// Runtime: slim Debian of the builder's release, fuse3 and CA certificates, the binary
    /// under both names, no build tools, labels, and the CSI plugin by default.
    fn runtime_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let runtime = self.runtime();
        let builder_from = self.expand(&self.builder().from);
        let runtime_from = self.expand(&runtime.from);
        if !(runtime_from.starts_with("debian:") && runtime_from.ends_with("-slim")) {
            problems.push(format!(
                "the runtime stage is FROM {runtime_from}, not a slim Debian"
            ));
        }
        let release = self.arg("DEBIAN_RELEASE").unwrap_or_default();
        if release.is_empty()
            || !builder_from.ends_with(&release)
            || !runtime_from.contains(&release)
        {
            problems.push(format!(
                "builder ({builder_from}) and runtime ({runtime_from}) are not the same Debian \
                 release: the binary may need a newer glibc than the runtime has"
            ));
        }
        let runtime_runs = runtime.all("RUN").join("\n");
        for package in ["fuse3", "ca-certificates"] {
            if !runtime_runs.contains(package) {
                problems.push(format!("the runtime stage does not install {package}"));
            }
        }
        for tool in [
            "cargo",
            "rustc",
            "rustup",
            "gcc",
            "g++",
            "clang",
            "make",
            "build-essential",
            "protobuf-compiler",
            "pkg-config",
            "-dev",
        ] {
            let present = runtime_runs
                .split_whitespace()
                .any(|w| w == tool || (tool == "-dev" && w.ends_with("-dev")));
            if present {
                problems.push(format!("the runtime stage installs build tool {tool}"));
            }
        }
        if !runtime_runs.contains("rm -rf /var/lib/apt/lists") {
            problems.push("the runtime stage keeps apt lists".into());
        }
        let copies = runtime.all("COPY");
        if !copies
            .iter()
            .any(|c| c.contains("--from=") && c.trim_end().ends_with(IMAGE_BINARY))
        {
            problems.push(format!(
                "the runtime stage does not copy the built binary to {IMAGE_BINARY}"
            ));
        }
        if copies.iter().any(|c| !c.contains("--from=")) {
            problems.push(
                "the runtime stage copies from the build context, not only the builder".into(),
            );
        }
        if !runtime_runs.contains("mount.msfs") {
            problems.push("the runtime stage has no mount.msfs (the mount(8) helper name)".into());
        }
        let labels = runtime.all("LABEL").join(" ");
        for label in [
            "org.opencontainers.image.version",
            "org.opencontainers.image.source",
        ] {
            if !labels.contains(label) {
                problems.push(format!("the runtime stage has no {label} label"));
            }
        }
        let entrypoint = runtime.all("ENTRYPOINT").join(" ");
        let cmd = runtime.all("CMD").join(" ");
        if !(entrypoint.contains(IMAGE_BINARY) && cmd.starts_with("[\"csi\"")) {
            problems.push(format!(
                "the image does not run `{IMAGE_BINARY} csi` by default (ENTRYPOINT {entrypoint}, \
                 CMD {cmd})"
            ));
        }
        problems
    }
}

impl Stage {
    /// The arguments of every `op` instruction of the stage, in order.
    fn all(&self, op: &str) -> Vec<&str> {
        self.instructions
            .iter()
            .filter(|(o, _)| o == op)
            .map(|(_, rest)| rest.as_str())
            .collect()
    }
}
