//! Finding the config file: an explicit path, `$MSC_CONFIG`, then the same search
//! path as the Python Multi-Storage Client, so one file serves both.

use std::path::{Path, PathBuf};

use super::error::ConfigError;
use super::expand::Env;

const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Returns the config file to use.
///
/// An explicit path (the command-line argument) or `$MSC_CONFIG` must exist: the
/// user named that file, and silently using another one would be worse than failing.
/// Otherwise the first existing file among `$XDG_CONFIG_HOME/msc/config.*`,
/// `$HOME/.msc_config.*`, `$HOME/.config/msc/config.*`, each `$XDG_CONFIG_DIRS`
/// entry (default `/etc/xdg`) `+ /msc/config.*` and `/etc/msc_config.*` wins, trying
/// `.yaml`, `.yml`, `.json` in that order.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf, ConfigError> {
    locate_with(
        explicit,
        &|name| std::env::var(name).ok(),
        Path::new("/etc"),
    )
}

/// [`locate`] with the environment and the system config directory injected.
fn locate_with(explicit: Option<&Path>, env: &Env, etc: &Path) -> Result<PathBuf, ConfigError> {
    let named = explicit.map(Path::to_path_buf).or_else(|| {
        env("MSC_CONFIG")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
    });
    if let Some(path) = named {
        return if exists(&path) {
            Ok(path)
        } else {
            Err(ConfigError::NotFound {
                searched: vec![path],
            })
        };
    }
    let searched = candidates(env, etc);
    match searched.iter().find(|p| exists(p)) {
        Some(found) => Ok(found.clone()),
        None => Err(ConfigError::NotFound { searched }),
    }
}

/// A path we cannot even stat (permissions) counts as found, so loading it reports
/// the real problem instead of "not found".
fn exists(path: &Path) -> bool {
    path.try_exists().unwrap_or(true)
}

