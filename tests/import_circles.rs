//! scripts/circles.sh, the check that no crate's sibling modules import each other in a
//! circle (CI's `layers` stage): it passes on this workspace (with the circles it still
//! lists as known), and fails on a crate planted with a circle, including one that only a
//! re-export or a `super::` path makes.

use std::path::Path;
use std::process::Command;

/// Writes a crate of `files` (path under src/, text) into a fresh folder; returns it.
fn planted(name: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("offload-circles-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in files {
        let path = dir.join("src").join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

/// Runs the check on `root` (the workspace when `None`): (passed, output).
fn check(root: Option<&Path>) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/circles.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(script);
    if let Some(root) = root {
        cmd.arg(root);
    }
    let out = cmd.output().expect("run bash scripts/circles.sh");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn the_workspace_has_no_circle_but_the_known_ones() {
    let (passed, text) = check(None);
    assert!(passed, "{text}");
    assert!(text.contains("no new circle"), "{text}");
}

#[test]
fn a_planted_circle_fails_and_is_named() {
    let dir = planted(
        "plain",
        &[
            ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("a.rs", "use crate::b::B;\npub struct A(B);\n"),
            (
                "b.rs",
                "pub struct B;\npub fn f() -> crate::a::A { todo!() }\n",
            ),
            // c only uses a: outside the circle.
            ("c.rs", "pub fn g(_: crate::a::A) {}\n"),
        ],
    );
    let (passed, text) = check(Some(&dir));
    assert!(!passed, "{text}");
    assert!(text.contains("between a, b:"), "{text}");
    assert!(text.contains("a -> b") && text.contains("b -> a"), "{text}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_circle_through_a_reexport_or_super_in_a_folder_fails() {
    let dir = planted(
        "folder",
        &[
            ("lib.rs", "mod parts;\npub use parts::Thing;\n"),
            // The folder's mod.rs re-exports its children's items; its own uses of them
            // do not count (a parent and its children are not siblings).
            (
                "parts/mod.rs",
                "mod one;\nmod two;\npub use one::Thing;\npub use two::Other;\n",
            ),
            // one -> two through the parent's re-export, two -> one through the crate
            // root's.
            (
                "parts/one.rs",
                "use super::Other;\npub struct Thing(Other);\n",
            ),
            (
                "parts/two.rs",
                "pub struct Other;\n// crate::parts::one in a comment is no use\nfn f(_: crate::Thing) {}\n",
            ),
        ],
    );
    let (passed, text) = check(Some(&dir));
    assert!(!passed, "{text}");
    assert!(text.contains("parts/ between one, two:"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();

    // The same without the arrow back passes.
    let dir = planted(
        "folder-ok",
        &[
            ("lib.rs", "mod parts;\npub use parts::Thing;\n"),
            (
                "parts/mod.rs",
                "mod one;\nmod two;\npub use one::Thing;\npub use two::Other;\n",
            ),
            (
                "parts/one.rs",
                "use super::Other;\npub struct Thing(Other);\n",
            ),
            (
                "parts/two.rs",
                "pub struct Other;\n// crate::Thing here is only a comment\n",
            ),
        ],
    );
    let (passed, text) = check(Some(&dir));
    assert!(passed, "{text}");
    std::fs::remove_dir_all(dir).unwrap();
}
