//! The module graph of a crate's `src/`: which file uses which (from its
//! `crate::`, `super::` and `self::` paths, comments and strings skipped),
//! and the cycles in it. Shared by the protocol crates' `module_graph`
//! tests, so a circle of files (two files importing each other) fails a
//! test instead of waiting for a reviewer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every `.rs` file under `src`, by module path (`""` for the crate root,
/// `"pdu::framer"` for `pdu/framer.rs` or `pdu/framer/mod.rs`).
fn modules(src: &Path, prefix: &[String], out: &mut BTreeMap<Vec<String>, String>) {
    let mut entries: Vec<_> =
        std::fs::read_dir(src).expect("read src").map(|e| e.expect("entry").path()).collect();
    entries.sort();
    for p in entries {
        let name = p.file_stem().expect("name").to_string_lossy().to_string();
        if p.is_dir() {
            let mut sub = prefix.to_vec();
            sub.push(name);
            modules(&p, &sub, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let mut m = prefix.to_vec();
            if name != "mod" && name != "lib" {
                m.push(name);
            }
            out.insert(m, std::fs::read_to_string(&p).expect("read file"));
        }
    }
}

/// `code` with comments, string and char literals blanked out.
fn strip(code: &str) -> String {
    let c: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let at = |i: usize, k: usize| c.get(i + k).copied().unwrap_or('\0');
    let mut i = 0;
    while i < c.len() {
        if at(i, 0) == '/' && at(i, 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if at(i, 0) == '/' && at(i, 1) == '*' {
            i += 2;
            while i < c.len() && !(c[i] == '*' && c.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i += 2;
        } else if at(i, 0) == 'r'
            && (at(i, 1) == '"' || (at(i, 1) == '#' && (at(i, 2) == '"' || at(i, 2) == '#')))
            && !(i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            // Raw string r"..", r#".."#, ...
            let mut hashes = 0;
            i += 1;
            while at(i, 0) == '#' {
                hashes += 1;
                i += 1;
            }
            i += 1;
            loop {
                if i >= c.len() {
                    break;
                }
                if c[i] == '"' && (1..=hashes).all(|k| c.get(i + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if at(i, 0) == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if at(i, 0) == '\'' && (at(i, 1) == '\\' || at(i, 2) == '\'') {
            // A char literal (a lifetime has no closing quote after one char).
            i += 1;
            while i < c.len() && c[i] != '\'' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

fn ident_at(c: &[char], mut i: usize) -> (String, usize) {
    let start = i;
    while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
        i += 1;
    }
    (c[start..i].iter().collect(), i)
}

/// The paths (as segment lists) named from position `i` on, after a `::`:
/// `a::b`, or every item of a group `{a::b, c}`.
fn paths_from(c: &[char], i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    if c.get(i) == Some(&'{') {
        let mut depth = 0;
        let mut j = i;
        let mut item_start = i + 1;
        while j < c.len() {
            match c[j] {
                '{' => depth += 1,
                '}' | ',' if depth == 1 => {
                    let mut k = item_start;
                    while k < c.len() && c[k].is_whitespace() {
                        k += 1;
                    }
                    paths_from(c, k, prefix.clone(), out);
                    item_start = j + 1;
                    if c[j] == '}' {
                        return;
                    }
                }
                '}' => depth -= 1,
                _ => {}
            }
            j += 1;
        }
        return;
    }
    let (name, end) = ident_at(c, i);
    if name.is_empty() {
        out.push(prefix);
        return;
    }
    let mut p = prefix;
    p.push(name);
    if c.get(end) == Some(&':') && c.get(end + 1) == Some(&':') {
        paths_from(c, end + 2, p, out);
    } else {
        out.push(p);
    }
}

/// Edges of one file: the modules (other files) its paths resolve to.
fn edges(module: &[String], code: &str, known: &BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    let code = strip(code);
    let c: Vec<char> = code.chars().collect();
    let mut inline: Vec<(String, i32)> = Vec::new(); // inline `mod x {` blocks and their depth
    let mut depth = 0;
    let mut found = BTreeSet::new();
    let mut i = 0;
    while i < c.len() {
        let boundary = i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_' || c[i - 1] == ':');
        match c[i] {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            _ => {}
        }
        if !boundary || !c[i].is_alphabetic() {
            i += 1;
            continue;
        }
        let (word, end) = ident_at(&c, i);
        if word == "mod" {
            let mut k = end;
            while c.get(k).is_some_and(|x| x.is_whitespace()) {
                k += 1;
            }
            let (name, e) = ident_at(&c, k);
            let mut k = e;
            while c.get(k).is_some_and(|x| x.is_whitespace()) {
                k += 1;
            }
            if c.get(k) == Some(&'{') {
                inline.push((name, depth));
            }
        }
        let is_path = matches!(word.as_str(), "crate" | "super" | "self")
            && c.get(end) == Some(&':')
            && c.get(end + 1) == Some(&':');
        if !is_path {
            i = end;
            continue;
        }
        // Where the path starts: the module of this point in the file.
        let mut here: Vec<String> = module.to_vec();
        here.extend(inline.iter().map(|(n, _)| n.clone()));
        let mut base: Vec<String> = Vec::new();
        let mut rest_at = end + 2;
        match word.as_str() {
            "crate" => {}
            "self" => base = here.clone(),
            _ => {
                base = here.clone();
                base.pop();
                // super::super::...
                loop {
                    let (w, e) = ident_at(&c, rest_at);
                    if w == "super" && c.get(e) == Some(&':') {
                        base.pop();
                        rest_at = e + 2;
                    } else {
                        break;
                    }
                }
            }
        }
        let mut paths = Vec::new();
        paths_from(&c, rest_at, base, &mut paths);
        for p in paths {
            // The longest prefix that is a file of its own.
            let target = (0..=p.len()).rev().map(|n| p[..n].to_vec()).find(|m| known.contains(m));
            if let Some(t) = target
                && !t.is_empty()
                && t != module
            {
                found.insert(t);
            }
        }
        i = end;
    }
    found
}

/// The cycles among the files of `src`, each as a list of module paths.
pub(crate) fn cycles(src: &Path) -> Vec<Vec<String>> {
    let mut files = BTreeMap::new();
    modules(src, &[], &mut files);
    let known: BTreeSet<Vec<String>> = files.keys().cloned().collect();
    let graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> =
        files.iter().map(|(m, code)| (m.clone(), edges(m, code, &known))).collect();
    // Depth-first search for back edges.
    let mut found = Vec::new();
    let mut state: BTreeMap<Vec<String>, u8> = BTreeMap::new(); // 1 on the stack, 2 done
    fn visit(
        m: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
        found: &mut Vec<Vec<String>>,
    ) {
        state.insert(m.clone(), 1);
        stack.push(m.clone());
        for n in graph.get(m).into_iter().flatten() {
            match state.get(n) {
                Some(1) => {
                    let from = stack.iter().position(|s| s == n).expect("on the stack");
                    found.push(stack[from..].iter().map(|s| s.join("::")).collect());
                }
                Some(_) => {}
                None => visit(n, graph, state, stack, found),
            }
        }
        stack.pop();
        state.insert(m.clone(), 2);
    }
    for m in graph.keys() {
        if !state.contains_key(m) {
            visit(m, &graph, &mut state, &mut Vec::new(), &mut found);
        }
    }
    found
}

/// Every edge, for a failure message or a look at the layering.
pub(crate) fn describe(src: &Path) -> String {
    let mut files = BTreeMap::new();
    modules(src, &[], &mut files);
    let known: BTreeSet<Vec<String>> = files.keys().cloned().collect();
    let mut s = String::new();
    for (m, code) in &files {
        let e: Vec<String> = edges(m, code, &known).iter().map(|t| t.join("::")).collect();
        s.push_str(&format!(
            "{} -> {}\n",
            if m.is_empty() { "(root)".into() } else { m.join("::") },
            e.join(", ")
        ));
    }
    s
}

/// Checks the checker on a tiny crate with one cycle.
pub(crate) fn self_test() {
    let dir = std::env::temp_dir().join(format!("module-graph-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("p")).expect("mkdir");
    let files = [
        ("lib.rs", "pub mod a; pub mod b; pub mod p;"),
        // a uses b through a group import; b uses a in a path expression.
        ("a.rs", "use crate::{b::X, p}; // crate::p::q is a comment\nfn f() { let s = \"crate::p::q\"; }"),
        ("b.rs", "pub struct X; fn g() -> u8 { crate::a::h() }"),
        ("p/mod.rs", "pub mod q; pub use self::q::Y;"),
        // q's inline test module uses super (= q itself), not p: no cycle.
        ("p/q.rs", "pub struct Y; #[cfg(test)] mod tests { use super::*; }"),
    ];
    for (name, code) in files {
        std::fs::write(dir.join(name), code).expect("write");
    }
    let c = cycles(&dir);
    let d = describe(&dir);
    std::fs::remove_dir_all(&dir).expect("cleanup");
    assert_eq!(c, vec![vec!["a".to_string(), "b".to_string()]], "{d}");
    assert!(d.contains("p -> p::q\n") && d.contains("p::q -> \n"), "{d}");
}
