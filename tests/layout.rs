//! The library's module graph has no import cycle: every `crate::…` and `super::…` path between
//! the files of `src/` is an edge from the file that names it to the file of the module it
//! names, and the graph must be acyclic (a newcomer reads a module after the ones it uses).
//! Comments are ignored; a path names the deepest module file that exists along it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `src/a/b.rs` and `src/a/b/mod.rs` -> `a::b`; `src/lib.rs` -> `` (the crate root).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts.join("::")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Code without comments (line comments, doc comments, block comments) and string literals'
/// contents (messages may spell paths).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' {
            out.push('"');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            out.push('"');
            i += 1;
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // A char literal ('"' included); lifetimes ('a) fall through.
            let end = text[i + 1..].find('\'').map_or(b.len(), |j| i + 2 + j);
            out.push_str("' '");
            i = end;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// The code before a file's `#[cfg(test)] mod tests` (at its end by convention): a unit-test
/// module's `super::` is the file itself, not its parent, and test-only uses are no layering.
fn without_unit_tests(code: &str) -> &str {
    match code.find("#[cfg(test)]\nmod tests") {
        Some(at) => &code[..at],
        None => code,
    }
}

fn ident_at(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

/// Every module path a `use` tree or inline path starting after `crate::` names: `a::b::C`,
/// `{a::X, b::{c, d}}`.
fn paths_after(s: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    let mut i = 0;
    loop {
        let rest = &s[i..];
        if let Some(inner) = rest.strip_prefix('{') {
            let mut used = 1;
            let mut sub = inner;
            loop {
                let n = paths_after(sub.trim_start(), path.clone(), out);
                let skipped = sub.len() - sub.trim_start().len();
                used += skipped + n;
                sub = &s[i + used..];
                let t = sub.trim_start();
                used += sub.len() - t.len();
                if let Some(after) = t.strip_prefix(',') {
                    used += 1;
                    sub = after;
                    if sub.trim_start().starts_with('}') {
                        let t2 = sub.trim_start();
                        used += sub.len() - t2.len() + 1;
                        return i + used;
                    }
                    continue;
                }
                if t.starts_with('}') {
                    return i + used + 1;
                }
                return i + used;
            }
        }
        let Some(id) = ident_at(rest) else {
            out.push(path);
            return i;
        };
        path.push(id.to_string());
        i += id.len();
        if s[i..].starts_with("::") {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

/// The module file a path names: its longest prefix that is a module of the crate.
fn resolve(path: &[String], modules: &BTreeSet<String>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| modules.contains(m))
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let me = module_of(&src, f);
        let all = code_only(&std::fs::read_to_string(f).unwrap());
        let code = without_unit_tests(&all);
        let mut paths = vec![];
        for (key, base) in [
            ("crate::", vec![]),
            ("super::", {
                let mut p: Vec<String> = me.split("::").map(String::from).collect();
                // A mod.rs/lib.rs file is its module; its `super` is the parent module.
                p.pop();
                p
            }),
        ] {
            let mut from = 0;
            while let Some(j) = code[from..].find(key) {
                let at = from + j;
                from = at + key.len();
                let before = code[..at].chars().next_back();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                    continue;
                }
                paths_after(&code[from..], base.clone(), &mut paths);
            }
        }
        let entry = edges.entry(me.clone()).or_default();
        for p in paths {
            if let Some(to) = resolve(&p, &modules) {
                if to != me && !to.is_empty() {
                    entry.insert(to);
                }
            }
        }
    }
    edges
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(next) = t.g.get(v) {
            for w in next {
                let w = w.as_str();
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = vec![];
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on: BTreeSet::new(),
        out: vec![],
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn the_parser_sees_nested_use_trees_and_inline_paths() {
    let mut out = vec![];
    paths_after("{a::X, b::{c, d::E}, f};", vec![], &mut out);
    let got: Vec<String> = out.iter().map(|p| p.join("::")).collect();
    assert_eq!(got, ["a::X", "b::c", "b::d::E", "f"]);
    assert_eq!(code_only("x // crate::a\n\"crate::b\" c"), "x \n\"\" c");
    assert_eq!(
        without_unit_tests("a\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n"),
        "a\n"
    );
}

#[test]
fn the_detector_finds_a_cycle() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    g.insert("d".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycles(&g), vec![vec!["a", "b", "c"]]);
}

#[test]
fn the_library_module_graph_has_no_cycle() {
    let g = graph();
    assert!(g.len() > 20, "only {} modules found", g.len());
    let found = cycles(&g);
    let mut msg = String::new();
    for c in &found {
        msg.push_str(&format!("\ncycle of {} modules:", c.len()));
        for m in c {
            let inside: Vec<&String> = g[m].iter().filter(|t| c.contains(t)).collect();
            msg.push_str(&format!("\n  {m} -> {inside:?}"));
        }
    }
    assert!(
        found.is_empty(),
        "import cycles in src/ (fix the misplaced names):{msg}"
    );
}
