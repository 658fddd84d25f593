//! The layout shows the architecture, and this test keeps it true:
//!
//! - **No import cycle** in either crate: in `src/` (the library) and in `tools/src/` (the
//!   tools), every `crate::…` and `super::…` path between the files of a crate is an edge from
//!   the file that names it to the file of the module it names (through the root's `pub use`
//!   re-exports: `crate::Error` is `error`), and the graph must be acyclic (a newcomer reads a
//!   module after the ones it uses). `replayssm::…` paths in the tools are the other crate, not
//!   edges; `tools/src/main.rs` is a crate of its own. Comments, string literals and unit-test
//!   modules are ignored; a path names the deepest module file that exists along it.
//! - **The layer list in `src/lib.rs` is the real one**: its doc comment lists every top-level
//!   module of `src/` in layers, bottom-up, and no file uses a module of a higher layer.
//! - **No root item is both a module and a function or re-export**: a `pub mod X` at a crate's
//!   root shares its name with no `pub use …::X` or `pub fn X` there.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `src/a/b.rs` and `src/a/b/mod.rs` -> `a::b`; `src/lib.rs` -> `` (the crate root).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod") || parts == ["lib"] {
        parts.pop();
    }
    parts.join("::")
}

/// The library's files of a crate: every `.rs` under `dir` but the other crate roots there
/// (`main.rs`, `bin/`).
fn rust_files(src: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if dir == src && (p.file_name().unwrap() == "main.rs" || p.file_name().unwrap() == "bin") {
            continue;
        }
        if p.is_dir() {
            rust_files(src, &p, out);
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

/// Leading attributes (`#[…]`, `#![…]`) off a statement.
fn without_attributes(mut s: &str) -> &str {
    loop {
        s = s.trim_start();
        let Some(rest) = s.strip_prefix("#!").or_else(|| s.strip_prefix('#')) else {
            return s;
        };
        let mut depth = 0;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        s = &rest[end..];
    }
}

/// The statements at the top level of a file's code (item bodies skipped, `use` trees kept),
/// attributes off.
fn root_statements(code: &str) -> Vec<String> {
    let is_use = |s: &str| {
        let s = without_attributes(s);
        ["use ", "pub use ", "pub(crate) use "].iter().any(|p| s.starts_with(p))
    };
    let mut out = vec![];
    let mut stmt = String::new();
    let mut chars = code.chars();
    let mut tree = 0usize;
    while let Some(c) = chars.next() {
        match c {
            '{' if tree == 0 && !is_use(&stmt) => {
                out.push(without_attributes(&stmt).trim().to_string());
                stmt.clear();
                let mut depth = 1;
                while depth > 0 {
                    match chars.next() {
                        Some('{') => depth += 1,
                        Some('}') => depth -= 1,
                        None => break,
                        _ => {}
                    }
                }
            }
            '{' => {
                tree += 1;
                stmt.push(c);
            }
            '}' if tree > 0 => {
                tree -= 1;
                stmt.push(c);
            }
            ';' if tree == 0 => {
                out.push(without_attributes(&stmt).trim().to_string());
                stmt.clear();
            }
            _ => stmt.push(c),
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// What a crate root declares.
#[derive(Default, Debug)]
struct RootItems {
    /// `pub mod X` (a file or inline).
    mods: BTreeSet<String>,
    /// Each `pub use`: the name it binds and the path it names.
    uses: BTreeMap<String, Vec<String>>,
    /// `pub fn X`.
    fns: BTreeSet<String>,
}

fn root_items(root_code: &str) -> RootItems {
    let mut r = RootItems::default();
    for s in root_statements(root_code) {
        let words: Vec<&str> = s.split_whitespace().collect();
        match words.as_slice() {
            ["pub", "mod", name, ..] => {
                r.mods.insert(name.to_string());
            }
            ["pub", "fn", name, ..] => {
                let name = name.split(['(', '<']).next().unwrap();
                r.fns.insert(name.to_string());
            }
            ["pub", "use", ..] => {
                let tree = s["pub use".len()..].trim_start();
                assert!(
                    !tree.contains(" as ") && !tree.contains('*'),
                    "`pub {tree}`: a renamed or glob re-export at the root; teach tests/layout.rs its names"
                );
                let mut paths = vec![];
                paths_after(tree, vec![], &mut paths);
                for p in paths {
                    if let Some(name) = p.last() {
                        r.uses.insert(name.clone(), p);
                    }
                }
            }
            _ => {}
        }
    }
    r
}

/// One crate's library files and modules, and its root's items.
struct Crate {
    src: PathBuf,
    files: Vec<PathBuf>,
    modules: BTreeSet<String>,
    root: RootItems,
    /// File-level edges: module -> the modules its code names.
    graph: BTreeMap<String, BTreeSet<String>>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut files = vec![];
        rust_files(src, src, &mut files);
        files.sort();
        let modules = files.iter().map(|f| module_of(src, f)).collect();
        let root = root_items(&code_only(&std::fs::read_to_string(src.join("lib.rs")).unwrap()));
        let mut c = Crate {
            src: src.to_path_buf(),
            files,
            modules,
            root,
            graph: BTreeMap::new(),
        };
        c.graph = c.edges();
        c
    }

    fn library() -> Crate {
        Crate::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
    }

    fn tools() -> Crate {
        Crate::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/src"))
    }

    /// The module file a path from the crate root names: its longest prefix that is a module
    /// of the crate, after a name the root re-exports is replaced by the path it names.
    fn resolve(&self, path: &[String]) -> Option<String> {
        let first = path.first()?;
        let expanded: Vec<String>;
        let path = match self.root.uses.get(first) {
            Some(full) if !self.modules.contains(first) => {
                expanded = full.iter().chain(&path[1..]).cloned().collect();
                &expanded[..]
            }
            _ => path,
        };
        (1..=path.len())
            .rev()
            .map(|n| path[..n].join("::"))
            .find(|m| self.modules.contains(m))
    }

    fn edges(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for f in &self.files {
            let me = module_of(&self.src, f);
            let all = code_only(&std::fs::read_to_string(f).unwrap());
            let code = without_unit_tests(&all);
            let mut paths = vec![];
            for key in ["crate::", "super::"] {
                let mut from = 0;
                while let Some(j) = code[from..].find(key) {
                    let at = from + j;
                    from = at + key.len();
                    let before = code[..at].chars().next_back();
                    if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                        continue;
                    }
                    let mut base: Vec<String> = vec![];
                    if key == "super::" {
                        // A mod.rs/lib.rs file is its module; its `super` is the parent module.
                        base = me.split("::").map(String::from).collect();
                        base.pop();
                        while code[from..].starts_with("super::") {
                            from += key.len();
                            base.pop();
                        }
                    }
                    paths_after(&code[from..], base, &mut paths);
                }
            }
            let entry = edges.entry(me.clone()).or_default();
            for p in paths {
                if let Some(to) = self.resolve(&p) {
                    if to != me && !to.is_empty() {
                        entry.insert(to);
                    }
                }
            }
        }
        edges
    }

    /// The top-level modules (files and folders of the crate's source).
    fn top_level(&self) -> BTreeSet<String> {
        self.modules
            .iter()
            .filter(|m| !m.is_empty())
            .map(|m| top_of(m).to_string())
            .collect()
    }
}

fn top_of(module: &str) -> &str {
    module.split("::").next().unwrap()
}

/// Every import cycle of `g`, one message each (empty: none).
fn cycle_report(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    cycles(g)
        .iter()
        .map(|c| {
            let mut msg = format!("cycle of {} modules:", c.len());
            for m in c {
                let inside: Vec<&String> = g[m].iter().filter(|t| c.contains(t)).collect();
                msg.push_str(&format!("\n  {m} -> {inside:?}"));
            }
            msg
        })
        .collect()
}

/// The layers the root's doc comment lists after "Layout, from the bottom up": each `- ` item
/// is a layer, its modules the `` [`name`] `` links in it that name no path (`a::b`) and no
/// type (capitalised).
fn layers_in_doc(root_text: &str) -> Vec<Vec<String>> {
    let doc: Vec<&str> = root_text.lines().map_while(|l| l.strip_prefix("//!")).collect();
    let Some(start) = doc.iter().position(|l| l.contains("Layout, from the bottom up")) else {
        return vec![];
    };
    let mut layers: Vec<String> = vec![];
    for line in &doc[start + 1..] {
        let l = line.strip_prefix(' ').unwrap_or(line);
        if let Some(item) = l.strip_prefix("- ") {
            layers.push(item.to_string());
        } else if l.starts_with("  ") && !layers.is_empty() {
            layers.last_mut().unwrap().push_str(l);
        } else if !layers.is_empty() || l.trim().is_empty() {
            break;
        }
    }
    layers
        .iter()
        .map(|text| {
            let mut names = vec![];
            let mut rest = text.as_str();
            while let Some(at) = rest.find("[`") {
                rest = &rest[at + 2..];
                let Some(end) = rest.find("`]") else { break };
                let name = &rest[..end];
                if !name.contains("::")
                    && name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                {
                    names.push(name.to_string());
                }
                rest = &rest[end..];
            }
            names
        })
        .collect()
}

/// What is wrong with the layer list `layers` of crate `c`: a top-level module missing or
/// listed twice, a name that is no module, and every file that uses a module of a higher layer.
fn layer_report(c: &Crate, layers: &[Vec<String>]) -> Vec<String> {
    let mut out = vec![];
    if layers.is_empty() {
        return vec!["no layer list (\"Layout, from the bottom up\" and `- ` items) in lib.rs".into()];
    }
    let top = c.top_level();
    let mut layer_of: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, layer) in layers.iter().enumerate() {
        for m in layer {
            if !top.contains(m) {
                out.push(format!("layer {i} lists `{m}`, which is no top-level module"));
            } else if let Some(j) = layer_of.insert(m, i) {
                out.push(format!("`{m}` is listed in layers {j} and {i}"));
            }
        }
    }
    for m in &top {
        if !layer_of.contains_key(m.as_str()) {
            out.push(format!("top-level module `{m}` is in no layer"));
        }
    }
    for (from, tos) in &c.graph {
        if from.is_empty() {
            continue;
        }
        for to in tos {
            let (a, b) = (top_of(from), top_of(to));
            if let (Some(&la), Some(&lb)) = (layer_of.get(a), layer_of.get(b)) {
                if lb > la {
                    out.push(format!("{from} (layer {la}) uses {to} (layer {lb}, above it)"));
                }
            }
        }
    }
    out
}

/// The longest-path layering of the top-level modules (bottom-up), for the failure message.
fn derived_layers(c: &Crate) -> Vec<Vec<String>> {
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in &c.graph {
        if from.is_empty() {
            continue;
        }
        let e = top.entry(top_of(from).to_string()).or_default();
        e.extend(tos.iter().map(|t| top_of(t).to_string()).filter(|t| t != top_of(from)));
    }
    let mut level: BTreeMap<String, usize> = BTreeMap::new();
    fn depth(
        m: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        level: &mut BTreeMap<String, usize>,
        seen: &mut Vec<String>,
    ) -> usize {
        if let Some(&l) = level.get(m) {
            return l;
        }
        if seen.iter().any(|s| s == m) {
            return 0; // a cycle between top-level modules: reported elsewhere
        }
        seen.push(m.to_string());
        let l = g.get(m).map_or(0, |ts| {
            ts.iter().map(|t| depth(t, g, level, seen) + 1).max().unwrap_or(0)
        });
        seen.pop();
        level.insert(m.to_string(), l);
        l
    }
    for m in c.top_level() {
        depth(&m, &top, &mut level, &mut vec![]);
    }
    let mut out: Vec<Vec<String>> = vec![];
    for (m, l) in level {
        if out.len() <= l {
            out.resize(l + 1, vec![]);
        }
        out[l].push(m);
    }
    out
}

/// Root modules that share their name with a re-export or a function at the root.
fn clash_report(c: &Crate) -> Vec<String> {
    c.root
        .mods
        .iter()
        .filter(|m| c.root.uses.contains_key(*m) || c.root.fns.contains(*m))
        .map(|m| {
            let other = match c.root.uses.get(m) {
                Some(p) => format!("`pub use {}`", p.join("::")),
                None => format!("`pub fn {m}`"),
            };
            format!(
                "`{m}` is both a `pub mod` and {other} at the root of {}",
                c.src.display()
            )
        })
        .collect()
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
    let code = "#![allow(x)]\npub mod a;\n#[doc(hidden)]\npub mod b {\n    pub use crate::a::*;\n}\npub use a::{f, g::H};\npub fn k() {}\nuse std::{x, y};";
    assert_eq!(
        root_statements(code),
        [
            "pub mod a",
            "pub mod b",
            "pub use a::{f, g::H}",
            "pub fn k()",
            "use std::{x, y}"
        ]
    );
    let r = root_items(code);
    assert_eq!(r.mods, BTreeSet::from(["a".into(), "b".into()]));
    assert_eq!(r.uses["H"], ["a", "g", "H"]);
    assert_eq!(r.fns, BTreeSet::from(["k".into()]));
}

#[test]
fn the_detector_finds_a_cycle() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    g.insert("d".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycles(&g), vec![vec!["a", "b", "c"]]);
    assert_eq!(cycle_report(&g).len(), 1);
}

/// A crate on disk with every fault the checks look for: each check must report it.
#[test]
fn each_check_fails_on_a_crate_that_breaks_it() {
    let dir = std::env::temp_dir().join(format!("replayssm-layout-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    let write = |path: &str, text: &str| std::fs::write(src.join(path), text).unwrap();
    write(
        "lib.rs",
        "//! Layout, from the bottom up:\n//! - [`a`] and [`Thing`];\n//! - [`b`], [`gone`].\n\npub mod a;\npub mod b;\npub mod c;\npub use a::f;\n/// Compat.\npub mod f {\n    pub use crate::a::*;\n}\n",
    );
    // a (layer 0) uses b (layer 1) and b uses a back: a cycle and a layer violation.
    write("a.rs", "use crate::b::inner::X;\npub fn f() {}\n");
    write("b/mod.rs", "pub mod inner;\n");
    write("b/inner.rs", "pub struct X;\nfn g() { super::super::a::f() }\n");
    write("c.rs", "// use crate::a; (a comment: no edge)\n");
    write("main.rs", "use crate::nothing::Here;\n");
    let c = Crate::read(&src);
    let g = &c.graph;
    let layers = layers_in_doc(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(g["a"], BTreeSet::from(["b::inner".to_string()]));
    assert_eq!(g["b::inner"], BTreeSet::from(["a".to_string()]));
    assert!(g["c"].is_empty() && !g.contains_key("main"), "{g:?}");
    assert_eq!(cycles(g), vec![vec!["a", "b::inner"]]);
    assert_eq!(layers, [vec!["a"], vec!["b", "gone"]]);
    let problems = layer_report(&c, &layers);
    assert!(!problems.iter().any(|p| p.starts_with("b::inner")), "{problems:?}");
    assert!(
        problems
            .iter()
            .any(|p| p == "a (layer 0) uses b::inner (layer 1, above it)"),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("`gone`, which is no top-level module")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p == "top-level module `c` is in no layer"),
        "{problems:?}"
    );
    let clash = clash_report(&c);
    assert_eq!(clash.len(), 1, "{clash:?}");
    assert!(
        clash[0].starts_with("`f` is both a `pub mod` and `pub use a::f`"),
        "{clash:?}"
    );
}

#[test]
fn the_layer_list_is_read_from_the_doc_comment() {
    let text = "//! Intro.\n//!\n//! Layout, from the bottom up (see):\n//! - [`ffi`] (the header), [`Thing`] and\n//!   [`limits`];\n//! - [`kernels`]: [`kernels::fold`] (F);\n//!\n//! After.\n\npub mod ffi;\n";
    assert_eq!(
        layers_in_doc(text),
        vec![
            vec!["ffi".to_string(), "limits".to_string()],
            vec!["kernels".to_string()]
        ]
    );
}

#[test]
fn the_library_module_graph_has_no_cycle() {
    let c = Crate::library();
    let g = &c.graph;
    assert!(g.len() > 20, "only {} modules found", g.len());
    let found = cycle_report(g);
    assert!(
        found.is_empty(),
        "import cycles in src/ (fix the misplaced names):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_tools_module_graph_has_no_cycle() {
    let c = Crate::tools();
    let g = &c.graph;
    assert!(g.len() > 20, "only {} modules found", g.len());
    assert!(g["bench::cli"].contains("bench"), "{:?}", g["bench::cli"]);
    let found = cycle_report(g);
    assert!(
        found.is_empty(),
        "import cycles in tools/src/ (fix the misplaced names):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_layer_list_of_src_lib_rs_is_the_real_one() {
    let c = Crate::library();
    let text = std::fs::read_to_string(c.src.join("lib.rs")).unwrap();
    let layers = layers_in_doc(&text);
    let problems = layer_report(&c, &layers);
    let derived: Vec<String> = derived_layers(&c)
        .iter()
        .enumerate()
        .map(|(i, l)| format!("  {i}: {}", l.join(", ")))
        .collect();
    assert!(
        problems.is_empty(),
        "src/lib.rs's layer list is not the module graph's:\n{}\n\nlayers as listed: {layers:?}\n\
         each module at its longest use chain (bottom-up; a module may sit higher):\n{}",
        problems.join("\n"),
        derived.join("\n")
    );
}

#[test]
fn no_root_item_is_both_a_module_and_a_function() {
    for c in [Crate::library(), Crate::tools()] {
        assert!(!c.root.mods.is_empty());
        let clash = clash_report(&c);
        assert!(clash.is_empty(), "{}", clash.join("\n"));
    }
    // The functions stay at the root.
    let lib = Crate::library();
    for f in [
        "decode",
        "recurrent",
        "verify",
        "fold",
        "replay",
        "verify_fold",
        "materialize",
    ] {
        assert!(lib.root.uses.contains_key(f), "replayssm::{f} is no longer re-exported");
    }
}
