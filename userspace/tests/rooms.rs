//! The crate's map holds: every room of `src/` imports only the rooms the
//! table in the crate documentation (`src/lib.rs`, between `<!-- rooms
//! -->` and `<!-- /rooms -->`) allows it, and no files import each other
//! in a circle. Imports are read from the code as text: `crate::ROOM` in
//! the library, `cfctl::ROOM` in the binary; `super::NAME` names a sibling
//! file, and the module a file is in contains it (an import of a parent's
//! own item is no arrow). The checks run on fixed examples too, which they
//! must refuse, so that a check that accepts everything fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A file of `src/`, by its path there (`agent/mod.rs`), and its text.
type Files = BTreeMap<String, String>;

/// The room of a file: its first directory, the file's own stem at the
/// top, `cfctl` for the binary.
fn room_of(file: &str) -> String {
    match file.split_once('/') {
        Some(("bin", _)) => "cfctl".to_owned(),
        Some((room, _)) => room.to_owned(),
        None => file.trim_end_matches(".rs").to_owned(),
    }
}

/// The rooms each room may import, from the table of `lib`.
fn allowed(lib: &str) -> BTreeMap<String, BTreeSet<String>> {
    let start = lib.find("<!-- rooms -->").expect("the rooms table's start");
    let end = lib.find("<!-- /rooms -->").expect("the rooms table's end");
    let mut rooms = BTreeMap::new();
    for row in lib[start..end]
        .lines()
        .skip(3)
        .filter(|row| row.contains('|'))
    {
        let cells: Vec<&str> = row
            .trim_start_matches("//!")
            .split('|')
            .map(str::trim)
            .collect();
        let [_, room, _, imports, _] = cells[..] else {
            panic!("a rooms row of three cells: {row}");
        };
        let name = |cell: &str| {
            cell.split_whitespace()
                .next()
                .unwrap_or_default()
                .trim_matches(|c| matches!(c, '[' | ']' | '`'))
                .to_owned()
        };
        let imports = imports
            .split(',')
            .map(name)
            .filter(|import| !import.is_empty())
            .collect();
        rooms.insert(name(room), imports);
    }
    rooms
}

/// The code of `text` without its comments.
fn code(text: &str) -> String {
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names that follow `prefix` in `text` (`crate::` gives `store` of
/// `crate::store::Store`), with the path after each.
fn paths_after<'t>(text: &'t str, prefix: &str) -> Vec<Vec<&'t str>> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let path: Vec<&str> = rest
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .next()
            .unwrap_or_default()
            .split("::")
            .filter(|part| !part.is_empty())
            .collect();
        found.push(path);
    }
    found
}

/// Imports of a room the table does not allow, as `FILE: ROOM -> ROOM`.
fn forbidden_imports(files: &Files, allowed: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut forbidden = Vec::new();
    for (file, text) in files {
        let room = room_of(file);
        let prefix = if room == "cfctl" {
            "cfctl::"
        } else {
            "crate::"
        };
        let Some(may) = allowed.get(&room) else {
            forbidden.push(format!("{file}: room {room} is not in the table"));
            continue;
        };
        for path in paths_after(&code(text), prefix) {
            let Some(&target) = path.first() else {
                continue;
            };
            // Items of the crate root: the map ABI and the exported macros.
            let room_like = allowed.contains_key(target);
            if room_like && target != room && !may.contains(target) {
                forbidden.push(format!("{file}: {room} -> {target}"));
            }
        }
    }
    forbidden.sort();
    forbidden.dedup();
    forbidden
}

/// The file of module path `path` under `src/`, if one of `files`.
fn file_of(files: &Files, path: &[&str]) -> Option<String> {
    (1..=path.len()).rev().find_map(|len| {
        let module = path[..len].join("/");
        [format!("{module}.rs"), format!("{module}/mod.rs")]
            .into_iter()
            .find(|candidate| files.contains_key(candidate))
    })
}

/// The module path of `file` (`sources/feed/mod.rs` is `sources::feed`).
fn module_of(file: &str) -> Vec<&str> {
    let trimmed = file.trim_end_matches(".rs").trim_end_matches("/mod");
    trimmed.split('/').collect()
}

