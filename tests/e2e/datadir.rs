//! The data dir: no one else may write to it, nothing in it is followed
//! through a symlink, everything in it is private.

use std::os::unix::fs::PermissionsExt;

use super::support::*;

fn run_env(dir: &std::path::Path) -> Vec<(&'static str, String)> {
    vec![
        ("MANNERLY_DATA_DIR", dir.display().to_string()),
        ("MANNERLY_PROXY__LISTEN", "127.0.0.1:0".into()),
        ("MANNERLY_UPSTREAM__ALLOW_PRIVATE", "true".into()),
        // Not the default 9128: tests run side by side.
        ("MANNERLY_ADMIN__LISTEN", "127.0.0.1:0".into()),
    ]
}

fn run_once(args: &[&str], dir: &std::path::Path) -> (i32, String) {
    let env = run_env(dir);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    mannerly(args, &env)
}

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_data_dir_others_can_write_is_refused_naming_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, out) = run_once(&["run"], &dir);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("writable by group or others"), "{out}");
    assert!(
        out.contains(&format!("chmod 700 {}", dir.display())),
        "{out}"
    );
    assert!(
        std::fs::read_dir(&dir).unwrap().next().is_none(),
        "nothing written"
    );
}

#[test]
fn a_planted_ca_symlink_is_replaced_not_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = tmp.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("ca.pem")).unwrap();
    let (code, out) = run_once(&["ca", "init"], &dir);
    assert_eq!(code, 0, "{out}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let meta = std::fs::symlink_metadata(dir.join("ca.pem")).unwrap();
    assert!(meta.is_file(), "ca.pem is now a file of its own");
    assert!(std::fs::read_to_string(dir.join("ca.pem"))
        .unwrap()
        .contains("BEGIN CERTIFICATE"));
}

#[test]
fn symlinked_keys_and_logs_are_refused() {
    for name in ["audit.jsonl", "audit-key.pem", "ca-key.pem", "store.redb"] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join(name)).unwrap();
        let (code, out) = run_once(&["run"], &dir);
        assert_eq!(code, 2, "{name}: {out}");
        assert!(out.contains("symbolic link"), "{name}: {out}");
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious",
            "{name}"
        );
    }
}

#[tokio::test]
async fn every_file_in_the_data_dir_is_private() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let bin = RunningBinary::start(&dir, &[]);
    bin.kill9();
    assert_eq!(mode(&dir), 0o700);
    for name in [
        "audit.jsonl",
        "audit-key.pem",
        "ca-key.pem",
        "ca.pem",
        "store.redb",
    ] {
        assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
    }
    // A key that others can read is refused.
    std::fs::set_permissions(
        dir.join("audit-key.pem"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let (code, out) = run_once(&["run"], &dir);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("chmod 600"), "{out}");
}
