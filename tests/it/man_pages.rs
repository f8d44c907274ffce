//! The man pages in `docs/man/` are rendered from the command-line definitions (`msfs::cli`):
//! msfs(1), one msfs-SUBCOMMAND(1) per subcommand (and msfs-SUBCOMMAND-SUB(1) per nested one),
//! and mount.msfs(8). This test renders them
//! again and fails when a committed page differs from what the code says, or when a page is
//! committed that the code no longer has. `MSFS_UPDATE_MAN=1` writes them instead.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::CommandFactory;

fn man_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/man")
}

fn render(command: clap::Command, section: &str) -> Vec<u8> {
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .section(section)
        .render(&mut page)
        .expect("render a man page");
    page
}

/// Every page, by file name.
fn pages() -> BTreeMap<String, Vec<u8>> {
    let mut msfs = msfs::cli::Cli::command();
    // Global options (`--log-format`) reach the subcommands only once built.
    msfs.build();
    let mut pages = BTreeMap::new();
    for sub in msfs.get_subcommands().filter(|s| s.get_name() != "help") {
        // clap names commands by `&'static str` (without its `string` feature); a test's few
        // names may live as long as the process.
        let name: &'static str = Box::leak(format!("msfs-{}", sub.get_name()).into_boxed_str());
        pages.insert(format!("{name}.1"), render(sub.clone().name(name), "1"));
        // A subcommand's own subcommands (`msfs shared-cache trim`) get a page each too, the
        // one its parent's page names.
        for subsub in sub.get_subcommands().filter(|s| s.get_name() != "help") {
            let name: &'static str =
                Box::leak(format!("{name}-{}", subsub.get_name()).into_boxed_str());
            pages.insert(format!("{name}.1"), render(subsub.clone().name(name), "1"));
        }
    }
    pages.insert("msfs.1".into(), render(msfs, "1"));
    pages.insert(
        "mount.msfs.8".into(),
        render(msfs::cli::MountHelper::command(), "8"),
    );
    pages
}

#[test]
fn committed_man_pages_match_the_command_line() {
    let dir = man_dir();
    let pages = pages();
    if std::env::var_os("MSFS_UPDATE_MAN").is_some() {
        std::fs::create_dir_all(&dir).expect("create docs/man");
        for entry in std::fs::read_dir(&dir).expect("read docs/man").flatten() {
            std::fs::remove_file(entry.path()).expect("remove an old page");
        }
        for (name, page) in &pages {
            std::fs::write(dir.join(name), page).expect("write a page");
        }
        return;
    }
    let committed: BTreeMap<String, Vec<u8>> = std::fs::read_dir(&dir)
        .expect(
            "docs/man exists (MSFS_UPDATE_MAN=1 cargo nextest run --test it man_pages:: writes it)",
        )
        .flatten()
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(entry.path()).expect("read a page"))
        })
        .collect();
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&committed),
        names(&pages),
        "docs/man holds other pages than the command line has; run \
         MSFS_UPDATE_MAN=1 cargo nextest run --test it man_pages::"
    );
    for (name, page) in &pages {
        assert!(
            committed[name] == *page,
            "docs/man/{name} differs from the command line's definitions; run \
             MSFS_UPDATE_MAN=1 cargo nextest run --test it man_pages::"
        );
    }
}

/// What a user gets from `man -l docs/man/PAGE` in a checkout.
fn man_text(page: &str) -> String {
    let output = Command::new("man")
        .arg("-l")
        .arg(man_dir().join(page))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .expect("run man (man-db)");
    assert!(output.status.success(), "man -l {page}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn man_l_shows_each_page_from_a_checkout() {
    let msfs = man_text("msfs.1");
    assert!(
        msfs.contains("msfs-mount(1)") || msfs.contains("mount"),
        "{msfs}"
    );
    let mount = man_text("msfs-mount.1");
    for option in ["--takeover", "--read-only", "--no-fd-holder", "SIGHUP"] {
        assert!(
            mount.contains(option),
            "msfs-mount(1) names {option}:\n{mount}"
        );
    }
    let helper = man_text("mount.msfs.8");
    for words in ["mount.msfs", "MSFS_LOG_DIR", "noexec", "nofail"] {
        assert!(
            helper.contains(words),
            "mount.msfs(8) names {words}:\n{helper}"
        );
    }
}