/// Every file each file imports.
fn file_arrows(files: &Files) -> BTreeMap<String, BTreeSet<String>> {
    let mut arrows: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, text) in files.iter().filter(|(file, _)| !file.starts_with("bin/")) {
        let code = code(text);
        let module = module_of(file);
        let parent = &module[..module.len().saturating_sub(1)];
        let mut targets: Vec<Vec<&str>> = paths_after(&code, "crate::");
        for path in paths_after(&code, "super::") {
            let mut whole = parent.to_vec();
            whole.extend(path);
            targets.push(whole);
        }
        for path in targets {
            let Some(target) = file_of(files, &path) else {
                continue;
            };
            // A file's own module, or one it is inside of, contains it.
            let containing = module.starts_with(&module_of(&target));
            if target != *file && !containing {
                arrows.entry(file.clone()).or_default().insert(target);
            }
        }
    }
    arrows
}

/// One circle of files that import each other, if there is one.
fn a_circle(arrows: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        file: &str,
        arrows: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|seen| seen == file) {
            return Some(path[at..].to_vec());
        }
        if !done.insert(file.to_owned()) {
            return None;
        }
        path.push(file.to_owned());
        for next in arrows.get(file).into_iter().flatten() {
            if let Some(circle) = visit(next, arrows, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    arrows
        .keys()
        .find_map(|file| visit(file, arrows, &mut Vec::new(), &mut done))
}

/// Every `.rs` file under `dir`, by its path below `dir`.
fn read_tree(dir: &Path) -> Files {
    let mut files = Files::new();
    let mut pending: Vec<PathBuf> = vec![dir.to_owned()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).expect("reading the source tree") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let name = path
                    .strip_prefix(dir)
                    .expect("below src")
                    .to_string_lossy()
                    .into_owned();
                files.insert(
                    name,
                    std::fs::read_to_string(&path).expect("reading a file"),
                );
            }
        }
    }
    files
}

#[test]
fn every_room_imports_only_what_the_map_allows_and_no_files_import_in_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = read_tree(&src);
    let lib = files.remove("lib.rs").expect("src/lib.rs");
    let allowed = allowed(&lib);
    assert!(allowed.len() >= 10, "the table was read: {allowed:?}");
    let forbidden = forbidden_imports(&files, &allowed);
    assert!(
        forbidden.is_empty(),
        "imports the map forbids:\n{}",
        forbidden.join("\n")
    );
    assert_eq!(
        a_circle(&file_arrows(&files)),
        None,
        "files that import each other"
    );
}

#[test]
fn the_checks_refuse_a_forbidden_import_and_a_circle() {
    let lib = "//! <!-- rooms -->\n//! | room | what | may import |\n//! |---|---|---|\n\
               //! | [`store`] | entries | `time` |\n//! | [`time`] | time | |\n\
               //! | [`agent`] | the agent | `store` |\n//! <!-- /rooms -->\n";
    let allowed = allowed(lib);
    let files = |pairs: &[(&str, &str)]| -> Files {
        pairs
            .iter()
            .map(|(file, text)| (file.to_string(), text.to_string()))
            .collect()
    };
    let good = files(&[
        (
            "store/mod.rs",
            "use crate::time::now;\nmod state;\nuse state::x;",
        ),
        (
            "store/state.rs",
            "use super::Store; // crate::agent in a comment",
        ),
        ("agent/mod.rs", "use crate::store::Store;"),
        ("time.rs", "use crate::Setting;"),
    ]);
    assert_eq!(forbidden_imports(&good, &allowed), Vec::<String>::new());
    assert_eq!(a_circle(&file_arrows(&good)), None);
    let forbidden = files(&[
        ("store/mod.rs", "use crate::agent::Agent;"),
        ("agent/mod.rs", "use crate::store::Store;"),
    ]);
    assert_eq!(
        forbidden_imports(&forbidden, &allowed),
        ["store/mod.rs: store -> agent"]
    );
    let circle = files(&[
        ("store/mod.rs", "mod a;\nmod b;"),
        ("store/a.rs", "use super::b::B;"),
        ("store/b.rs", "use crate::store::a::A;"),
    ]);
    assert_eq!(forbidden_imports(&circle, &allowed), Vec::<String>::new());
    assert_eq!(
        a_circle(&file_arrows(&circle)),
        Some(vec!["store/a.rs".to_owned(), "store/b.rs".to_owned()])
    );
}
