//! `berth backup` and `berth restore`, driven through the built binary: a backup taken while
//! volumes are being made holds every one acknowledged before it began; its restore starts beside
//! the original as a copy that owns none of the original's things; a second restore into the same
//! directory, a damaged archive and a copy that would share the original's files are refused,
//! leaving nothing behind.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Stack, berth_with, stderr, stdout};

fn berth_plain(args: &[&str]) -> std::process::Output {
    berth_with("http://127.0.0.1:9", None, args)
}

fn ok(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        stdout(out),
        stderr(out)
    );
    stdout(out)
}

/// The names of the volumes the stack at `url` lists in namespace `load`.
fn volume_names(url: &str, token: &str) -> BTreeSet<String> {
    let out = berth_with(
        url,
        Some(token),
        &["volume", "list", "-n", "load", "-o", "name"],
    );
    ok(&out, "volume list")
        .lines()
        .filter_map(|l| l.strip_prefix("volume/").map(str::to_string))
        .collect()
}

fn storage_instance(data: &Path) -> String {
    let db = rusqlite::Connection::open_with_flags(
        data.join("storage.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    db.query_row("SELECT value FROM meta WHERE key = 'instance'", [], |r| {
        r.get(0)
    })
    .unwrap()
}

fn files_under(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

#[test]
fn a_backup_under_load_restores_as_a_copy_beside_the_original() {
    // A second root for local orchestrators, outside the data directory (see the end).
    let outside = tempfile::tempdir().unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    let roots = format!(
        "{},{}",
        data_dir.path().join("volumes").display(),
        outside.path().display()
    );
    let original = Stack::start_with(data_dir, |cmd| {
        cmd.env("BERTH_LOCAL_ROOTS", &roots);
    });
    let data = original.data.path().to_path_buf();
    let keep = data.join("volumes").join("keep");
    ok(
        &original.berth(&[
            "orchestrator",
            "register",
            "keep",
            "--kind",
            "local",
            "--config",
            &format!("basePath={}", keep.display()),
        ]),
        "register",
    );
    // A machine deployment on the embedded emulator, running before the backup.
    let files = tempfile::tempdir().unwrap();
    let md = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/machine-deployment.yaml"),
    )
    .unwrap()
    .replace("EMULATOR_ACCESS_KEY_ID", &original.emulator_key.0)
    .replace("EMULATOR_ACCESS_KEY_SECRET", &original.emulator_key.1)
    .replace("replicas: 3", "replicas: 2");
    let md_file = files.path().join("md.yaml");
    std::fs::write(&md_file, md).unwrap();
    ok(
        &original.berth(&["apply", "-f", md_file.to_str().unwrap()]),
        "apply",
    );
    ok(
        &original.berth(&["rollout", "status", "md/workers", "--timeout", "60s"]),
        "rollout",
    );

    // Load: two writers make volumes until told to stop, each noting when its add was acknowledged.
    let acknowledged: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (url, token) = (original.url.clone(), original.admin_token.clone());
            let (acknowledged, stop) = (acknowledged.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    let name = format!("v{w}-{i}");
                    let out = berth_with(
                        &url,
                        Some(&token),
                        &[
                            "volume",
                            "create",
                            &name,
                            "-n",
                            "load",
                            "--capacity",
                            "1Mi",
                            "--orchestrator",
                            "keep",
                        ],
                    );
                    if out.status.success() {
                        acknowledged.lock().unwrap().push((name, Instant::now()));
                    }
                    i += 1;
                }
            })
        })
        .collect();
    common::eventually(Duration::from_secs(30), || {
        (acknowledged.lock().unwrap().len() >= 10).then_some(())
    });
    let archive = files.path().join("berth.tar");
    let began = Instant::now();
    let out = berth_plain(&[
        "backup",
        "--data-dir",
        data.to_str().unwrap(),
        "--to",
        archive.to_str().unwrap(),
    ]);
    let backed_up = ok(&out, "backup");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.join().unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    let before: BTreeSet<String> = acknowledged
        .iter()
        .filter(|(_, at)| *at < began)
        .map(|(n, _)| n.clone())
        .collect();
    let all: BTreeSet<String> = acknowledged.iter().map(|(n, _)| n.clone()).collect();
    eprintln!(
        "{} volumes acknowledged, {} before the backup began",
        all.len(),
        before.len()
    );
    assert!(
        all.len() > before.len(),
        "the load went on during the backup"
    );
    assert!(
        backed_up.contains("storage.db") && backed_up.contains("controller.key"),
        "{backed_up}"
    );
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&archive).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // A backup never lands on the stack's own files, a link or a device.
    let tokens_before = std::fs::read(data.join("tokens")).unwrap();
    let link = files.path().join("link.tar");
    std::os::unix::fs::symlink(files.path().join("real.tar"), &link).unwrap();
    for to in [
        data.join("tokens"),
        link.clone(),
        std::path::PathBuf::from("/dev/null"),
        // A directory that is not there is the caller's to make: refused (1), not "retry" (3).
        files.path().join("no-such-dir/x.tar"),
    ] {
        let out = berth_plain(&[
            "backup",
            "--data-dir",
            data.to_str().unwrap(),
            "--to",
            to.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(1), "{to:?}: {}", stderr(&out));
    }
    assert_eq!(std::fs::read(data.join("tokens")).unwrap(), tokens_before);
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        !std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_file()
    );

    // Restore as a copy, and start it beside the running original.
    let copy_dir = tempfile::tempdir().unwrap();
    // An empty directory is a restore's target as a new one is.
    let copy_root = tempfile::TempDir::with_prefix_in("copy-", copy_dir.path()).unwrap();
    let copy_data = copy_root.path().to_path_buf();
    let out = berth_plain(&[
        "restore",
        "--from",
        archive.to_str().unwrap(),
        "--data-dir",
        copy_data.to_str().unwrap(),
    ]);
    let restored = ok(&out, "restore");
    assert!(restored.contains("new docker instance"), "{restored}");
    assert_eq!(
        std::fs::metadata(copy_data.join("controller.key"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    // Again into the same directory: refused, and the first restore is untouched.
    let before_again = std::fs::read(copy_data.join("storage.db")).unwrap();
    let out = berth_plain(&[
        "restore",
        "--from",
        archive.to_str().unwrap(),
        "--data-dir",
        copy_data.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("is not empty"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(copy_data.join("storage.db")).unwrap(),
        before_again
    );

    let copy = Stack::start_in(copy_root);
    let copy_path = copy.data.path().to_path_buf();
    // The copy has the original's tokens.
    let in_copy_do = |args: &[&str]| berth_with(&copy.url, Some(&original.admin_token), args);

    let in_copy = volume_names(&copy.url, &original.admin_token);
    let missing: Vec<_> = before.difference(&in_copy).collect();
    assert!(
        missing.is_empty(),
        "acknowledged before the backup began, missing from its restore: {missing:?}"
    );
    eprintln!("{} volumes in the restore", in_copy.len());
    let unknown: Vec<_> = in_copy.difference(&all).collect();
    assert!(
        unknown.is_empty(),
        "in the restore but never made: {unknown:?}"
    );
    // The controller's objects came back too, and the copy's machines run on its own emulator.
    let out = in_copy_do(&["get", "machinedeployment", "workers", "-o", "json"]);
    assert!(ok(&out, "get md").contains("\"workers\""));
    ok(
        &in_copy_do(&["rollout", "status", "md/workers", "--timeout", "60s"]),
        "copy rollout",
    );

    // The copy is its own: other instances, its local paths under its own directory.
    assert_ne!(storage_instance(&data), storage_instance(&copy_path));
    assert_ne!(
        std::fs::read_to_string(data.join("docker-instance")).unwrap(),
        std::fs::read_to_string(copy_path.join("docker-instance")).unwrap()
    );
    let out = in_copy_do(&["orchestrator", "get", "keep", "-o", "json"]);
    let keep_in_copy = ok(&out, "orchestrator get");
    assert!(
        keep_in_copy.contains(&copy_path.join("volumes").join("keep").display().to_string()),
        "{keep_in_copy}"
    );
    // Deleting in the copy leaves the original's volume and its files alone.
    let one = before.iter().next().unwrap().clone();
    let original_files = files_under(&keep.join("load"));
    ok(
        &in_copy_do(&["volume", "delete", &one, "-n", "load"]),
        "copy delete",
    );
    assert_eq!(files_under(&keep.join("load")), original_files);
    assert!(volume_names(&original.url, &original.admin_token).contains(&one));
    assert!(!volume_names(&copy.url, &original.admin_token).contains(&one));

    // A damaged archive is refused, and nothing is left where it was to go.
    // One byte inside a database's first page (a byte of a tar header or padding would be caught
    // by tar, not by the manifest).
    let mut bytes = std::fs::read(&archive).unwrap();
    let sqlite = b"SQLite format 3\0";
    let database = bytes
        .windows(sqlite.len())
        .position(|w| w == sqlite)
        .expect("a database in the archive");
    bytes[database + 200] ^= 0xff;
    let damaged = files.path().join("damaged.tar");
    std::fs::write(&damaged, bytes).unwrap();
    let nowhere = copy_dir.path().join("from-damaged");
    let out = berth_plain(&[
        "restore",
        "--from",
        damaged.to_str().unwrap(),
        "--data-dir",
        nowhere.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not a usable Berth backup"),
        "{}",
        stderr(&out)
    );
    assert!(!nowhere.exists());
    let leftovers: Vec<_> = std::fs::read_dir(copy_dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".berth-restore-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A local orchestrator outside the data directory: a copy would share its files, so only a
    // restore that replaces the original is allowed.
    let shared = outside.path().join("shared");
    ok(
        &original.berth(&[
            "orchestrator",
            "register",
            "shared",
            "--kind",
            "local",
            "--config",
            &format!("basePath={}", shared.display()),
        ]),
        "register outside",
    );
    let second = files.path().join("second.tar");
    ok(
        &berth_plain(&[
            "backup",
            "--data-dir",
            data.to_str().unwrap(),
            "--to",
            second.to_str().unwrap(),
        ]),
        "second backup",
    );
    let target = copy_dir.path().join("second");
    let out = berth_plain(&[
        "restore",
        "--from",
        second.to_str().unwrap(),
        "--data-dir",
        target.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("shared ("), "{}", stderr(&out));
    assert!(stderr(&out).contains("--same-instance"), "{}", stderr(&out));
    assert!(!target.exists());
    let out = berth_plain(&[
        "restore",
        "--from",
        second.to_str().unwrap(),
        "--data-dir",
        target.to_str().unwrap(),
        "--same-instance",
    ]);
    assert!(ok(&out, "same-instance restore").contains("same instance"));
    assert_eq!(storage_instance(&data), storage_instance(&target));
    copy.stop();
    original.stop();
}

#[test]
fn a_directory_without_berth_state_is_not_backed_up() {
    let empty = tempfile::tempdir().unwrap();
    let out = berth_plain(&[
        "backup",
        "--data-dir",
        empty.path().to_str().unwrap(),
        "--to",
        empty.path().join("b.tar").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("holds no Berth state"),
        "{}",
        stderr(&out)
    );
    assert!(!empty.path().join("b.tar").exists());
    let out = berth_plain(&[
        "restore",
        "--from",
        empty.path().join("none.tar").to_str().unwrap(),
        "--data-dir",
        empty.path().join("d").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("cannot be read"), "{}", stderr(&out));
}
