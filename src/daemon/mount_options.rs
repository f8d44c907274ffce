//! The `-o` options of `mount.msfs` (fstab's fourth field, `mount -o`): each one takes effect,
//! belongs to mount(8), fstab or systemd and is left to them, or is refused by name. msfs takes
//! its settings from the configuration file, so an option another filesystem would honour
//! (`uid=`, `allow_other`, `umask=`) must not be swallowed: the mount would look right and
//! behave otherwise.

/// What the options ask of the mount.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MountFlags {
    /// `ro`: every backend read-only, the kernel mount too.
    pub read_only: bool,
    /// `noexec`: the kernel refuses to execute programs from the mount.
    pub no_exec: bool,
}

/// Options for mount(8), fstab and systemd, which read them before the helper runs.
const LEFT_TO_MOUNT: &[&str] = &[
    "defaults", "auto", "noauto", "nofail", "_netdev", "user", "users", "nouser", "owner", "group",
];
/// Prefixes of options mount(8) and systemd add or read themselves: `x-systemd.*`, a user
/// mount's `user=NAME`, `uhelper=`/`helper=` (who unmounts, which helper), `comment=`.
const LEFT_TO_MOUNT_PREFIXES: &[&str] = &["x-", "comment=", "user=", "uhelper=", "helper="];
/// Options msfs always mounts with.
const ALWAYS_IN_EFFECT: &[&str] = &["nosuid", "nodev", "noatime", "default_permissions"];

/// Reads `options` (each one option, as split at commas). Later options win over earlier ones,
/// as with mount(8). `Err` names the first unsupported option and what to do instead; with
/// `sloppy` (mount's `-s`), unsupported ones are returned as the second value instead.
pub fn parse(options: &[String], sloppy: bool) -> Result<(MountFlags, Vec<String>), String> {
    let mut flags = MountFlags::default();
    let mut ignored = Vec::new();
    for option in options {
        let option = option.as_str();
        match option {
            "ro" => flags.read_only = true,
            "rw" => flags.read_only = false,
            "noexec" => flags.no_exec = true,
            "exec" => flags.no_exec = false,
            _ if LEFT_TO_MOUNT.contains(&option)
                || ALWAYS_IN_EFFECT.contains(&option)
                || LEFT_TO_MOUNT_PREFIXES
                    .iter()
                    .any(|prefix| option.starts_with(prefix)) => {}
            _ if sloppy => ignored.push(option.to_string()),
            _ => return Err(refusal(option)),
        }
    }
    Ok((flags, ignored))
}

/// Why `option` is refused, with the configuration key that does its job where there is one.
pub fn refusal(option: &str) -> String {
    let name = option.split_once('=').map_or(option, |(name, _)| name);
    let instead = match name {
        "allow_other" | "allow_root" => "set `allow_other: true` in the configuration file",
        "uid" | "gid" => "set `uid` / `gid` in the configuration file (top level or per backend)",
        "umask" | "dmask" | "fmask" | "file_mode" | "dir_mode" | "mode" => {
            "set `dir_perm` / `file_perm` in the configuration file"
        }
        "suid" | "dev" => "msfs mounts are always nosuid,nodev",
        "sync" | "dirsync" => {
            "set `flush_on_close: true` on the backend to make close wait for the upload"
        }
        "endpoint" | "region" | "bucket" | "prefix" | "profile" => {
            "set it on the backend in the configuration file"
        }
        _ => "msfs takes its settings from the configuration file (see docs/configuration.md)",
    };
    format!("unsupported option {option:?}: {instead}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(list: &str) -> Vec<String> {
        list.split(',').map(str::to_string).collect()
    }

    #[test]
    fn ro_and_noexec_take_effect_and_the_last_word_wins() {
        let (flags, _) = parse(&options("ro,noexec"), false).expect("valid");
        assert_eq!(
            flags,
            MountFlags {
                read_only: true,
                no_exec: true
            }
        );
        let (flags, _) = parse(&options("ro,rw,noexec,exec"), false).expect("valid");
        assert_eq!(flags, MountFlags::default());
    }

    #[test]
    fn fstab_and_systemd_options_are_left_to_them() {
        let list = "defaults,_netdev,nofail,noauto,auto,user,users,nouser,owner,group,\
                    x-systemd.automount,x-systemd.idle-timeout=60,comment=x,nosuid,nodev,noatime,\
                    user=alice,uhelper=udisks2,helper=msfs";
        let (flags, ignored) = parse(&options(list), false).expect("valid");
        assert_eq!(flags, MountFlags::default());
        assert!(ignored.is_empty());
    }

    #[test]
    fn another_filesystems_options_are_refused_naming_the_key_to_use() {
        for (option, hint) in [
            ("uid=1000", "`uid`"),
            ("allow_other", "`allow_other: true`"),
            ("umask=022", "`dir_perm`"),
            ("sync", "`flush_on_close: true`"),
            ("suid", "nosuid,nodev"),
            ("bogus", "configuration file"),
        ] {
            let error = parse(&options(&format!("rw,{option}")), false).expect_err(option);
            assert!(error.contains(&format!("{option:?}")), "{error}");
            assert!(error.contains(hint), "{option}: {error}");
        }
    }

    #[test]
    fn sloppy_returns_what_it_ignores() {
        let (flags, ignored) = parse(&options("ro,uid=1000,bogus"), true).expect("sloppy");
        assert!(flags.read_only);
        assert_eq!(ignored, ["uid=1000", "bogus"]);
    }
}
