//! Every rule, choice, invariant and fault id cited in the repository's code is explained in
//! `docs/` — a contributor who clones the repository can decode each one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_owned()
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                files(&path, out);
            }
        } else if ["rs", "proto", "md", "sh", "yml", "toml"]
            .iter()
            .any(|ext| name.ends_with(&format!(".{ext}")))
        {
            out.push(path);
        }
    }
}

/// The ids in `text`: `CH-10.2`-style rule ids, and the choices (A), invariants (I) and
/// faults (F) by number.
fn ids(text: &str) -> BTreeSet<String> {
    const FAMILIES: [&str; 9] = ["CH", "TM", "SC", "ES", "GE", "WE", "PD", "U", "SH"];
    let bytes = text.as_bytes();
    let mut found = BTreeSet::new();
    let boundary =
        |i: usize| i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
    let mut i = 0;
    while i < bytes.len() {
        if !boundary(i) || !bytes[i].is_ascii_uppercase() {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < bytes.len() && bytes[j].is_ascii_uppercase() {
            j += 1;
        }
        let prefix = &text[i..j];
        let (digits_from, dashed) = if bytes.get(j) == Some(&b'-') {
            (j + 1, true)
        } else {
            (j, false)
        };
        let mut k = digits_from;
        while k < bytes.len()
            && (bytes[k].is_ascii_digit()
                || (dashed && bytes[k] == b'.' && bytes.get(k + 1).is_some_and(u8::is_ascii_digit)))
        {
            k += 1;
        }
        let end_ok = k == bytes.len() || !(bytes[k].is_ascii_alphanumeric() || bytes[k] == b'_');
        // "I1a" is the one lettered invariant
        let lettered = !dashed && prefix == "I" && bytes.get(k) == Some(&b'a') && {
            let after = k + 1;
            after == bytes.len() || !bytes[after].is_ascii_alphanumeric()
        };
        if k > digits_from {
            let id = &text[i..k];
            if dashed && FAMILIES.contains(&prefix) && end_ok {
                found.insert(id.to_owned());
            } else if !dashed && ["A", "I", "F"].contains(&prefix) && k - digits_from <= 2 {
                if lettered {
                    found.insert(format!("{id}a"));
                } else if end_ok {
                    found.insert(id.to_owned());
                }
            }
        }
        i = k.max(i + 1);
    }
    found
}

#[test]
fn every_id_cited_in_code_is_explained_in_docs() {
    let root = root();
    let mut sources = Vec::new();
    for dir in ["crates", "services", "tests", "proto", "scripts", "docker"] {
        files(&root.join(dir), &mut sources);
    }
    sources.push(root.join("README.md"));
    let mut docs = Vec::new();
    files(&root.join("docs"), &mut docs);
    let documented: BTreeSet<String> = docs
        .iter()
        .flat_map(|p| ids(&std::fs::read_to_string(p).unwrap()))
        .collect();
    let mut cited = BTreeSet::new();
    for p in &sources {
        let text = std::fs::read_to_string(p).unwrap();
        cited.extend(ids(&text));
    }
    assert!(
        cited.len() > 200,
        "the id scanner found only {} ids; it is broken",
        cited.len()
    );
    let missing: Vec<&String> = cited.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "ids cited in code but explained nowhere in docs/: {missing:?}"
    );
}

#[test]
fn the_id_scanner_reads_ids_and_nothing_else() {
    let got = ids("CH-10.2, SC-17.6. (A6) I1a I12 F11 WE-3 GPT-4 TM-8.3x HTTP-2 AB12 A123 X-1");
    let want: BTreeSet<String> = ["CH-10.2", "SC-17.6", "A6", "I1a", "I12", "F11", "WE-3"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(got, want);
}
