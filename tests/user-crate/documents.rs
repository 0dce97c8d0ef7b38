// README.md and docs/*.md (by name), as paths from offload's root `root`: the documents whose
// examples the user crate builds. Included by the user crate's build script and by
// tests/user_crate.rs, which checks that each example ran.

/// README.md, then docs/*.md by name, as paths from `root`.
fn documents(root: &std::path::Path) -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("read offload's docs/")
        .map(|e| {
            e.expect("a docs/ entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".into());
    docs
}