fn candidates(env: &Env, etc: &Path) -> Vec<PathBuf> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let with_exts =
        |dir: &Path, stem: &str| EXTENSIONS.map(|ext| dir.join(format!("{stem}.{ext}")));
    let mut out = Vec::new();
    if let Some(xdg) = var("XDG_CONFIG_HOME") {
        out.extend(with_exts(&Path::new(&xdg).join("msc"), "config"));
    }
    if let Some(home) = var("HOME") {
        let home = Path::new(&home);
        out.extend(with_exts(home, ".msc_config"));
        out.extend(with_exts(&home.join(".config").join("msc"), "config"));
    }
    let dirs =
        var("XDG_CONFIG_DIRS").unwrap_or_else(|| etc.join("xdg").to_string_lossy().into_owned());
    for dir in dirs.split(':').filter(|d| !d.is_empty()) {
        out.extend(with_exts(&Path::new(dir).join("msc"), "config"));
    }
    out.extend(with_exts(etc, "msc_config"));
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::fs;

    use super::*;

    struct Fixture {
        dir: tempfile::TempDir,
        vars: HashMap<&'static str, String>,
    }

    impl Fixture {
        fn new() -> Self {
            let dir = tempfile::tempdir().expect("tempdir");
            let root = dir.path().to_string_lossy().into_owned();
            let vars = HashMap::from([
                ("HOME", format!("{root}/home")),
                ("XDG_CONFIG_HOME", format!("{root}/xdg-home")),
                ("XDG_CONFIG_DIRS", format!("{root}/xdg-a:{root}/xdg-b")),
            ]);
            Fixture { dir, vars }
        }

        fn etc(&self) -> PathBuf {
            self.dir.path().join("etc")
        }

        fn touch(&self, rel: &str) -> PathBuf {
            let path = self.dir.path().join(rel);
            fs::create_dir_all(path.parent().expect("has parent")).expect("mkdir");
            fs::write(&path, "msfs_version: 1\n").expect("write");
            path
        }

        fn locate(&self, explicit: Option<&Path>) -> Result<PathBuf, ConfigError> {
            let env = |name: &str| self.vars.get(name).cloned();
            locate_with(explicit, &env, &self.etc())
        }
    }

    #[test]
    fn explicit_path_wins_over_everything() {
        let f = Fixture::new();
        let mine = f.touch("mine.json");
        f.touch("xdg-home/msc/config.yaml");
        assert_eq!(f.locate(Some(&mine)).expect("found"), mine);
    }

    #[test]
    fn missing_explicit_path_is_an_error_naming_it() {
        let f = Fixture::new();
        f.touch("xdg-home/msc/config.yaml");
        let missing = f.dir.path().join("nope.yaml");
        let err = f.locate(Some(&missing)).expect_err("must not fall through");
        assert!(
            matches!(&err, ConfigError::NotFound { searched } if searched == &vec![missing.clone()])
        );
        assert!(err.to_string().contains("nope.yaml"), "{err}");
    }

    #[test]
    fn msc_config_variable_comes_before_the_search_path() {
        let mut f = Fixture::new();
        let via_env = f.touch("elsewhere/c.yml");
        f.touch("xdg-home/msc/config.yaml");
        f.vars
            .insert("MSC_CONFIG", via_env.to_string_lossy().into_owned());
        assert_eq!(f.locate(None).expect("found"), via_env);
    }

    #[test]
    fn missing_msc_config_file_is_an_error_not_a_fallthrough() {
        let mut f = Fixture::new();
        f.touch("home/.msc_config.yaml");
        let missing = f.dir.path().join("gone.yaml");
        f.vars
            .insert("MSC_CONFIG", missing.to_string_lossy().into_owned());
        let err = f.locate(None).expect_err("must fail");
        assert!(matches!(err, ConfigError::NotFound { searched } if searched == vec![missing]));
    }

    #[test]
    fn search_path_order_is_xdg_home_then_home_then_xdg_dirs_then_etc() {
        let f = Fixture::new();
        let order = [
            "xdg-home/msc/config.yaml",
            "xdg-home/msc/config.json",
            "home/.msc_config.yml",
            "home/.config/msc/config.yaml",
            "xdg-a/msc/config.json",
            "xdg-b/msc/config.yaml",
            "etc/msc_config.json",
        ];
        let paths: Vec<PathBuf> = order.iter().map(|rel| f.touch(rel)).collect();
        // Remove from the front: each time the next one in line must be chosen.
        for (i, expected) in paths.iter().enumerate() {
            assert_eq!(&f.locate(None).expect("found"), expected, "step {i}");
            fs::remove_file(expected).expect("remove");
        }
        assert!(matches!(f.locate(None), Err(ConfigError::NotFound { .. })));
    }

    #[test]
    fn yaml_is_preferred_to_yml_and_json_in_the_same_directory() {
        let f = Fixture::new();
        f.touch("home/.msc_config.json");
        f.touch("home/.msc_config.yml");
        let yaml = f.touch("home/.msc_config.yaml");
        assert_eq!(f.locate(None).expect("found"), yaml);
    }

    #[test]
    fn xdg_config_dirs_defaults_to_etc_xdg() {
        let mut f = Fixture::new();
        f.vars.remove("XDG_CONFIG_DIRS");
        let path = f.touch("etc/xdg/msc/config.yml");
        assert_eq!(f.locate(None).expect("found"), path);
    }

    #[test]
    fn not_found_lists_every_path_tried() {
        let mut f = Fixture::new();
        f.vars.remove("XDG_CONFIG_HOME");
        let err = f.locate(None).expect_err("nothing exists");
        let ConfigError::NotFound { searched } = &err else {
            panic!("unexpected {err:?}");
        };
        // home (2 × 3) + two XDG dirs (2 × 3) + /etc (3)
        assert_eq!(searched.len(), 15);
        assert!(searched.iter().all(|p| p.starts_with(f.dir.path())));
        assert!(err.to_string().contains(".msc_config.yaml"), "{err}");
    }
}
