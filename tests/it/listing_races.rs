//! Listings racing this mount's own changes: a directory listed (`ls -l`, `find`, `du`) while
//! files in it are renamed, removed and appended to must never bring back a removed name or an
//! older size — a listing may predate the change, what the mount learnt since wins. (Found by
//! the soak: a renamed-away name answered `stat` for seconds, and a file just appended to read
//! back short at its old size.)

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::{Garage, MsfsMount, config_yaml_with, s3_backend_yaml};

#[test]
fn listings_during_renames_and_appends_never_show_an_older_state() {
    let garage = Garage::start();
    garage.create_bucket("race");
    let backend = format!(
        "{}    readonly: false\n",
        s3_backend_yaml("data", "race", "", &garage)
    );
    let mount = MsfsMount::start(&config_yaml_with("", &[backend]), "yaml").expect("mount");
    let dir = mount.path().join("data/d");
    std::fs::create_dir(&dir).expect("mkdir");

    // Another process lists the directory and stats every entry, over and over (readdirplus).
    let stop = Arc::new(AtomicBool::new(false));
    let lister = {
        let (dir, stop) = (dir.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut listings = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(entries) = std::fs::read_dir(&dir) {
                    for entry in entries.flatten() {
                        let _ = entry.metadata();
                    }
                    listings += 1;
                }
            }
            listings
        })
    };

    let mut wrong = Vec::new();
    let grow = dir.join("grow");
    std::fs::write(&grow, b"").expect("create grow");
    let mut expected_len = 0u64;
    for i in 0..60usize {
        let old = dir.join(format!("a{i}"));
        let new = dir.join(format!("b{i}"));
        std::fs::write(&old, vec![7u8; 1000 + i]).expect("write");
        std::fs::rename(&old, &new).expect("rename");
        if let Ok(meta) = std::fs::metadata(&old) {
            wrong.push(format!(
                "a{i} still there after its rename (size {})",
                meta.len()
            ));
        }
        match std::fs::metadata(&new) {
            Ok(meta) if meta.len() == 1000 + i as u64 => {}
            other => wrong.push(format!("b{i} after the rename: {other:?}")),
        }

        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&grow)
            .expect("open grow");
        file.write_all(&[1u8; 3000]).expect("append");
        drop(file);
        expected_len += 3000;
        let len = std::fs::metadata(&grow).expect("stat grow").len();
        let read = std::fs::read(&grow).expect("read grow").len() as u64;
        if len != expected_len || read != expected_len {
            wrong.push(format!(
                "grow after append {i}: size {len}, read {read} bytes, expected {expected_len}"
            ));
        }

        std::fs::remove_file(&new).expect("unlink");
        if std::fs::metadata(&new).is_ok() {
            wrong.push(format!("b{i} still there after its unlink"));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let listings = lister.join().expect("lister thread");
    assert!(listings > 0, "the lister never listed");
    assert!(
        wrong.is_empty(),
        "{} stale views:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
