//! Round trips through a real holder (`serve` on a thread) on a socket in a temporary directory.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::*;

struct Holder {
    _dir: tempfile::TempDir,
    socket: PathBuf,
}

/// A holder serving a socket whose directory does not exist yet.
fn start() -> Holder {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run").join("holder.sock");
    start_at(&socket);
    Holder { _dir: dir, socket }
}

fn start_at(socket: &Path) {
    let path = socket.to_path_buf();
    std::thread::spawn(move || serve(&path, ServeOptions::default()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while HolderClient::connect(socket).is_err() {
        assert!(Instant::now() < deadline, "holder did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn client(holder: &Holder) -> HolderClient {
    HolderClient::connect(&holder.socket).unwrap()
}

fn read_through(fd: std::os::fd::OwnedFd, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    std::fs::File::from(fd).read_exact(&mut buf).unwrap();
    buf
}

#[test]
fn kept_fd_comes_back_from_list_as_a_working_duplicate() {
    let holder = start();
    let (reader, mut writer) = std::io::pipe().unwrap();
    client(&holder)
        .keep("vol", br#"{"k":"v"}"#, reader.as_fd())
        .unwrap();
    drop(reader);
    let held = client(&holder).list().unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(
        (held[0].name.as_str(), held[0].meta.as_slice()),
        ("vol", &br#"{"k":"v"}"#[..])
    );
    writer.write_all(b"ping").unwrap();
    let entry = held.into_iter().next().unwrap();
    assert_eq!(read_through(entry.fd, 4), b"ping");
    // The holder kept its own: a second list still has it.
    assert_eq!(client(&holder).list().unwrap().len(), 1);
}

#[test]
fn update_replaces_the_meta_and_refuses_an_unknown_name() {
    let holder = start();
    let mut c = client(&holder);
    let (reader, _writer) = std::io::pipe().unwrap();
    c.keep("vol", b"old", reader.as_fd()).unwrap();
    c.update("vol", b"new").unwrap();
    assert_eq!(c.list().unwrap()[0].meta, b"new");
    assert!(matches!(
        c.update("other", b"x"),
        Err(HolderError::Refused(_))
    ));
    // A refusal leaves the connection usable.
    assert_eq!(c.list().unwrap().len(), 1);
}

#[test]
fn keep_with_the_same_name_replaces_and_closes_the_old_fd() {
    let holder = start();
    let mut c = client(&holder);
    let (old_reader, mut old_writer) = std::io::pipe().unwrap();
    let (new_reader, mut new_writer) = std::io::pipe().unwrap();
    c.keep("vol", b"1", old_reader.as_fd()).unwrap();
    c.keep("vol", b"2", new_reader.as_fd()).unwrap();
    drop((old_reader, new_reader));
    let held = c.list().unwrap();
    assert_eq!(held.len(), 1);
    new_writer.write_all(b"n").unwrap();
    assert_eq!(read_through(held.into_iter().next().unwrap().fd, 1), b"n");
    // No reader of the old pipe is left anywhere.
    assert_eq!(
        old_writer.write(b"o").unwrap_err().kind(),
        ErrorKind::BrokenPipe
    );
}

#[test]
fn release_closes_and_forgets_and_tolerates_unknown_names() {
    let holder = start();
    let mut c = client(&holder);
    let (reader, mut writer) = std::io::pipe().unwrap();
    c.keep("vol", b"{}", reader.as_fd()).unwrap();
    drop(reader);
    c.release("vol").unwrap();
    c.release("never-held").unwrap();
    assert!(c.list().unwrap().is_empty());
    assert_eq!(
        writer.write(b"x").unwrap_err().kind(),
        ErrorKind::BrokenPipe
    );
}

#[test]
fn fd_whose_peer_hung_up_is_pruned() {
    let holder = start();
    let mut c = client(&holder);
    let (reader, writer) = std::io::pipe().unwrap();
    c.keep("vol", b"{}", reader.as_fd()).unwrap();
    drop((reader, writer));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c.list().unwrap().is_empty() {
        assert!(
            Instant::now() < deadline,
            "hung-up fd still held after 10 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn non_utf8_meta_is_refused_before_sending() {
    let holder = start();
    let (reader, _writer) = std::io::pipe().unwrap();
    let result = client(&holder).keep("vol", &[0xff, 0xfe], reader.as_fd());
    assert!(matches!(result, Err(HolderError::MetaNotUtf8 { .. })));
}

#[test]
fn second_holder_on_a_live_socket_is_already_running() {
    let holder = start();
    let result = serve(&holder.socket, ServeOptions::default());
    assert!(matches!(result, Err(HolderError::AlreadyRunning(_))));
}

#[test]
fn stale_socket_file_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("holder.sock");
    drop(UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    start_at(&socket);
    HolderClient::connect(&socket).unwrap().list().unwrap();
}

#[test]
fn socket_is_private_to_its_user() {
    let holder = start();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&holder.socket), 0o600);
    assert_eq!(mode(holder.socket.parent().unwrap()), 0o700);
}

#[test]
fn peer_credentials_of_our_own_process_pass() {
    let (a, _b) = UnixStream::pair().unwrap();
    server::check_peer(&a).unwrap();
}
